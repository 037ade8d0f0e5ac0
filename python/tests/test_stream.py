"""exec_stream and setup_log: output as it happens, from the blocking
iterator and the async one; a stream that breaks is an error, never a quiet
end; leaving a stream early ends the command."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

import lab_agent
from conftest import Agent, Agents
from lab_agent import StreamChunk

TOKEN = "t" * 40


def ready_client(agent: Agent) -> lab_agent.Client:
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(30)
    return c


def test_chunks_come_as_the_command_writes_them(agent: Agent, tmp_path: Path) -> None:
    """The first line arrives while the command still runs: it waits for a
    file the test makes only once it has that line."""
    c = ready_client(agent)
    go = tmp_path / "go"
    s = c.exec_stream(
        "echo one; while [ ! -e %s ]; do sleep 0.05; done; echo two >&2; echo three; exit 3"
        % go,
        timeout_secs=60,
        profile="none",
    )
    assert isinstance(s, lab_agent.ExecStream)
    assert next(s) == StreamChunk("stdout", "one\n")
    assert s.result is None and not s.closed
    go.touch()
    rest = list(s)
    assert sorted(rest, key=lambda ch: ch.stream) == [
        StreamChunk("stderr", "two\n"),
        StreamChunk("stdout", "three\n"),
    ], rest
    r = s.result
    assert isinstance(r, lab_agent.ExecResult)
    assert r.exit_code == 3 and not r.timed_out
    # Every byte was a chunk: the result does not repeat it.
    assert r.stdout == "" and r.stderr == ""
    assert s.closed
    with pytest.raises(StopIteration):
        next(s)


def test_the_caps_and_timeouts_of_exec_hold(agent: Agent) -> None:
    c = ready_client(agent)
    s = c.exec_stream("head -c 5000 /dev/zero | tr '\\0' x", max_output_bytes=100)
    assert "".join(ch.text for ch in s) == "x" * 100
    assert s.result is not None and s.result.stdout_truncated and s.result.exit_code == 0

    s = c.exec_stream("echo partial; sleep 30", timeout_secs=1, profile="none")
    assert [ch.text for ch in s] == ["partial\n"]
    assert s.result is not None and s.result.timed_out and s.result.exit_code is None


def test_a_command_that_cannot_start_raises_from_the_call(agent: Agent) -> None:
    c = ready_client(agent)
    with pytest.raises(lab_agent.Rejected) as e:
        c.exec_stream("true", user="no-such-user-here")
    assert e.value.status == 400 and "no-such-user-here" in str(e.value)
    with pytest.raises(ValueError, match="invalid exec request"):
        c.exec_stream("true", timeout_secs=0)

    a = lab_agent.AsyncClient(agent.url, token=agent.token)

    async def first() -> None:
        # Nothing is sent before the first __anext__, which raises.
        s = a.exec_stream("true", user="no-such-user-here")
        async for _ in s:
            pass

    with pytest.raises(lab_agent.Rejected):
        asyncio.run(first())


def test_the_async_iterator(agent: Agent, tmp_path: Path) -> None:
    ready_client(agent)
    a = lab_agent.AsyncClient(agent.url, token=agent.token)
    go = tmp_path / "go"

    async def run() -> Tuple[List[StreamChunk], lab_agent.ExecResult]:
        chunks: List[StreamChunk] = []
        async with a.exec_stream(
            "echo one; while [ ! -e %s ]; do sleep 0.05; done; echo two; exit 4" % go,
            profile="none",
        ) as s:
            assert isinstance(s, lab_agent.AsyncExecStream)
            async for ch in s:
                chunks.append(ch)
                go.touch()
        assert s.result is not None
        return chunks, s.result

    chunks, r = asyncio.run(run())
    assert chunks == [StreamChunk("stdout", "one\n"), StreamChunk("stdout", "two\n")]
    assert r.exit_code == 4


def test_one_read_at_a_time(agent: Agent) -> None:
    ready_client(agent)
    a = lab_agent.AsyncClient(agent.url, token=agent.token)

    async def run() -> None:
        s = a.exec_stream("echo one; sleep 30", profile="none")
        first = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)  # it takes the stream
        with pytest.raises(RuntimeError, match="one place at a time"):
            await s.__anext__()
        assert (await first) == StreamChunk("stdout", "one\n")
        await s.aclose()

    asyncio.run(run())


# -- leaving early ends the command -------------------------------------------

ALIVE = "echo $$; exec sleep 1000"


def gone(pid: int, within: float = 30) -> bool:
    """Whether `pid` is gone (or a zombie) within `within` seconds: a
    bound for a loaded machine, not a latency claim."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            state = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def first_pid(chunk: StreamChunk) -> int:
    assert chunk.stream == "stdout", chunk
    return int(chunk.text.strip())


def test_breaking_out_of_the_loop_kills_the_command(agent: Agent) -> None:
    c = ready_client(agent)
    pids = []
    # The iterator is dropped when the loop ends: no name holds it.
    for ch in c.exec_stream(ALIVE, profile="none"):
        pids.append(first_pid(ch))
        break
    gc.collect()
    assert gone(pids[0]), "pid %d still runs after the loop was left" % pids[0]

    # `with` closes it, whatever still refers to it.
    with c.exec_stream(ALIVE, profile="none") as s:
        pid = first_pid(next(s))
    assert s.closed and s.result is None
    assert gone(pid), "pid %d still runs after the with block" % pid
    with pytest.raises(StopIteration):
        next(s)

    # The agent still serves: nothing leaked its exec slots.
    assert c.exec("echo fine", profile="none").stdout == "fine\n"


