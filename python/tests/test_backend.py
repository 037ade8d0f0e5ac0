"""What a backend over a fleet relies on: each VM handed out the moment it
is ready (wait_each), nothing run on another life of a VM, typed answers,
bad arguments refused before anything runs, hints in Python's terms, and a
Secret rendered off the event loop."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from pathlib import Path
from typing import Dict, List

import pytest

import lab_agent
from conftest import Agents, ReservedPort

STATIC_AGENT = os.environ.get("LAB_AGENT_STATIC", "")


def test_wait_each_hands_out_each_vm_as_it_becomes_ready(
    agents: Agents, reserved_port: ReservedPort
) -> None:
    ready = agents.start()
    slower = agents.start(setup="sleep 1\n")
    failed = agents.start(setup="exit 4\n")
    killed = agents.start(setup="sleep 30\n")
    killed.stop()  # mid-setup: its port refuses from now on
    vms = {
        "ada": lab_agent.Client(ready.url, token=ready.token),
        "bob": lab_agent.Client(killed.url, token=killed.token),
        "cy": lab_agent.Client(slower.url, token=slower.token),
        "dee": lab_agent.Client(failed.url, token=failed.token),
    }
    each = lab_agent.wait_each(vms, timeout=5)
    assert each.remaining == 4
    order: List[str] = []
    outcomes: Dict[str, object] = {}
    for student, outcome in each:
        order.append(student)
        outcomes[student] = outcome
    assert each.remaining == 0
    # The dead VM is the one waited for to the deadline, and held back none.
    assert order[-1] == "bob" and sorted(order[:3]) == ["ada", "cy", "dee"], order
    assert isinstance(outcomes["ada"], lab_agent.Ready) and outcomes["ada"].is_ready
    assert isinstance(outcomes["cy"], lab_agent.Ready)
    # Never answered to the deadline: a Timeout (not a WaitTimeout: it never
    # answered at all).
    bob = outcomes["bob"]
    assert isinstance(bob, lab_agent.Timeout) and not isinstance(bob, lab_agent.WaitTimeout), bob
    assert "never answered" in str(bob)
    failure = outcomes["dee"]
    assert isinstance(failure, lab_agent.SetupFailed)
    assert isinstance(failure.ready, lab_agent.Ready) and failure.ready.state == "failed"

    # asyncio, a list: keys are indices; the loop runs meanwhile.
    async def handed_out() -> List[int]:
        seen = []
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.ensure_future(ticker())
        clients = [
            lab_agent.AsyncClient(reserved_port.addr and "http://" + reserved_port.addr,
                                  token="t" * 43),
            lab_agent.AsyncClient(ready.url, token=ready.token),
        ]
        async for i, outcome in lab_agent.wait_each_async(clients, timeout=2):
            seen.append(i)
            assert isinstance(outcome, lab_agent.Ready if i == 1 else lab_agent.Timeout)
        t.cancel()
        assert ticks > 10, "the event loop was blocked"
        return seen

    assert asyncio.run(handed_out()) == [1, 0]
    with pytest.raises(ValueError, match="timeout"):
        lab_agent.wait_each(vms, timeout=-1)


def test_a_pinned_exec_on_a_reset_vm_runs_nothing(agents: Agents) -> None:
    handed_out, reset = agents.start(), agents.start()
    old = lab_agent.Client(handed_out.url, token=handed_out.token).wait_ready(30).instance
    assert old is not None
    # `reset` stands for the VM at the same address after a reset.
    pinned = lab_agent.Client(reset.url, token=reset.token, instance=old.id)
    apinned = lab_agent.AsyncClient(reset.url, token=reset.token, instance=old.id)
    marker = agents.root / "ran"
    touch = "touch %s" % marker
    with pytest.raises(lab_agent.InstanceChanged) as e:
        pinned.exec(touch)
    assert e.value.pinned_by == "caller" and e.value.expected == old.id
    assert "the client is pinned to" in str(e.value)
    with pytest.raises(lab_agent.InstanceChanged):
        asyncio.run(apinned.exec(touch))
    with pytest.raises(lab_agent.InstanceChanged):
        list(pinned.exec_stream(touch))
    assert not marker.exists(), "a pinned command ran on the reset VM"
    own = lab_agent.Client(reset.url, token=reset.token, instance=e.value.found)
    assert own.exec(touch).exit_code == 0 and marker.exists()


def test_answers_are_typed(agents: Agents) -> None:
    staged = agents.mkdir("staged")
    agent = agents.start(lab_dir=staged)
    c = lab_agent.Client(agent.url, token=agent.token)
    ready = c.wait_ready(30)
    info = c.info()
    assert isinstance(info, lab_agent.Info)
    assert info.lab_dir == str(staged) and info.version
    assert info.instance == ready.instance and info.root is not None
    r = c.exec("true")
    assert ready.instance is not None
    assert (r.instance_id, r.boot_id) == (ready.instance.id, ready.instance.boot_id)
    assert info.boot_id == r.boot_id
    again = asyncio.run(lab_agent.AsyncClient(agent.url, token=agent.token).info())
    assert (again.instance, again.lab_dir, again.boot_id) == (info.instance, info.lab_dir, info.boot_id)

    go = agents.root / "go"
    slow = agents.start(setup="while [ ! -e %s ]; do sleep 0.1; done\n" % go)
    lab_dir = agents.mkdir("lab")
    (lab_dir / "lab.toml").write_text('name = "l"\n[[checks]]\nname = "a"\nrun = "true"\n')
    with pytest.raises(lab_agent.NotReady) as e:
        lab_agent.Client(slow.url, token=slow.token).grade(lab_agent.Lab.load(lab_dir))
    assert isinstance(e.value.ready, lab_agent.Ready) and e.value.ready.state == "setting_up"
    go.write_text("")


def test_every_bad_argument_is_a_value_error_before_anything_runs(agents: Agents) -> None:
    agent = agents.start()
    c = lab_agent.Client(agent.url, token=agent.token)
    ac = lab_agent.AsyncClient(agent.url, token=agent.token)
    c.wait_ready(30)
    marker = agents.root / "graded"
    lab_dir = agents.mkdir("lab")
    (lab_dir / "lab.toml").write_text(
        'name = "l"\n[[checks]]\nname = "a"\nrun = "touch %s"\n' % marker
    )
    lab = lab_agent.Lab.load(lab_dir)
    bad = {
        "grade_all concurrency 0": lambda: lab_agent.grade_all([c], lab, 0),
        "grade_all concurrency -1": lambda: lab_agent.grade_all([c], lab, -1),
        "grade_all concurrency 1.5": lambda: lab_agent.grade_all([c], lab, 1.5),  # type: ignore[arg-type]
        "grade_all_async concurrency 0": lambda: asyncio.run(lab_agent.grade_all_async([ac], lab, 0)),
        "a URL without its scheme": lambda: lab_agent.Client("127.0.0.1:8899", token="t"),
        "a URL that is none": lambda: lab_agent.AsyncClient("not a url", token="t"),
        "a relative lab_dir": lambda: c.grade(lab, lab_dir="opt/lab"),
        "a relative lab_dir, asyncio": lambda: asyncio.run(ac.grade(lab, lab_dir="lab")),
        "a negative log offset": lambda: c.setup_log(offset=-1),
        "a log wait past 60": lambda: c.setup_log(wait=61),
        "a negative timeout": lambda: c.wait_ready(-1),
        "exec timeout_secs 0": lambda: c.exec("touch %s" % marker, timeout_secs=0),
        "request_timeout 0": lambda: lab_agent.Client(agent.url, token="t", request_timeout=0),
    }
    for what, call in bad.items():
        with pytest.raises(ValueError) as e:
            call()
        assert not isinstance(e.value, lab_agent.AgentError), what
    assert not marker.exists(), "a check ran"
    with pytest.raises(ValueError) as e:
        lab_agent.Client("10.0.0.5:8899", token="t")
    assert "http://10.0.0.5:8899" in (getattr(e.value, "hint", None) or ""), e.value


def test_hints_name_what_a_python_caller_changes(
    agents: Agents, reserved_port: ReservedPort, hostile  # type: ignore[no-untyped-def]
) -> None:
    refused = lab_agent.Client("http://" + reserved_port.addr, token="t")
    with pytest.raises(lab_agent.Unreachable) as e:
        refused.exec("true")
    assert "wait_ready(timeout)" in e.value.hint and "labctl" not in e.value.hint

    # An answer that never ends (one byte every 100 ms).
    dripping = lab_agent.Client(hostile.start("drip"), token="t", request_timeout=0.5)
    with pytest.raises(lab_agent.Timeout) as e:
        dripping.ready()
    assert "request_timeout=" in e.value.hint and "labctl" not in e.value.hint, e.value.hint
    slow = agents.start()

    go = agents.root / "go"
    setting_up = agents.start(setup="while [ ! -e %s ]; do sleep 0.1; done\n" % go)
    lab_dir = agents.mkdir("lab")
    (lab_dir / "lab.toml").write_text('name = "l"\n[[checks]]\nname = "a"\nrun = "true"\n')
    with pytest.raises(lab_agent.NotReady) as e:
        lab_agent.Client(setting_up.url, token=setting_up.token).grade(lab_agent.Lab.load(lab_dir))
    assert "wait_ready(timeout)" in e.value.hint and "labctl" not in e.value.hint
    go.write_text("")
    with pytest.raises(lab_agent.Unauthorized) as e:
        lab_agent.Client(slow.url, token="wrong" * 9).ready()
    assert "render_secret(...).token" in e.value.hint


def test_render_secret_async_and_where_the_agent_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert STATIC_AGENT, "LAB_AGENT_STATIC is not set (tests/tests/python.rs sets it)"
    lab_dir = tmp_path / "lab"
    lab_dir.mkdir()
    (lab_dir / "lab.toml").write_text('name = "l"\n')
    lab = lab_agent.Lab.load(lab_dir)
    token = "x" * 43
    plain = lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, token=token)

    async def off_the_loop() -> lab_agent.Rendered:
        return await lab_agent.render_secret_async(lab, "vm", agent_path=STATIC_AGENT, token=token)

    assert asyncio.run(off_the_loop()) == plain

    # No agent_path and no labctl on PATH: only the source tree the wheel
    # was built from is left (its static build, if packaging/build-agent.sh
    # made one there); else the error says where it looked.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    try:
        r = lab_agent.render_secret(lab, "vm")
        assert r.agent_path.endswith("/target/x86_64-unknown-linux-musl/agent/lab-agent"), r
    except lab_agent.RenderError as e:
        msg = str(e)
        assert "looked at" in msg and "`labctl`: not on `PATH`" in msg, msg
        assert "x86_64-unknown-linux-musl/agent/lab-agent`: does not exist" in msg, msg
        assert e.hint and "agent_path=PATH" in e.hint and "--agent" not in e.hint
    # A `labctl` on PATH: the agent beside it, as `labctl secret` takes it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy("/bin/true", bin_dir / "labctl")
    shutil.copy(STATIC_AGENT, bin_dir / "lab-agent")
    (bin_dir / "lab-agent").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", str(bin_dir))
    found = lab_agent.render_secret(lab, "vm", token=token)
    assert found.agent_path == str(bin_dir / "lab-agent")
    assert found.user_data == plain.user_data
