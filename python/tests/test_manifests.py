"""render_vm and render_session are `labctl render`, byte for byte;
golden_unusable_reason is the Rust function's verdict, sentence for
sentence."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
import yaml  # type: ignore[import-untyped]  # (PyYAML, with the validators)

import lab_agent
from conftest import LABCTL_BIN, REPO, new_token

HELLO = REPO / "examples/hello-lab"
TWO_VM = REPO / "examples/two-vm-lab"
STATIC_AGENT = os.environ.get("LAB_AGENT_STATIC", "")
IMAGE = "quay.io/containerdisks/debian:12"


def token_file(tmp_path: Path, token: str, name: str = "token") -> Path:
    f = tmp_path / name
    f.write_text(token + "\n")
    f.chmod(0o600)
    return f


def labctl_render(
    tmp_path: Path, lab: Path, *args: str, expect: int = 0
) -> Tuple[bytes, Dict[str, Any], str]:
    """`labctl render LAB --agent STATIC_AGENT ARGS -o FILE --json`: the
    file's bytes, the report, stderr."""
    assert STATIC_AGENT, "LAB_AGENT_STATIC is not set (tests/tests/python.rs sets it)"
    out_file = tmp_path / "out.yaml"
    if out_file.exists():
        out_file.unlink()
    out = subprocess.run(
        [LABCTL_BIN, "render", str(lab), "--agent", STATIC_AGENT, *args,
         "-o", str(out_file), "--json"],
        capture_output=True, check=False,
    )
    stderr = out.stderr.decode()
    assert out.returncode == expect, stderr
    if expect != 0:
        return b"", {}, stderr
    return out_file.read_bytes(), json.loads(out.stdout), stderr


def documents(text: str) -> List[str]:
    """The YAML stream's documents, each as written (`---` lines apart)."""
    return re.split(r"(?m)^---\n", text)


def golden() -> Dict[str, Any]:
    """A usable golden PVC, as `kubectl get pvc -o json` prints one."""
    pvc: Dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "golden-debian-12",
            "namespace": "labs",
            "annotations": {
                "lab-agent/golden-image": IMAGE,
                "cdi.kubevirt.io/storage.pod.phase": "Succeeded",
            },
        },
        "spec": {"accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem"},
        "status": {
            "phase": "Bound",
            "accessModes": ["ReadWriteMany"],
            "capacity": {"storage": "10Gi"},
        },
    }
    return pvc


def test_render_vm_is_labctl_render(tmp_path: Path) -> None:
    """A lab of one VM, with every flag that shapes its objects: the same
    file, the same objects (parsed, in order), names, token and budget."""
    token = new_token()
    tf = token_file(tmp_path, token)
    lab = lab_agent.Lab.load(HELLO)
    r = lab_agent.render_vm(
        lab, "hello-vm1", namespace="labs", labels={"course": "k8s-101"},
        root_image=IMAGE, backend_namespace="backend", backend_labels={"app": "grader"},
        cpus=3, memory="3Gi", params={"LEVEL": "2"}, token=token, agent_path=STATIC_AGENT,
    )
    text, report, _ = labctl_render(
        tmp_path, HELLO, "--name", "hello-vm1", "--namespace", "labs", "--label",
        "course=k8s-101", "--root-image", IMAGE, "--backend-namespace", "backend",
        "--backend-label", "app=grader", "--cpus", "3", "--memory", "3Gi", "--param",
        "LEVEL=2", "--token-file", str(tf),
    )
    assert r.text.encode() == text
    assert r.objects == list(yaml.safe_load_all(r.text))
    assert [f"{o['kind']}/{o['metadata']['name']}" for o in r.objects] == report["objects"]
    assert report["objects"] == [
        "NetworkPolicy/hello-vm1", "Secret/hello-vm1-userdata", "VirtualMachine/hello-vm1",
    ]
    (vm,) = r.vms
    (cli_vm,) = report["vms"]
    assert (vm.vm, vm.name, vm.secret_name, vm.token) == (
        None, cli_vm["name"], cli_vm["secret"], token,
    )
    assert not vm.token_generated and vm.budget == cli_vm["budget"]
    assert vm.user_data_size == vm.budget["secret_bytes"] > 0
    assert r.root == lab_agent.RootChoice(disk="containerdisk", image=IMAGE)
    assert (r.arch, r.agent_from, r.channel, r.agent_sha256, r.namespace) == (
        report["arch"], report["agent_from"], report["channel"], report["agent_sha256"],
        "labs",
    )
    # Without a token: one made, in .vms, and in the Secret.
    made = lab_agent.render_vm(
        lab, "hello-vm1", root_image=IMAGE, backend_namespace="backend",
        agent_path=STATIC_AGENT,
    )
    assert made.vms[0].token_generated and len(made.vms[0].token) == 43
    # No autologin: labctl's `--no-autologin`.
    quiet = lab_agent.render_vm(
        lab, "hello-vm1", root_image=IMAGE, backend_namespace="backend", token=token,
        autologin=False, agent_path=STATIC_AGENT,
    )
    text, _, _ = labctl_render(
        tmp_path, HELLO, "--name", "hello-vm1", "--root-image", IMAGE,
        "--backend-namespace", "backend", "--no-autologin", "--token-file", str(tf),
    )
    assert quiet.text.encode() == text


