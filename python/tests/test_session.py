"""Sessions: a lab of several VMs rendered per VM (render_secret(vm=, params=),
as `labctl secret --vm --param`), waited for and graded as one (Session)
against real agents, each given its VM's env file as its payload would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Dict

import pytest

import lab_agent
from conftest import LABCTL_BIN, REPO, Agents, new_token

TWO = REPO / "examples/two-vm-lab"
STATIC_AGENT = os.environ.get("LAB_AGENT_STATIC", "")
HOSTILE = "it's \"quoted\"\nnext line $HOME `id` $(id) \\ %s = é"

LAB_TOML = """
name = "py-session"
[[vms]]
name = "server"
[[vms]]
name = "client"
[[checks]]
name = "served"
vm = "server"
run = 'test "$LAB_VM" = server'
[[checks]]
name = "reached"
vm = "client"
run = 'test "$LAB_VM" = client && printf %s "$LAB_PARAM_GREETING"'
points = 2
"""


def test_render_secret_per_vm_is_labctl_secret_vm(tmp_path: Path) -> None:
    assert STATIC_AGENT, "LAB_AGENT_STATIC is not set (tests/tests/python.rs sets it)"
    lab = lab_agent.Lab.load(TWO)
    assert lab.vm_names == ["server", "client"]
    assert dict(lab.check_vms)["client reaches the service by name"] == "client"
    token = new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    r = lab_agent.render_secret(
        lab, "two-server", agent_path=STATIC_AGENT, token=token, vm="server",
        params={"GREETING": HOSTILE},
    )
    assert r.vm == "server"
    out = subprocess.run(
        [LABCTL_BIN, "secret", str(TWO), "--name", "two-server", "--token-file", str(token_file),
         "--agent", STATIC_AGENT, "--vm", "server", "--param", "GREETING=" + HOSTILE],
        capture_output=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode() == r.text
    client = lab_agent.render_secret(lab, "two-client", agent_path=STATIC_AGENT, vm="client")
    assert client.token != r.token and client.user_data != r.user_data
    with pytest.raises(ValueError, match=r"several VMs \(server, client\)"):
        lab_agent.render_secret(lab, "x", agent_path=STATIC_AGENT)
    with pytest.raises(ValueError, match="is not a valid key"):
        lab_agent.render_secret(lab, "x", agent_path=STATIC_AGENT, vm="server", params={"A-B": "1"})
    hello = lab_agent.Lab.load(REPO / "examples/hello-lab")
    assert hello.vm_names == [] and lab_agent.render_secret(
        hello, "x", agent_path=STATIC_AGENT).vm is None


def start_vm(agents: Agents, vm: str, setup: str = "true\n") -> lab_agent.Client:
    """An agent for `vm` with the env file `labctl secret --vm VM --param
    GREETING=…` gives it (NUL-ended KEY=VALUE)."""
    env: Dict[str, str] = {
        "LAB_VM": vm, "LAB_VMS": "server client", "LAB_PARAM_GREETING": HOSTILE,
    }
    env_file = agents.root / (vm + ".env")
    env_file.write_bytes(b"".join((k + "=" + v).encode() + b"\0" for k, v in env.items()))
    agent = agents.start(setup=setup, extra_args=["--env-file", str(env_file)])
    return lab_agent.Client(agent.url, token=agent.token)


def test_a_session_is_waited_for_and_graded_as_one(agents: Agents, tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text(LAB_TOML)
    lab = lab_agent.Lab.load(tmp_path)
    s = lab_agent.Session({"server": start_vm(agents, "server"), "client": start_vm(agents, "client")})
    ready = s.wait_ready(60)
    assert list(ready) == ["server", "client"] and all(r.state == "ready" for r in ready.values())
    report = s.grade(lab)
    assert [(c.name, c.vm, c.status) for c in report.checks] == [
        ("served", "server", "passed"), ("reached", "client", "passed"),
    ]
    assert report.checks[1].stdout == HOSTILE
    assert (report.score, report.max_score, report.instance) == (3, 3, None)
    assert sorted(report.instances) == ["client", "server"]
    assert json.loads(report.to_json())["checks"][0]["vm"] == "server"
    again = asyncio.run(s.grade_async(lab, checks=["reached"]))
    assert [c.name for c in again.checks] == ["reached"]
    with pytest.raises(ValueError, match="missing: client"):
        lab_agent.Session({"server": start_vm(agents, "server")}).grade(lab)


def test_a_failed_vm_is_raised_at_once_with_its_name(agents: Agents, tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text(LAB_TOML)
    lab = lab_agent.Lab.load(tmp_path)
    go = tmp_path / "go"
    server = start_vm(agents, "server", "while [ ! -e %s ]; do sleep 0.1; done\n" % go)
    client = start_vm(agents, "client", "echo 'no route' >&2; exit 6\n")
    s = lab_agent.Session({"server": server, "client": client})
    with pytest.raises(lab_agent.SetupFailed) as e:
        s.wait_ready(300)
    assert e.value.vm == "client" and e.value.exit_code == 6
    assert str(e.value).startswith("VM `client`: ")
    # Not graded while the server is still setting up (and the client failed).
    with pytest.raises(lab_agent.SetupFailed) as e:
        asyncio.run(s.grade_async(lab))
    assert e.value.vm == "client"
    # A VM still setting up: NotReady naming it, nothing run.
    fresh = start_vm(agents, "client")
    fresh.wait_ready(60)
    with pytest.raises(lab_agent.NotReady) as e:
        lab_agent.Session({"server": server, "client": fresh}).grade(lab)
    assert e.value.vm == "server"
    go.write_text("")
