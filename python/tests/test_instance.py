"""The VM's life: Ready's instance, timeline and root; a client pinned to
an instance; the grading rule kept by the library (grade and grade_all run
nothing on a VM that is not ready)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import lab_agent
from conftest import Agents


def touching_lab(agents: Agents, marker: Path) -> lab_agent.Lab:
    """A lab whose one check creates `marker`: absent = nothing ran."""
    d = agents.mkdir("lab-" + marker.name)
    (d / "lab.toml").write_text(
        'name = "touch"\n[[checks]]\nname = "runs"\nrun = "touch %s"\n' % marker
    )
    return lab_agent.Lab.load(d)


def test_ready_and_wait_all_carry_the_vms_life(agents: Agents) -> None:
    agent = agents.start()
    c = lab_agent.Client(agent.url, token=agent.token)
    r = c.wait_ready(30)
    assert isinstance(r.instance, lab_agent.Instance)
    assert len(r.instance.id) == 32 and r.instance.boots == 1
    assert r.instance.boot_id and r.instance.first_boot_at.endswith("Z")
    assert isinstance(r.timeline, lab_agent.Timeline)
    assert r.timeline.agent_started_secs is not None and r.timeline.agent_started_secs > 0
    assert r.timeline.ready_secs is not None
    # Without cloud-init: no stages; setup ran in this boot.
    assert r.timeline.cloud_init == {}
    assert isinstance(r.timeline.setup, lab_agent.Span)
    assert r.timeline.setup.duration_secs is not None and r.timeline.setup.duration_secs >= 0
    assert isinstance(r.root, lab_agent.RootDisk)
    assert r.root.size_bytes > 0 and 0 <= r.root.free_bytes <= r.root.size_bytes
    if r.root.written_bytes is not None:
        assert r.root.written_bytes_total == r.root.written_bytes  # the life's first boot
    assert r.root.min_bytes is None and not r.root.below_min
    # Without cloud-init the disk is not judged.
    assert r.disk == lab_agent.Disk(booted_before=False, evidence=[])
    (w,) = lab_agent.wait_all([c], 30)
    assert isinstance(w, lab_agent.Ready) and w.instance == r.instance
    assert w.timeline is not None and w.root is not None


def test_timeline_orders_cloud_inits_stages() -> None:
    t = lab_agent.Timeline.from_dict(
        {"cloud_init": {"modules-final": {"start_secs": 9.0, "finished_secs": 71.5},
                        "init-local": {"start_secs": 1.9, "finished_secs": 2.4},
                        "init": {"start_secs": 2.5}}}
    )
    assert list(t.cloud_init) == ["init-local", "init", "modules-final"]
    assert t.cloud_init["init"].finished_secs is None
    assert t.cloud_init["init"].duration_secs is None
    assert t.setup is None and t.boot_at is None


def test_a_pinned_client_refuses_another_instance(agents: Agents) -> None:
    handed_out, reset = agents.start(), agents.start()
    old = lab_agent.Client(handed_out.url, token=handed_out.token).wait_ready(30).instance
    new = lab_agent.Client(reset.url, token=reset.token).wait_ready(30).instance
    assert old is not None and new is not None and old.id != new.id
    # `reset` stands for the VM at the same address after a reset.
    pinned = lab_agent.Client(reset.url, token=reset.token, instance=old.id)
    assert pinned.instance == old.id
    with pytest.raises(lab_agent.InstanceChanged) as e:
        pinned.ready()
    assert (e.value.expected, e.value.found) == (old.id, new.id)
    assert e.value.first_boot_at == new.first_boot_at
    assert "the student's work inside it is gone" in str(e.value)
    with pytest.raises(lab_agent.InstanceChanged):
        pinned.wait_ready(30)
    marker = agents.root / "graded"
    lab = touching_lab(agents, marker)
    with pytest.raises(lab_agent.InstanceChanged):
        pinned.grade(lab)
    apinned = lab_agent.AsyncClient(reset.url, token=reset.token, instance=old.id)
    with pytest.raises(lab_agent.InstanceChanged):
        asyncio.run(apinned.grade(lab))
    (out,) = lab_agent.grade_all([pinned], lab)
    assert isinstance(out, lab_agent.InstanceChanged)
    assert not marker.exists(), "a check ran on another instance"
    with pytest.raises(lab_agent.InstanceChanged):
        pinned.exec("true", profile="none")

    # Pinned to its own instance: graded, and the report names it.
    own = lab_agent.Client(reset.url, token=reset.token, instance=new.id)
    report = own.grade(lab)
    assert report.all_passed and report.instance == new
    assert report.to_dict()["instance"]["id"] == new.id
    assert marker.exists()

    with pytest.raises(ValueError, match="invalid instance id"):
        lab_agent.Client(reset.url, token=reset.token, instance="not-an-id")


def test_a_pinned_client_refuses_an_agent_that_names_no_instance(hostile) -> None:  # type: ignore[no-untyped-def]
    url = hostile.start("honest")
    c = lab_agent.Client(url, token="token", instance="0123456789abcdef0123456789abcdef")
    with pytest.raises(lab_agent.InstanceUnknown) as e:
        c.ready()
    assert e.value.expected == "0123456789abcdef0123456789abcdef"
    assert lab_agent.Client(url, token="token").ready().instance is None


def test_grade_and_grade_all_run_nothing_on_a_vm_setting_up(agents: Agents) -> None:
    go = agents.root / "go"
    agent = agents.start(setup="while [ ! -e %s ]; do sleep 0.1; done\n" % go)
    c = lab_agent.Client(agent.url, token=agent.token)
    ac = lab_agent.AsyncClient(agent.url, token=agent.token)
    marker = agents.root / "ran"
    lab = touching_lab(agents, marker)
    # `setting_up` for as long as `go` is absent.
    assert c.ready().state == "setting_up"
    with pytest.raises(lab_agent.NotReady, match="its state is `setting_up`") as e:
        c.grade(lab)
    assert isinstance(e.value.ready, lab_agent.Ready) and e.value.ready.state == "setting_up"
    with pytest.raises(lab_agent.NotReady):
        asyncio.run(ac.grade(lab))
    (out,) = lab_agent.grade_all([c], lab)
    assert isinstance(out, lab_agent.NotReady), out
    (out,) = asyncio.run(lab_agent.grade_all_async([ac], lab))
    assert isinstance(out, lab_agent.NotReady), out
    assert not marker.exists(), "a check ran on a VM still setting up"
    go.write_text("")
    c.wait_ready(30)
    (report,) = lab_agent.grade_all([c], lab)
    assert isinstance(report, lab_agent.Report) and report.all_passed, report
    assert report.instance is not None and report.instance.id == c.ready().instance.id
    assert marker.exists()