def test_render_session_is_labctl_render(tmp_path: Path) -> None:
    """A whole session (a token made per VM) is the session's objects and,
    per VM, what `labctl render --vm VM` with that VM's token writes; one
    VM (`vm=`, its token given) is that file."""
    lab = lab_agent.Lab.load(TWO_VM)
    common = ["--namespace", "labs", "--root-image", IMAGE, "--backend-label",
              "app=grader", "--backend-namespace", "backend"]
    kwargs: Dict[str, Any] = dict(
        namespace="labs", root_image=IMAGE, backend_labels={"app": "grader"},
        backend_namespace="backend", agent_path=STATIC_AGENT,
    )
    r = lab_agent.render_session(lab, "s1", **kwargs)
    assert [v.vm for v in r.vms] == ["server", "client"]
    assert [(v.name, v.secret_name) for v in r.vms] == [
        ("s1-server", "s1-server-userdata"), ("s1-client", "s1-client-userdata"),
    ]
    assert all(v.token_generated for v in r.vms) and r.vms[0].token != r.vms[1].token
    kinds = [o["kind"] for o in r.objects]
    assert kinds == ["NetworkPolicy", "Service", "Secret", "VirtualMachine", "Secret",
                     "VirtualMachine"]
    assert r.objects == list(yaml.safe_load_all(r.text))
    shared: List[str] = []
    expected: List[str] = []
    for v in r.vms:
        assert v.vm is not None
        tf = token_file(tmp_path, v.token, f"{v.vm}.token")
        text, report, _ = labctl_render(
            tmp_path, TWO_VM, "--name", "s1", "--vm", v.vm, "--token-file", str(tf), *common,
        )
        docs = documents(text.decode())
        assert len(docs) == 4, report["objects"]
        if not shared:
            shared = docs[:2]
            expected = docs[:2]
        assert docs[:2] == shared, "the session's objects do not depend on the VM"
        expected += docs[2:]
        # One VM of it, its token given: that very file.
        one = lab_agent.render_session(lab, "s1", vm=v.vm, token=v.token, **kwargs)
        assert one.text.encode() == text
        assert [(w.vm, w.token, w.token_generated) for w in one.vms] == [(v.vm, v.token, False)]
    assert documents(r.text) == expected


