"""exec: users, env, stdin, cwd, limits, and what cannot run."""

from __future__ import annotations

import asyncio
import os

import pytest

import lab_agent
from conftest import Agent, is_root


def test_exec_as_a_user_with_env_and_stdin(agent: Agent) -> None:
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(10)
    user = "nobody" if is_root() else None
    r = c.exec(
        'id -un; printf "%s\\n" "$GREETING"; tr a-z A-Z; pwd; echo oops >&2; exit 3',
        user=user,
        cwd="/",
        env={"GREETING": "hello from python"},
        stdin="piped in\n",
        timeout_secs=20,
    )
    assert isinstance(r, lab_agent.ExecResult)
    lines = r.stdout.splitlines()
    if user:
        assert lines[0] == "nobody"
    assert lines[1:] == ["hello from python", "PIPED IN", "/"]
    assert r.stderr == "oops\n"
    assert r.exit_code == 3 and r.signal is None and not r.timed_out
    assert not r.stdout_truncated


def test_exec_limits_and_timeouts(agent: Agent) -> None:
    c = lab_agent.AsyncClient(agent.url, token=agent.token)

    async def run() -> tuple:
        await c.wait_ready(10)
        big = await c.exec("head -c 5000 /dev/zero | tr '\\0' x", max_output_bytes=100)
        slow = await c.exec("sleep 5", timeout_secs=1)
        return big, slow

    big, slow = asyncio.run(run())
    assert big.stdout == "x" * 100 and big.stdout_truncated
    assert slow.timed_out and slow.exit_code is None


def test_a_command_that_cannot_start_is_rejected(agent: Agent) -> None:
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(10)
    with pytest.raises(lab_agent.Rejected) as info:
        c.exec("true", user="no-such-user-here")
    assert info.value.status == 400 and info.value.code == "bad_request"
    assert "no-such-user-here" in str(info.value)


def test_profile_is_passed_or_refused_clearly(agent: Agent) -> None:
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(10)
    probe = "shopt -q login_shell && echo login || echo plain"
    if lab_agent._native.EXEC_HAS_PROFILE:
        # `none` is `bash --noprofile --norc -c`, `login` a login shell: the
        # field reached the agent. (What `system` reads is the agent's tests'.)
        assert c.exec(probe, profile="none").stdout == "plain\n"
        assert c.exec(probe, profile="login").stdout == "login\n"
        assert c.exec("echo ok", profile="system").stdout == "ok\n"
        assert c.exec(probe).stdout == "login\n"
        with pytest.raises(ValueError, match="invalid exec request"):
            c.exec(probe, profile="bogus")
    else:
        with pytest.raises(ValueError, match="profile"):
            c.exec("echo ok", profile="none")
        assert c.exec("echo ok", profile=None).stdout == "ok\n"


def test_an_invalid_request_is_a_value_error_before_any_request(agent: Agent) -> None:
    c = lab_agent.Client(agent.url, token=agent.token)
    with pytest.raises(ValueError, match="invalid exec request"):
        c.exec("true", timeout_secs="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid exec request"):
        c.exec("true", env={"A": 1})  # type: ignore[dict-item]
    # The agent's rules, checked before sending, as labctl exec does.
    with pytest.raises(ValueError, match="command is empty"):
        c.exec("  ")
    with pytest.raises(ValueError, match="invalid exec request"):
        c.exec("true", timeout_secs=0)


def test_what_a_command_leaves_dies_with_it_unless_left_running(agent: Agent, tmp_path) -> None:
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(10)
    pidfile = tmp_path / "bg"
    cmd = "sleep 60 & echo $! > %s" % pidfile

    def alive(pid: int) -> bool:
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    r = c.exec(cmd)
    assert r.exit_code == 0 and r.limits_hit == []
    assert not alive(int(pidfile.read_text()))
    r = c.exec(cmd, leave_running=True)
    kept = int(pidfile.read_text())
    try:
        assert alive(kept)
    finally:
        os.kill(kept, 9)
    with pytest.raises(ValueError, match="max_pids"):
        c.exec("true", max_pids=0)
