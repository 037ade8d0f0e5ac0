"""Real lab-agents on loopback for the package's tests.

tests/tests/python.rs builds the wheel, installs it into a fresh
virtualenv and runs pytest here with:
  LAB_AGENT_BIN  the agent binary (run as `lab-agent serve --no-cloud-init`)
  LABCTL_BIN     labctl, for comparing with what it prints
  LAB_AGENT_REPO the repository (examples/hello-lab)
Each agent gets its own temp dir (token file 0600, state dir, address file)
and is killed when its test ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

AGENT_BIN = os.environ.get("LAB_AGENT_BIN", "")
LABCTL_BIN = os.environ.get("LABCTL_BIN", "")
REPO = Path(os.environ.get("LAB_AGENT_REPO", Path(__file__).resolve().parents[2]))


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass
class Agent:
    proc: subprocess.Popen
    dir: Path
    url: str
    token: str
    token_file: Path

    def log(self) -> str:
        try:
            return (self.dir / "agent.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Agents:
    """Starts agents; stops them and removes their dirs at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: List[Agent] = []

    def mkdir(self, name: str) -> Path:
        """A folder other users can pass through (checks run as students)."""
        d = self.root / name
        d.mkdir()
        d.chmod(0o711)
        return d

    def start(
        self,
        setup: str = "true\n",
        listen: str = "127.0.0.1:0",
        lab_dir: Optional[Path] = None,
        token: Optional[str] = None,
        wait_bound: bool = True,
        extra_args: Optional[List[str]] = None,
    ) -> Agent:
        assert AGENT_BIN, "LAB_AGENT_BIN is not set (tests/tests/python.rs sets it)"
        d = Path(tempfile.mkdtemp(prefix="agent-", dir=self.root))
        d.chmod(0o711)
        token = token or new_token()
        token_file = d / "token"
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (token + "\n").encode())
        os.close(fd)
        script = d / "setup.sh"
        script.write_text(setup)
        script.chmod(0o755)
        addr_file = d / "addr"
        cmd = [
            AGENT_BIN, "serve", "--listen", listen, "--addr-file", str(addr_file),
            "--token-file", str(token_file), "--state-dir", str(d / "state"),
            "--no-cloud-init", "--run-setup", str(script),
        ]
        if lab_dir is not None:
            cmd += ["--lab-dir", str(lab_dir)]
        cmd += extra_args or []
        log = open(d / "agent.log", "wb")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        agent = Agent(proc, d, "http://" + listen, token, token_file)
        self.started.append(agent)
        if wait_bound:
            agent.url = "http://" + self._bound(agent, addr_file)
        return agent

    @staticmethod
    def _bound(agent: Agent, addr_file: Path) -> str:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                text = addr_file.read_text().strip()
                if text:
                    return text
            except FileNotFoundError:
                pass
            if agent.proc.poll() is not None:
                raise RuntimeError("lab-agent exited:\n" + agent.log())
            time.sleep(0.01)
        raise RuntimeError("lab-agent wrote no address:\n" + agent.log())

    def close(self) -> None:
        for a in self.started:
            a.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def agents(request: pytest.FixtureRequest) -> Iterator[Agents]:
    root = Path(tempfile.mkdtemp(prefix="lab-agent-py-"))
    root.chmod(0o711)  # checks may run as another user
    a = Agents(root)
    yield a
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for agent in a.started:
            print("--- lab-agent log (%s) ---\n%s" % (agent.url, agent.log()))
    a.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def agent(agents: Agents) -> Agent:
    return agents.start()


class ReservedPort:
    """A loopback port bound but not listening (SO_REUSEADDR, as the agent
    binds): connections are refused until an agent starts on it, and no
    other process can take it meanwhile."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def reserved_port() -> Iterator[ReservedPort]:
    p = ReservedPort()
    yield p
    p.close()


def is_root() -> bool:
    return os.geteuid() == 0


HOSTILE_AGENT_BIN = os.environ.get("HOSTILE_AGENT_BIN", "")


class Hostile:
    """Fake agents from the `hostile-agent` binary (tests/src/hostile.rs):
    each answers one way no lab-agent does. Stopped (stdin closed) at the
    end of the test."""

    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []

    def start(self, behaviour: str) -> str:
        assert HOSTILE_AGENT_BIN, "HOSTILE_AGENT_BIN is not set (tests/tests/python.rs sets it)"
        p = subprocess.Popen(
            [HOSTILE_AGENT_BIN, behaviour],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(p)
        assert p.stdout is not None
        url = p.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        return url

    def close(self) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.close()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    h = Hostile()
    yield h
    h.close()