def test_agent_disk_and_vsock_are_labctl_s(tmp_path: Path) -> None:
    token = new_token()
    tf = token_file(tmp_path, token)
    lab = lab_agent.Lab.load(HELLO)
    cases: List[Tuple[Dict[str, Any], List[str]]] = [
        (dict(agent_from="disk", agent_disk="containerdisk:registry.example/lab-agent:1",
              backend_namespace="backend"),
         ["--agent-from", "disk", "--agent-disk", "containerdisk:registry.example/lab-agent:1",
          "--backend-namespace", "backend"]),
        (dict(agent_from="disk", agent_disk="configmap:lab-agent", channel="vsock"),
         ["--agent-from", "disk", "--agent-disk", "configmap:lab-agent", "--channel", "vsock"]),
        (dict(channel="tcp", backend_namespace="backend", arch="amd64", golden_pvc="golden-x"),
         ["--channel", "tcp", "--backend-namespace", "backend", "--arch", "amd64",
          "--golden-pvc", "golden-x"]),
    ]
    for kwargs, flags in cases:
        r = lab_agent.render_vm(
            lab, "vm1", namespace="labs", root_image=IMAGE, token=token,
            agent_path=STATIC_AGENT, **kwargs,
        )
        text, report, _ = labctl_render(
            tmp_path, HELLO, "--name", "vm1", "--namespace", "labs", "--root-image", IMAGE,
            "--token-file", str(tf), *flags,
        )
        assert r.text.encode() == text, flags
        assert (r.agent_from, r.channel) == (report["agent_from"], report["channel"])
    vm = r.objects[-1]
    assert r.root == lab_agent.RootChoice(disk="golden", claim="golden-x")
    assert vm["kind"] == "VirtualMachine"
    # vsock: autoattachVSOCK, and no port opened to anyone.
    vsock = lab_agent.render_vm(
        lab, "vm1", root_image=IMAGE, agent_from="disk", agent_disk="configmap:lab-agent",
        channel="vsock", token=token, agent_path=STATIC_AGENT,
    )
    domain = vsock.objects[-1]["spec"]["template"]["spec"]["domain"]
    assert domain["devices"]["autoattachVSOCK"] is True
    assert vsock.channel == "vsock" and vsock.agent_from == "disk"


def pvc_cases() -> List[Tuple[str, Optional[Dict[str, Any]]]]:
    """One PVC per reason golden_unusable_reason gives (but too small,
    which the renderer refuses rather than falls back from)."""
    def changed(change: Any) -> Dict[str, Any]:
        pvc = golden()
        change(pvc)
        return pvc

    return [
        ("missing", None),
        ("a pod", changed(lambda p: p.update(kind="Pod"))),
        ("terminating", changed(
            lambda p: p["metadata"].update(deletionTimestamp="2026-10-16T00:00:00Z"))),
        ("pending", changed(lambda p: p["status"].update(phase="Pending"))),
        ("importing", changed(lambda p: p["metadata"]["annotations"].update(
            {"cdi.kubevirt.io/storage.pod.phase": "Running"}))),
        ("no image", changed(lambda p: p["metadata"].update(annotations={}))),
        ("other image", changed(lambda p: p["metadata"]["annotations"].update(
            {"lab-agent/golden-image": "quay.io/containerdisks/ubuntu:24.04"}))),
        ("rwo", changed(lambda p: p["status"].update(accessModes=["ReadWriteOnce"]))),
        ("volume mode", changed(lambda p: p["spec"].update(volumeMode="Other"))),
        ("no size", changed(lambda p: p["status"].update(capacity={}))),
        ("bad size", changed(lambda p: p["status"].update(capacity={"storage": "ten"}))),
    ]


