"""render_secret is `labctl secret`, byte for byte."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

import lab_agent
from conftest import LABCTL_BIN, REPO, new_token

HELLO = REPO / "examples/hello-lab"
# A static ELF "agent" the harness wrote (lab_agent_tests::elf::fake_elf): rendering
# only needs its bytes.
STATIC_AGENT = os.environ.get("LAB_AGENT_STATIC", "")


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_render_secret_is_byte_identical_to_labctl(fmt: str, tmp_path: Path) -> None:
    assert STATIC_AGENT, "LAB_AGENT_STATIC is not set (tests/tests/python.rs sets it)"
    token = new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    lab = lab_agent.Lab.load(HELLO)
    r = lab_agent.render_secret(
        lab, "hello-lab-vm1", namespace="labs", labels={"course": "k8s-101", "lab": "hello"},
        agent_path=STATIC_AGENT, token=token, format=fmt,
    )
    out = subprocess.run(
        [LABCTL_BIN, "secret", str(HELLO), "--name", "hello-lab-vm1", "--namespace", "labs",
         "--label", "course=k8s-101", "--label", "lab=hello", "--token-file", str(token_file),
         "--agent", STATIC_AGENT, "--format", fmt],
        capture_output=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert r.text.encode() == out.stdout
    assert r.token == token and not r.token_generated
    assert r.budget["total_bytes"] == len(r.user_data.encode())
    # agent_bytes counts the agent as the installer carries it (encoded).
    assert 0 < r.budget["agent_bytes"] < r.budget["total_bytes"] <= r.budget["limit_bytes"]
    if fmt == "json":
        data = json.loads(r.text)["data"]["userdata"]
        assert base64.b64decode(data).decode() == r.user_data
    assert token in r.user_data


def test_render_secret_generates_a_token_and_checks_its_inputs() -> None:
    lab = lab_agent.Lab.load(HELLO)
    r = lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT)
    assert r.token_generated and len(r.token) == 43 and r.token in r.user_data
    with pytest.raises(lab_agent.RenderError, match="Not_A_Name|name"):
        lab_agent.render_secret(lab, "Not_A_Name", agent_path=STATIC_AGENT)
    with pytest.raises(lab_agent.RenderError):
        lab_agent.render_secret(lab, "vm", agent_path="/nonexistent/lab-agent")
    with pytest.raises(lab_agent.RenderError):
        lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, token="short")
    with pytest.raises(ValueError):
        lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, format="toml")


def test_render_secret_for_arm64(tmp_path: Path) -> None:
    """One payload per architecture: the agent's machine and the serial
    console follow ``arch``; ``labctl secret --arch arm64`` gives the same
    bytes; an agent of the other machine is refused, naming both."""
    assert STATIC_AGENT, "LAB_AGENT_STATIC is not set (tests/tests/python.rs sets it)"
    arm = bytearray(Path(STATIC_AGENT).read_bytes())
    arm[0x12:0x14] = (183).to_bytes(2, "little")  # EM_AARCH64
    arm_agent = tmp_path / "lab-agent-arm64"
    arm_agent.write_bytes(bytes(arm))
    token = new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    lab = lab_agent.Lab.load(HELLO)
    r = lab_agent.render_secret(lab, "vm", agent_path=str(arm_agent), token=token, arch="arm64")
    assert r.arch == "arm64" and r.budget["arch"] == "arm64"
    assert "serial-getty@ttyAMA0.service" in r.user_data and "ttyS0" not in r.user_data
    out = subprocess.run(
        [LABCTL_BIN, "secret", str(HELLO), "--name", "vm", "--token-file", str(token_file),
         "--agent", str(arm_agent), "--arch", "arm64"],
        capture_output=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert r.text.encode() == out.stdout
    assert b"budget (arm64): " in out.stderr
    # Without `arch`, the agent's machine decides.
    assert lab_agent.render_secret(lab, "vm", agent_path=str(arm_agent), token=token).text == r.text
    with pytest.raises(lab_agent.RenderError, match=r"built for arm64 \(aarch64\), and the lab VM is amd64"):
        lab_agent.render_secret(lab, "vm", agent_path=str(arm_agent), arch="amd64")
    with pytest.raises(ValueError, match="unknown architecture `x86`"):
        lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, arch="x86")
    amd = lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, token=token)
    assert amd.arch == "amd64" and "serial-getty@ttyS0.service" in amd.user_data


def test_render_secret_from_disk_is_labctl_and_pins_the_agent(tmp_path: Path) -> None:
    import gzip
    import hashlib

    token = new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    lab = lab_agent.Lab.load(HELLO)
    r = lab_agent.render_secret(
        lab, "hello-lab-vm1", agent_path=STATIC_AGENT, token=token, agent_from="disk"
    )
    out = subprocess.run(
        [LABCTL_BIN, "secret", str(HELLO), "--name", "hello-lab-vm1", "--token-file",
         str(token_file), "--agent", STATIC_AGENT, "--agent-from", "disk"],
        capture_output=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert r.text.encode() == out.stdout
    sha = hashlib.sha256(Path(STATIC_AGENT).read_bytes()).hexdigest()
    assert r.agent_from == "disk" and r.agent_sha256 == sha
    # The Secret carries the message gzip'd; the text is the message.
    assert gzip.decompress(r.user_data_bytes).decode() == r.user_data
    assert f" z run {sha} " in r.user_data and token in r.user_data
    assert r.budget["agent_from"] == "disk"
    assert r.budget["secret_bytes"] == len(r.user_data_bytes) <= 7000
    with pytest.raises(ValueError, match="agent_from"):
        lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, agent_from="registry")
    embedded = lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, token=token)
    assert embedded.user_data_bytes == embedded.user_data.encode()
    assert embedded.agent_from == "embedded" and embedded.agent_sha256 == sha


def test_render_secret_channel_is_labctl_s(tmp_path: Path) -> None:
    token = new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    lab = lab_agent.Lab.load(HELLO)
    serve = "ExecStart=/usr/local/bin/lab-agent serve"
    for channel, listens in [
        ("vsock", " --listen vsock:8899\\n"),
        ("tcp", "\\n"),
        ("both", " --listen 0.0.0.0:8899 --listen vsock:8899\\n"),
    ]:
        r = lab_agent.render_secret(
            lab, "hello-lab-vm1", agent_path=STATIC_AGENT, token=token, channel=channel
        )
        out = subprocess.run(
            [LABCTL_BIN, "secret", str(HELLO), "--name", "hello-lab-vm1", "--token-file",
             str(token_file), "--agent", STATIC_AGENT, "--channel", channel],
            capture_output=True, check=False,
        )
        assert out.returncode == 0, out.stderr
        assert r.text.encode() == out.stdout, channel
        assert r.channel == channel
        assert serve + listens in r.user_data, channel
    assert lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT).channel == "both"
    with pytest.raises(ValueError, match="channel"):
        lab_agent.render_secret(lab, "vm", agent_path=STATIC_AGENT, channel="serial")
