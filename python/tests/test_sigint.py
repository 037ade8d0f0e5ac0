"""Ctrl-C at any point of a blocking call's life: a child Python runs
blocking calls that would not end on their own (an exec of a long command,
a wait for a VM that never gets ready, a streamed exec mid-stream, a
connection that is accepted and never answered), and SIGINT comes at
delays spread over the first 300 ms of each: the open, the request, the
wait, between two chunks. Every one must raise KeyboardInterrupt, the child
must go on to the next call and exit cleanly: no hang, no crash.

Behaviour, not latency: each interrupt gets a generous bound (a loaded
2-core machine), and the whole run has one after which the child is killed
and the test fails with what it printed."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Iterator, List

import pytest

import lab_agent
from conftest import Agents

ROUNDS = 32
KINDS = ["exec", "wait", "stream", "silent"]
MAX_DELAY = 0.3
# Per interrupt, and for the whole run: bounds for a hang, not timings.
INTERRUPT_BOUND = 30.0
RUN_BOUND = 300.0

CHILD = textwrap.dedent(
    """
    import signal, sys, lab_agent
    # Set here, not inherited: a suite started as a background job has
    # SIGINT ignored, and Python keeps an ignored SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    busy_url, busy_token, setup_url, setup_token, silent_url, rounds, mark = sys.argv[1:8]
    busy = lab_agent.Client(busy_url, token=busy_token)
    setting_up = lab_agent.Client(setup_url, token=setup_token)
    silent = lab_agent.Client(silent_url, token="t" * 40, request_timeout=600)
    kinds = KINDS
    for n in range(int(rounds)):
        kind = kinds[n % len(kinds)]
        try:
            print("call", n, kind, flush=True)
            if kind == "exec":
                busy.exec("exec -a %s sleep 1000" % mark, timeout_secs=600, profile="none")
            elif kind == "wait":
                setting_up.wait_ready(600)
            elif kind == "stream":
                for chunk in busy.exec_stream(
                    "echo go; exec -a %s sleep 1000" % mark, timeout_secs=600, profile="none"
                ):
                    pass
            else:
                silent.ready()
            print("returned", n, flush=True)
        except KeyboardInterrupt:
            print("interrupted", n, flush=True)
        except Exception as e:
            print("error", n, type(e).__name__, str(e).replace("\\n", " "), flush=True)
    print("done", flush=True)
    """
).replace("KINDS", repr(KINDS))


class Silent:
    """A loopback port whose connections the kernel accepts (its backlog)
    and nothing ever answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]


@pytest.fixture
def silent() -> Iterator[Silent]:
    s = Silent()
    yield s
    s.sock.close()


def delay(n: int) -> float:
    """Round n's delay: 0 to MAX_DELAY in ROUNDS steps, in an order that
    gives each kind of call delays from all over the range."""
    return ((n * 7) % ROUNDS) * MAX_DELAY / (ROUNDS - 1)


def test_sigint_at_any_point_of_a_blocking_call_raises_keyboard_interrupt(
    agents: Agents, silent: Silent, tmp_path: Path
) -> None:
    busy = agents.start()
    # The interrupted commands' name (argv[0]), to find any left running.
    mark = "lab-py-sigint-%d" % os.getpid()
    # A setup that runs until the test ends (its flag is removed), so
    # wait_ready never returns; no process outlives the test.
    flag = tmp_path / "setting-up"
    flag.touch()
    setting_up = agents.start(setup="while [ -e %s ]; do sleep 0.2; done\n" % flag)
    lab_agent.Client(busy.url, token=busy.token).wait_ready(60)

    child = subprocess.Popen(
        [
            sys.executable, "-u", "-c", CHILD,
            busy.url, busy.token, setting_up.url, setting_up.token, silent.url, str(ROUNDS), mark,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: "queue.Queue[str]" = queue.Queue()
    said: List[str] = []

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line.rstrip("\n"))
        lines.put("")  # EOF

    threading.Thread(target=read, daemon=True).start()
    run_end = time.monotonic() + RUN_BOUND

    def next_line(bound: float) -> str:
        end = min(time.monotonic() + bound, run_end)
        try:
            line = lines.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            child.kill()
            pytest.fail("the child hung; it said:\n" + "\n".join(said))
        said.append(line)
        return line

    def expect(prefix: str, bound: float) -> None:
        line = next_line(bound)
        assert line == prefix, "expected %r, got %r; the child said:\n%s" % (
            prefix, line, "\n".join(said),
        )

    slowest = 0.0
    try:
        for n in range(ROUNDS):
            expect("call %d %s" % (n, KINDS[n % len(KINDS)]), 60)
            time.sleep(delay(n))
            sent = time.monotonic()
            child.send_signal(signal.SIGINT)
            expect("interrupted %d" % n, INTERRUPT_BOUND)
            slowest = max(slowest, time.monotonic() - sent)
        expect("done", 60)
        assert child.wait(timeout=60) == 0, "the child exited %s:\n%s" % (
            child.returncode, "\n".join(said),
        )
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        flag.unlink()
    print("slowest KeyboardInterrupt: %.2f s after its SIGINT" % slowest)

    # The agent that ran the interrupted commands still serves (their exec
    # slots were given back), and none of them is left running.
    c = lab_agent.Client(busy.url, token=busy.token)
    assert c.exec("echo fine", profile="none").stdout == "fine\n"
    end = time.monotonic() + 30
    while running(mark) and time.monotonic() < end:
        time.sleep(0.1)
    assert not running(mark), "left running: %r" % running(mark)


def running(mark: str) -> List[int]:
    """The live processes whose argv[0] is `mark`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv0 = (d / "cmdline").read_bytes().split(b"\0")[0]
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv0 == mark.encode() and state != "Z":
            found.append(int(d.name))
    return found