def test_golden_unusable_reason_is_the_renderer_s(tmp_path: Path) -> None:
    """Each reason: the sentence labctl render's `--json` gives as the root's
    fallback_reason for `--golden-pvc-json FILE`, and render_vm's, for the
    same bytes of YAML; a usable golden is booted."""
    token = new_token()
    tf = token_file(tmp_path, token)
    lab = lab_agent.Lab.load(HELLO)
    pvc_file = tmp_path / "pvc.json"
    flags = ["--name", "vm1", "--namespace", "labs", "--root-image", IMAGE,
             "--backend-namespace", "backend", "--token-file", str(tf),
             "--golden-pvc-json", str(pvc_file)]
    seen = set()
    for what, pvc in pvc_cases():
        pvc_file.write_text("" if pvc is None else json.dumps(pvc))
        text, report, stderr = labctl_render(tmp_path, HELLO, *flags)
        said = lab_agent.golden_unusable_reason(pvc, IMAGE, 0)
        assert said is not None, what
        assert report["root"] == {"disk": "containerdisk", "image": IMAGE,
                                  "fallback_reason": said}, what
        assert f"note: {said};" in stderr, what
        seen.add(said)
        r = lab_agent.render_vm(
            lab, "vm1", namespace="labs", root_image=IMAGE, backend_namespace="backend",
            token=token, golden_pvc_object=pvc, agent_path=STATIC_AGENT,
        )
        assert r.root == lab_agent.RootChoice(disk="containerdisk", image=IMAGE,
                                              fallback_reason=said), what
        assert r.text.encode() == text, what
    assert len(seen) == len(pvc_cases()), "one sentence per reason"
    # Usable: booted, and no reason.
    pvc_file.write_text(json.dumps(golden()))
    text, report, _ = labctl_render(tmp_path, HELLO, *flags)
    assert lab_agent.golden_unusable_reason(golden(), IMAGE, 10 << 30) is None
    assert report["root"] == {"disk": "golden", "claim": "golden-debian-12"}
    r = lab_agent.render_vm(
        lab, "vm1", namespace="labs", root_image=IMAGE, backend_namespace="backend",
        token=token, golden_pvc_object=golden(), golden_pvc="golden-debian-12",
        agent_path=STATIC_AGENT,
    )
    assert r.text.encode() == text
    assert r.root == lab_agent.RootChoice(disk="golden", claim="golden-debian-12")
    volumes = r.objects[-1]["spec"]["template"]["spec"]["volumes"]
    assert any("ephemeral" in v for v in volumes), volumes


def test_a_golden_too_small_for_the_lab_is_refused(tmp_path: Path) -> None:
    """The one reason that is an error, not a fallback (the containerDisk's
    root is smaller still): the verdict's sentence, and render refuses,
    naming the PVC and the lab's min_root_bytes, as labctl does."""
    lab_dir = tmp_path / "big-lab"
    shutil.copytree(HELLO, lab_dir)
    with open(lab_dir / "lab.toml", "a") as f:
        f.write("\n[readiness]\nmin_root_bytes = 12884901888\n")
    lab = lab_agent.Lab.load(lab_dir)
    assert lab.min_root_bytes == 12 << 30
    said = lab_agent.golden_unusable_reason(golden(), IMAGE, 12 << 30)
    assert said == (
        "golden PVC `golden-debian-12` holds 10Gi (10737418240 bytes), less than the "
        "12884901888 bytes the lab's `min_root_bytes` needs for its root file system"
    )
    with pytest.raises(lab_agent.RenderError) as e:
        lab_agent.render_vm(
            lab, "vm1", root_image=IMAGE, backend_namespace="backend",
            golden_pvc_object=golden(), agent_path=STATIC_AGENT,
        )
    message = str(e.value)
    assert "golden PVC `golden-debian-12` of 10Gi" in message
    assert "lab `hello-lab`'s `min_root_bytes = 12884901888`" in message
    pvc_file = tmp_path / "pvc.json"
    pvc_file.write_text(json.dumps(golden()))
    tf = token_file(tmp_path, new_token())
    _, _, stderr = labctl_render(
        tmp_path, lab_dir, "--name", "vm1", "--root-image", IMAGE, "--backend-namespace",
        "backend", "--golden-pvc-json", str(pvc_file), "--token-file", str(tf), expect=2,
    )
    assert message in stderr