def test_leaving_an_async_stream_kills_the_command(agent: Agent) -> None:
    ready_client(agent)
    a = lab_agent.AsyncClient(agent.url, token=agent.token)

    async def leave_the_loop() -> int:
        async for ch in a.exec_stream(ALIVE, profile="none"):
            return first_pid(ch)
        raise AssertionError("no chunk")

    async def cancel_a_read() -> int:
        s = a.exec_stream(ALIVE, profile="none")
        pid = first_pid(await s.__anext__())
        # Waits for a chunk that never comes; cancelled, it ends the stream.
        t = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0.2)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert s.closed
        return pid

    pid = asyncio.run(leave_the_loop())
    gc.collect()
    assert gone(pid), "pid %d still runs after the async loop was left" % pid
    pid = asyncio.run(cancel_a_read())
    assert gone(pid), "pid %d still runs after its read was cancelled" % pid


# -- a stream that breaks is an error -----------------------------------------


class OneAnswer:
    """Answers every request with `head` + `body` and closes the connection:
    a stream cut before its result, as a dying agent or something in
    between would."""

    def __init__(self, head: bytes, body: bytes) -> None:
        self.answer = head + body
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                conn.sendall(self.answer)

    def close(self) -> None:
        self.sock.close()


NDJSON = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n"


@pytest.fixture(
    params=[
        # The body ends (the connection closes) after a chunk, no result.
        (NDJSON + b"connection: close\r\n\r\n", b'{"stdout":"a\\n"}\n'),
        # A chunked body cut inside a chunk.
        (NDJSON + b"transfer-encoding: chunked\r\n\r\n", b'11\r\n{"stdout":"a\\n"}\n\r\n40\r\n{"std'),
    ],
    ids=["eof", "cut-chunk"],
)
def cut(request: pytest.FixtureRequest) -> Iterator[OneAnswer]:
    s = OneAnswer(*request.param)
    yield s
    s.close()


def test_a_stream_without_its_result_raises(cut: OneAnswer) -> None:
    c = lab_agent.Client(cut.url, token=TOKEN)
    s = c.exec_stream("true")
    assert next(s) == StreamChunk("stdout", "a\n")
    with pytest.raises(lab_agent.Unreachable) as e:
        next(s)
    assert not isinstance(e.value, lab_agent.AgentWentAway)
    assert s.result is None and s.closed
    with pytest.raises(StopIteration):
        next(s)

    async def run() -> List[StreamChunk]:
        got: List[StreamChunk] = []
        a = lab_agent.AsyncClient(cut.url, token=TOKEN)
        with pytest.raises(lab_agent.Unreachable):
            async for ch in a.exec_stream("true"):
                got.append(ch)
        return got

    assert asyncio.run(run()) == [StreamChunk("stdout", "a\n")]


def test_a_plain_answer_is_the_whole_output() -> None:
    """Something in between that answers the plain way: the output the
    result holds comes as chunks, the result after them."""
    body = (
        b'{"exit_code":1,"signal":null,"timed_out":false,"duration_ms":1,"stdout":"out",'
        b'"stderr":"err","stdout_truncated":false,"stderr_truncated":true}'
    )
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(
        body
    )
    s = OneAnswer(head, body)
    try:
        st = lab_agent.Client(s.url, token=TOKEN).exec_stream("true")
        assert list(st) == [StreamChunk("stdout", "out"), StreamChunk("stderr", "err")]
        assert st.result is not None
        assert st.result.exit_code == 1 and st.result.stderr_truncated
    finally:
        s.close()


# -- the setup log --------------------------------------------------------------


def test_the_setup_log_from_an_offset_and_long_polled(agents: Agents, tmp_path: Path) -> None:
    go = tmp_path / "go"
    agent = agents.start(
        setup="#!/bin/sh\necho first\nwhile [ ! -e %s ]; do sleep 0.05; done\necho second\n" % go
    )
    c = lab_agent.Client(agent.url, token=agent.token)
    # Up to the first line, waited for (the setup starts with the agent;
    # a login shell's own output may come before it).
    seen = b""
    end = time.monotonic() + 60
    while not seen.endswith(b"first\n") and time.monotonic() < end:
        log = c.setup_log(len(seen), wait=30)
        assert not log.restarted and log.next_offset == len(seen) + len(log.data), log
        seen += log.data
    assert seen.endswith(b"first\n"), seen
    assert log.text.endswith("first\n") and log.state == "running" and log.running, log
    offset = log.next_offset

    # From the offset: nothing new yet, at once without a wait.
    empty = c.setup_log(offset)
    assert empty.data == b"" and empty.next_offset == offset

    async def follow(offset: int) -> bytes:
        a = lab_agent.AsyncClient(agent.url, token=agent.token)
        got = b""
        end = time.monotonic() + 60
        while time.monotonic() < end:
            part = await a.setup_log(offset, wait=30)
            assert isinstance(part, lab_agent.SetupLog)
            got += part.data
            offset = part.next_offset
            if not part.running and part.data == b"":
                assert part.state == "succeeded", part
                return got
        raise AssertionError("the setup never ended: %r" % got)

    go.touch()
    assert asyncio.run(follow(offset)) == b"second\n"

    # Past the agent's most: refused before anything is sent.
    with pytest.raises(ValueError, match="0 to 60"):
        c.setup_log(0, wait=61)
