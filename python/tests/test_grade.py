"""grade: a lab against a real agent, compared with `labctl grade --json`."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import lab_agent
from conftest import LABCTL_BIN, Agents, is_root

# hello-lab's shape (a lab-wide `profile`, a setup, staged files, a check as
# another user, points, a fail_message, one step left to the student), but a
# setup that writes only into its $LAB_DIR: a test runs it on this machine,
# as root, and must leave the machine as it found it. hello-lab itself (a
# `student` user, a banner in /etc/profile.d) runs where it cannot change
# the machine: `labctl test` in the sandbox (.ci/run) and the VM tests.
LIKE_HELLO = """\
name = "like-hello"
profile = "system"
[setup]
script = "setup.sh"
[files]
source = "files"
[[checks]]
name = "the greeting is in place"
run = 'cmp -s "$LAB_DIR/welcome.txt" "$LAB_DIR/home/welcome.txt"'
[[checks]]
name = "another user reads it"
run = 'test "$(id -un)" != root && cat "$LAB_DIR/home/welcome.txt"'
user = "nobody"
[[checks]]
name = "output as the guest wrote it"
run = 'printf "caf\\303\\251 \\033[31mred\\n"; echo "to stderr" >&2'
[[checks]]
name = "hello.sh runs"
run = 'test "$("$LAB_DIR/home/hello.sh")" = "Hello"'
points = 2
fail_message = "`hello.sh` does not run yet: make it executable with `chmod +x`."
"""

LIKE_HELLO_SETUP = """\
#!/bin/bash
set -euo pipefail
mkdir -p "$LAB_DIR/home"
install -m 0644 "$LAB_DIR/welcome.txt" "$LAB_DIR/home/welcome.txt"
# Not executable: making it so is the student's step.
install -m 0644 "$LAB_DIR/hello.sh" "$LAB_DIR/home/hello.sh"
"""


def without_durations(report: dict) -> dict:
    """Two gradings of one VM differ only in how long each check took."""
    out = dict(report)
    out["checks"] = [{k: v for k, v in c.items() if k != "duration_ms"} for c in report["checks"]]
    return out


def like_hello(agents: Agents) -> Path:
    """The lab's folder, in the test's temp dir."""
    lab = agents.root / "like-hello"
    (lab / "files").mkdir(parents=True)
    (lab / "lab.toml").write_text(LIKE_HELLO)
    (lab / "setup.sh").write_text(LIKE_HELLO_SETUP)
    (lab / "files/welcome.txt").write_text("Welcome to the lab.\n")
    (lab / "files/hello.sh").write_text("#!/bin/sh\necho Hello\n")
    return lab


@pytest.mark.skipif(not is_root(), reason="a check runs as `nobody`: the agent needs root")
def test_grade_a_lab_like_labctl(agents: Agents) -> None:
    labdir = like_hello(agents)
    staged = agents.root / "lab"
    shutil.copytree(labdir / "files", staged)
    staged.chmod(0o755)
    agent = agents.start(setup=LIKE_HELLO_SETUP, lab_dir=staged)
    lab = lab_agent.Lab.load(labdir)
    assert lab.name == "like-hello" and len(lab.check_names) == 4 and lab.max_score == 5
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(60)

    report = c.grade(lab, lab_dir=str(staged))
    assert isinstance(report, lab_agent.Report)
    # The student has not done the lab's one step yet: hello.sh (2 points) fails.
    assert [ch.status for ch in report.checks] == ["passed", "passed", "passed", "failed"]
    assert (report.passed, report.failed, report.errors, report.total) == (3, 1, 0, 4)
    assert (report.score, report.max_score) == (3, 5)
    assert not report.all_passed and not report.has_errors
    failed = report.checks[3]
    assert failed.points == 2 and failed.fail_message and "chmod +x" in failed.fail_message
    # Guest text as it came (labctl escapes it only when printing for a person).
    assert report.checks[2].stdout == "caf\u00e9 \x1b[31mred\n"
    assert report.checks[2].stderr == "to stderr\n"

    out = subprocess.run(
        [LABCTL_BIN, "grade", str(labdir), "--url", agent.url, "--token-file",
         str(agent.token_file), "--lab-dir", str(staged), "--json"],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 1, out.stderr  # a check failed
    assert without_durations(report.to_dict()) == without_durations(json.loads(out.stdout))
    assert json.loads(report.to_json()) == report.to_dict()
    # to_json() is labctl's text itself (labctl prints it and a newline).
    relabelled = json.loads(out.stdout)
    for mine, theirs in zip(report.to_dict()["checks"], relabelled["checks"]):
        theirs["duration_ms"] = mine["duration_ms"]
    assert report.to_json() + "\n" == json.dumps(relabelled, indent=2, ensure_ascii=False) + "\n"

    # checks= picks by name; the asyncio form gives the same statuses.
    one = asyncio.run(
        lab_agent.AsyncClient(agent.url, token=agent.token).grade(
            lab, checks=["hello.sh runs"], lab_dir=str(staged)
        )
    )
    assert [(ch.name, ch.status) for ch in one.checks] == [("hello.sh runs", "failed")]
    assert (one.score, one.max_score) == (0, 2)
    with pytest.raises(lab_agent.LabError, match="no check named"):
        c.grade(lab, checks=["nope"])


def test_grade_defaults_lab_dir_from_the_agent_and_refuses_a_vm_not_ready(
    agents: Agents,
) -> None:
    labdir = agents.mkdir("mini")
    (labdir / "lab.toml").write_text(
        'name = "mini"\n'
        '[[checks]]\nname = "lab dir"\nrun = \'test "$LAB_DIR" = "%s"\'\npoints = 3\n'
        '[[checks]]\nname = "cannot run"\nrun = "true"\nuser = "no-such-user-here"\n'
        % (agents.root / "staged")
    )
    agent = agents.start(lab_dir=agents.mkdir("staged"))
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(10)
    report = c.grade(lab_agent.Lab.load(labdir))
    assert [ch.status for ch in report.checks] == ["passed", "error"]
    assert report.has_errors and report.checks[1].error
    assert (report.score, report.max_score) == (3, 4)

    slow = agents.start(setup="sleep 30\n")
    with pytest.raises(lab_agent.NotReady, match="setting_up"):
        lab_agent.Client(slow.url, token=slow.token).grade(lab_agent.Lab.load(labdir))


def test_lab_errors_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text('name = "x"\n[[checks]]\nrun = "true"\n')
    with pytest.raises(lab_agent.LabError, match="name"):
        lab_agent.Lab.load(tmp_path)
    with pytest.raises(lab_agent.LabError):
        lab_agent.Lab.load(tmp_path / "missing")


def test_lab_exposes_its_readiness(tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text('name = "x"\n')
    lab = lab_agent.Lab.load(tmp_path)
    assert (lab.readiness_timeout_secs, lab.min_root_bytes) == (150, None)
    (tmp_path / "lab.toml").write_text(
        'name = "x"\n[readiness]\ntimeout_secs = 269\nmin_root_bytes = 10737418240\n'
    )
    lab = lab_agent.Lab.load(tmp_path)
    assert (lab.readiness_timeout_secs, lab.min_root_bytes) == (269, 10 << 30)
    (tmp_path / "lab.toml").write_text('name = "x"\n[readiness]\ntimeout_secs = 0\n')
    with pytest.raises(lab_agent.LabError, match="readiness.timeout_secs is 0"):
        lab_agent.Lab.load(tmp_path)