def test_conflicts_name_both_sides_as_labctl_does(tmp_path: Path) -> None:
    """Two inputs that cannot work together: a RenderError with labctl
    render's message (both flags named), whose hint gives their keywords."""
    lab = lab_agent.Lab.load(HELLO)
    session = lab_agent.Lab.load(TWO_VM)
    tf = token_file(tmp_path, new_token())
    other = golden()
    other["metadata"]["name"] = "golden-other"
    pvc_file = tmp_path / "pvc.json"
    pvc_file.write_text(json.dumps(other))
    base: Dict[str, Any] = dict(root_image=IMAGE, agent_path=STATIC_AGENT)
    cases: List[Tuple[Any, Dict[str, Any], List[str], List[str]]] = [
        (lab, dict(agent_from="disk", backend_namespace="backend"),
         ["--agent-from", "disk", "--backend-namespace", "backend"],
         ["agent_from=", "agent_disk="]),
        (lab, dict(agent_disk="configmap:lab-agent", backend_namespace="backend"),
         ["--agent-disk", "configmap:lab-agent", "--backend-namespace", "backend"],
         ["agent_disk=", "agent_from="]),
        (lab, dict(channel="vsock", backend_namespace="backend"),
         ["--channel", "vsock", "--backend-namespace", "backend"],
         ["channel=", "backend_namespace=", "backend_labels="]),
        (lab, dict(channel="tcp"), ["--channel", "tcp"],
         ["channel=", "backend_namespace=", "backend_labels="]),
        (lab, dict(labels={"lab-agent/session": "x"}, backend_namespace="backend"),
         ["--label", "lab-agent/session=x", "--backend-namespace", "backend"], ["labels="]),
        (lab, dict(labels={"app": "lab"}, backend_labels={"app": "lab"}),
         ["--label", "app=lab", "--backend-label", "app=lab"],
         ["backend_labels=", "labels="]),
        (lab, dict(golden_pvc="golden-debian-12", golden_pvc_object=other,
                   backend_namespace="backend"),
         ["--golden-pvc", "golden-debian-12", "--golden-pvc-json", str(pvc_file),
          "--backend-namespace", "backend"],
         ["golden_pvc=", "golden_pvc_object="]),
        (session, dict(namespace="labs", token=new_token(), backend_namespace="backend"),
         ["--namespace", "labs", "--backend-namespace", "backend"], ["vm="]),
        (session, dict(backend_namespace="backend"), ["--backend-namespace", "backend"],
         ["namespace="]),
    ]
    for lab_obj, kwargs, flags, keywords in cases:
        render = lab_agent.render_session if lab_obj is session else lab_agent.render_vm
        with pytest.raises(lab_agent.RenderError) as e:
            render(lab_obj, "s1", **base, **kwargs)
        message = str(e.value)
        assert "cannot go together" in message, message
        assert e.value.hint is not None
        for keyword in keywords:
            assert f"`{keyword}`" in e.value.hint, (message, e.value.hint)
        lab_dir = TWO_VM if lab_obj is session else HELLO
        # The given token of the session case: labctl's is a file.
        token_flags = ["--token-file", str(tf)] if "token" in kwargs else ["--json"]
        out = subprocess.run(
            [LABCTL_BIN, "render", str(lab_dir), "--name", "s1", "--root-image", IMAGE,
             "--agent", STATIC_AGENT, *flags, *token_flags],
            capture_output=True, check=False,
        )
        assert out.returncode == 2, (flags, out.stderr)
        assert message in out.stderr.decode(), (message, out.stderr)


