"""timeline_distribution: the figures of ``labctl timeline --json`` (and
the picture of ``--svg``) for the same answers, whether they come as a
log's text, as dicts or as Ready objects."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

import lab_agent
from conftest import LABCTL_BIN


def stamp(secs: float) -> str:
    whole, frac = divmod(round(secs * 1000), 1000)
    minutes, s = divmod(whole, 60)
    return "2026-12-03T10:%02d:%02d.%03dZ" % (minutes, s, frac)


def answers() -> List[Dict[str, Any]]:
    """Seven VMs of the seeds' kind (82 to 300 s to ready), most with the
    backend's stamps; one older agent without a timeline."""
    out: List[Dict[str, Any]] = []
    for i, (ready, setup) in enumerate(
        [(82.0, 60.0), (94.0, 80.0), (150.0, 130.0), (269.0, 250.0), (300.0, 280.0), (71.6, 61.1), (120.25, 99.5)]
    ):
        created = i * 1.5
        answer: Dict[str, Any] = {
            "state": "ready",
            "cloud_init": {"done": True, "errors": []},
            "setup": {"state": "succeeded", "exit_code": 0},
            "timeline": {
                "boot_at": stamp(created + 14.0 + i * 0.37),
                "agent_started_secs": 2.0 + i * 0.5,
                "cloud_init": {
                    "init-local": {"start_secs": 1.9, "finished_secs": 2.4},
                    "init": {"start_secs": 2.5, "finished_secs": 5.0 + i},
                    "modules-final": {"start_secs": 9.0, "finished_secs": ready - 0.1},
                },
                "setup": {"start_secs": 9.8, "finished_secs": 9.8 + setup},
                "ready_secs": ready,
            },
        }
        if i != 2:
            answer["backend"] = {
                "vm_created_at": stamp(created),
                "vmi_scheduled_at": stamp(created + 1.0 + i * 0.25),
                "vmi_running_at": stamp(created + 12.0),
            }
        out.append(answer)
    out.append({"state": "ready", "cloud_init": {"done": True}, "setup": {"state": "succeeded"}})
    return out


def labctl_timeline(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess:
    assert LABCTL_BIN, "LABCTL_BIN is not set (tests/tests/python.rs sets it)"
    f = tmp_path / "answers.ndjson"
    f.write_text(text)
    return subprocess.run(
        [LABCTL_BIN, "timeline", str(f), *args], capture_output=True, text=True, check=True
    )


def test_the_same_figures_as_labctl_timeline_json(tmp_path: Path) -> None:
    text = "\n".join(json.dumps(a) for a in answers()) + "\n"
    from_labctl = json.loads(labctl_timeline(tmp_path, text, "--json").stdout)
    for given in (text, text.encode(), answers(), [json.dumps(a) for a in answers()]):
        d = lab_agent.timeline_distribution(given)
        assert d.to_dict() == from_labctl, type(given)
    d = lab_agent.timeline_distribution(answers())
    assert (d.answers, d.timelines, d.without_timeline) == (8, 7, 1)
    total = d.phase("request_to_ready")
    assert total.count == 6  # one VM without the backend's stamps
    assert total.min_secs is not None and total.max_secs is not None
    assert total.min_secs <= total.median_secs <= total.p90_secs <= total.max_secs
    ready = d.phase("ready")
    assert (ready.count, ready.min_secs, ready.max_secs) == (7, 71.6, 300.0)
    assert [p.phase for p in d.phases][:3] == ["scheduled", "running", "kernel_boot"]
    assert d.malformed_stamps == []
    with pytest.raises(KeyError):
        d.phase("nope")


def test_ready_objects_and_the_picture(tmp_path: Path) -> None:
    """Ready objects (what a backend's client returned) give the guest's
    phases as their dicts do; to_svg is labctl timeline --svg's picture."""
    plain = [a for a in answers() if "backend" not in a]
    readies = [lab_agent.Ready.from_dict(a) for a in plain]
    assert lab_agent.timeline_distribution(readies).to_dict() == (
        lab_agent.timeline_distribution(plain).to_dict()
    )
    text = "\n".join(json.dumps(a) for a in answers())
    svg = tmp_path / "t.svg"
    labctl_timeline(tmp_path, text, "--svg", str(svg))
    picture = lab_agent.timeline_distribution(text).to_svg()
    assert picture == svg.read_text()
    assert picture.startswith("<svg ") and "VM created → ready" in picture


def test_what_is_no_answer_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not JSON at line 2"):
        lab_agent.timeline_distribution('{"timeline": {}}\nnot json\n')
    with pytest.raises(ValueError, match="document 1: a number is no `/v1/ready` answer"):
        lab_agent.timeline_distribution("42")
    d = lab_agent.timeline_distribution(
        [{"backend": {"vm_created_at": "yesterday"}, "timeline": {"ready_secs": 1}}]
    )
    assert d.malformed_stamps == [(1, "vm_created_at")]
    assert d.phase("scheduled").count == 0
