"""An agent that went away between two calls (a restart, a crash, a VM
reset): an exec that meets its dead kept-alive connection raises
AgentWentAway, says whether the command may have started, and is not sent
again; a read is sent again on a fresh connection."""

from __future__ import annotations

import socket
import threading
from typing import Iterator, List

import pytest

import lab_agent

TOKEN = "t" * 40
READY = (
    b'{"state":"ready","cloud_init":{"done":true,"errors":[]},'
    b'"setup":{"state":"succeeded","exit_code":0}}'
)
EXEC = (
    b'{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":1,"stdout":"",'
    b'"stderr":"","stdout_truncated":false,"stderr_truncated":false}'
)


class OneAnswerPerConnection:
    """A stand-in for an agent that answers the first request on each
    connection and goes away under the second: it reads that one whole and
    closes without a byte of answer."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.unanswered: List[bytes] = []  # heads of the requests it died under
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            for served in range(2):
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.lower().split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                while len(buf) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                buf = buf[length:]
                if served == 1:
                    with self.lock:
                        self.unanswered.append(head)
                    return
                body = EXEC if head.startswith(b"POST") else READY
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def flaky() -> Iterator[OneAnswerPerConnection]:
    s = OneAnswerPerConnection()
    yield s
    s.close()


def test_an_exec_on_a_dead_kept_alive_connection_raises_agent_went_away(flaky) -> None:
    c = lab_agent.Client(flaky.url, token=TOKEN)
    # The first exec opens a connection. The next goes over it once the
    # pool has it back (almost always at once); one that opened another
    # connection instead is answered, and the next tries again.
    for _ in range(20):
        try:
            assert c.exec("true").exit_code == 0
        except lab_agent.AgentWentAway as e:
            err = e
            break
    else:
        pytest.fail("no exec went over a kept-alive connection in 20 tries")
    assert isinstance(err, lab_agent.Unreachable)
    assert err.may_have_started is True
    assert "may have started" in str(err), str(err)
    assert "went away" in str(err), str(err)
    assert err.hint and "may have run" in err.hint, err.hint
    assert err.status is None
    with flaky.lock:
        died_under = list(flaky.unanswered)
    assert len(died_under) == 1 and died_under[0].startswith(b"POST /v1/exec"), died_under


def test_a_read_on_a_dead_kept_alive_connection_is_sent_again(flaky) -> None:
    c = lab_agent.Client(flaky.url, token=TOKEN)
    for _ in range(5):
        assert c.ready().state == "ready"
        assert c.ready().state == "ready"


def test_other_errors_have_no_may_have_started() -> None:
    # A closed port: refused, nothing was sent.
    s = socket.create_server(("127.0.0.1", 0))
    url = "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    with pytest.raises(lab_agent.Unreachable) as e:
        lab_agent.Client(url, token=TOKEN).exec("true")
    assert not isinstance(e.value, lab_agent.AgentWentAway)
    assert e.value.may_have_started is None