def test_bad_arguments_are_value_errors_naming_the_keyword() -> None:
    lab = lab_agent.Lab.load(HELLO)
    session = lab_agent.Lab.load(TWO_VM)
    base: Dict[str, Any] = dict(root_image=IMAGE, backend_namespace="backend",
                                agent_path=STATIC_AGENT)
    cases: List[Tuple[Dict[str, Any], str]] = [
        (dict(agent_from="registry"), r"^agent_from must be"),
        (dict(channel="udp"), r"^channel must be"),
        (dict(agent_from="disk", agent_disk="oci:x"), r"^agent_disk must be"),
        (dict(agent_from="disk", agent_disk="configmap:Not_A_Name"), r"^agent_disk: "),
        (dict(arch="x86"), r"^arch: unknown architecture `x86`"),
        (dict(cpus=-1), r"^cpus: "),
        (dict(cpus=0), r"^cpus: invalid CPU count"),
        (dict(memory="lots"), r"^memory: invalid memory `lots`"),
        (dict(memory="0"), r"^memory: "),
        (dict(labels={"Bad Key!": "v"}), r"^labels: invalid label key"),
        (dict(labels={"k": "bad value!"}), r"^labels: invalid label value"),
        (dict(backend_labels={"app": "-x-"}, backend_namespace=None),
         r"^backend_labels: invalid backend label value"),
        (dict(backend_namespace="Bad_NS"), r"^backend_namespace: "),
        (dict(namespace="Bad_NS"), r"^namespace: "),
        (dict(root_image=" "), r"^root_image: "),
        (dict(golden_pvc="Bad_PVC"), r"^golden_pvc: "),
        (dict(golden_pvc_object="golden-x"), r"^golden_pvc_object must be the PVC object"),
        (dict(golden_pvc_object={"kind": object()}), r"^golden_pvc_object is not a JSON"),
        (dict(params={"not a key": "x"}), r"parameter `not a key`"),
    ]
    for kwargs, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            lab_agent.render_vm(lab, "vm1", **{**base, **kwargs})
    with pytest.raises(ValueError, match=r"^name: invalid name `Not_A_Name`"):
        lab_agent.render_vm(lab, "Not_A_Name", **base)
    # The lab's shape picks the function; the VM asked for must be one of it.
    with pytest.raises(ValueError, match="render it with render_session"):
        lab_agent.render_vm(session, "s1", **base)
    with pytest.raises(ValueError, match="render it with render_vm"):
        lab_agent.render_session(lab, "s1", namespace="labs", **base)
    with pytest.raises(ValueError, match="no VM named `web`"):
        lab_agent.render_session(session, "s1", namespace="labs", vm="web", **base)
    with pytest.raises(ValueError, match=r"^cluster_domain: "):
        lab_agent.render_session(session, "s1", namespace="labs", cluster_domain="Bad_Domain!",
                                 **base)
    # The verdict's own arguments.
    with pytest.raises(ValueError, match="^min_bytes: "):
        lab_agent.golden_unusable_reason(golden(), IMAGE, -1)
    with pytest.raises(ValueError, match="^min_bytes must be"):
        lab_agent.golden_unusable_reason(golden(), IMAGE, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^pvc must be the PVC object"):
        lab_agent.golden_unusable_reason("golden-x", IMAGE, 0)  # type: ignore[arg-type]


def test_async_variants_render_the_same(tmp_path: Path) -> None:
    lab = lab_agent.Lab.load(TWO_VM)
    token = new_token()
    kwargs: Dict[str, Any] = dict(
        namespace="labs", root_image=IMAGE, vm="server", token=token,
        backend_namespace="backend", agent_path=STATIC_AGENT,
    )
    sync = lab_agent.render_session(lab, "s1", **kwargs)

    async def both() -> Tuple[lab_agent.RenderedManifests, lab_agent.RenderedManifests]:
        one = lab_agent.render_session_async(lab, "s1", **kwargs)
        hello = lab_agent.Lab.load(HELLO)
        two = lab_agent.render_vm_async(
            hello, "vm1", root_image=IMAGE, backend_namespace="backend", token=token,
            agent_path=STATIC_AGENT,
        )
        return await asyncio.gather(one, two)

    a, b = asyncio.run(both())
    assert a == sync
    assert b.text == lab_agent.render_vm(
        lab_agent.Lab.load(HELLO), "vm1", root_image=IMAGE, backend_namespace="backend",
        token=token, agent_path=STATIC_AGENT,
    ).text
    with pytest.raises(lab_agent.RenderError):
        asyncio.run(lab_agent.render_vm_async(
            lab_agent.Lab.load(HELLO), "vm1", root_image=IMAGE, agent_path=STATIC_AGENT,
            channel="tcp",
        ))
