"""Every Kubernetes object of a lab's VM (:func:`render_vm`) or of a
session of several (:func:`render_session`), from one set of arguments so
that they cannot disagree: the native module runs what ``labctl render``
runs, so both make the same bytes. :func:`golden_unusable_reason` is the
golden disk's verdict the renderer uses, for a backend to ask before each
VM."""

from __future__ import annotations

import asyncio
import enum
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Mapping, Optional, Union

from . import _native
from ._native import Lab


class _NotGiven(enum.Enum):
    NOT_GIVEN = "NOT_GIVEN"


#: ``golden_pvc_object``'s default: no PVC object given (``None`` is one
#: given as not found).
NOT_GIVEN = _NotGiven.NOT_GIVEN

#: A PVC object as ``kubectl get pvc NAME -o json`` prints it, ``None``
#: (not found), or :data:`NOT_GIVEN`.
PvcObject = Union[Mapping[str, Any], None, Literal[_NotGiven.NOT_GIVEN]]


@dataclass(frozen=True)
class RootChoice:
    """The root disk the VMs boot: ``disk`` is ``"golden"`` (the PVC
    ``claim``, under a copy-on-write layer per VM) or ``"containerdisk"``
    (``image``); ``fallback_reason`` says, in one sentence, why the golden
    PVC given as ``golden_pvc_object`` was not used (the sentence of
    :func:`golden_unusable_reason`), else None."""

    disk: str
    claim: Optional[str] = None
    image: Optional[str] = None
    fallback_reason: Optional[str] = None


@dataclass(frozen=True)
class RenderedVm:
    """One VM of a render: its ``VirtualMachine``'s ``name``, its Secret's
    ``secret_name``, the ``token`` its agent will require (generated unless
    one was given), ``user_data_size`` (the bytes the Secret's
    ``userdata`` holds, counted against the 1 MiB limit), and ``budget``
    (``labctl render --json``'s ``budget`` of this VM). ``vm`` is its
    ``[[vms]]`` entry; None in a lab of one VM."""

    name: str
    secret_name: str
    token: str
    token_generated: bool
    user_data_size: int
    budget: Dict[str, Any]
    vm: Optional[str] = None


@dataclass(frozen=True)
class RenderedManifests:
    """Every object of one render. ``text`` is the YAML stream ``labctl
    render -o FILE`` writes (documents separated by ``---``); ``objects``
    the same objects as dicts, in the order to apply them (the
    NetworkPolicy, a session's Service, then per VM its Secret and its
    ``VirtualMachine``); ``vms`` each VM's names and token; ``root`` the
    root disk chosen. ``agent_sha256`` is the agent's SHA-256 (what an
    ``agent_from="disk"`` payload pins)."""

    text: str
    objects: List[Dict[str, Any]]
    vms: List[RenderedVm]
    root: RootChoice
    lab: str
    name: str
    namespace: Optional[str]
    arch: str
    agent_path: str
    agent_from: str
    agent_sha256: str
    channel: str


def _pvc_json(keyword: str, pvc: Optional[Mapping[str, Any]]) -> str:
    if pvc is not None and not isinstance(pvc, Mapping):
        raise ValueError(
            f"{keyword} must be the PVC object as a dict (json.loads of `kubectl get pvc "
            f"NAME -o json`) or None (not found), not {type(pvc).__name__}"
        )
    try:
        return json.dumps(None if pvc is None else dict(pvc))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{keyword} is not a JSON object as the API returns one: {e}") from None


def _render(
    lab: Lab,
    name: str,
    session: bool,
    root_image: str,
    vm: Optional[str],
    golden_pvc_object: PvcObject,
    labels: Optional[Mapping[str, str]],
    params: Optional[Mapping[str, str]],
    backend_labels: Optional[Mapping[str, str]],
    **kwargs: Any,
) -> RenderedManifests:
    golden_json = (
        None
        if golden_pvc_object is NOT_GIVEN
        else _pvc_json("golden_pvc_object", golden_pvc_object)
    )
    r = _native.render_manifests(
        lab,
        name,
        root_image,
        session,
        vm=vm,
        golden_pvc_json=golden_json,
        labels=None if labels is None else dict(labels),
        params=None if params is None else dict(params),
        backend_labels=None if backend_labels is None else dict(backend_labels),
        **kwargs,
    )
    report = json.loads(r.report_json)
    return RenderedManifests(
        text=r.text,
        objects=report["objects"],
        vms=[
            RenderedVm(
                name=v["name"],
                secret_name=v["secret_name"],
                token=v["token"],
                token_generated=v["token_generated"],
                user_data_size=v["user_data_size"],
                budget=v["budget"],
                vm=v["vm"],
            )
            for v in report["vms"]
        ],
        root=RootChoice(
            disk=report["root"]["disk"],
            claim=report["root"].get("claim"),
            image=report["root"].get("image"),
            fallback_reason=report["root"].get("fallback_reason"),
        ),
        lab=report["lab"],
        name=report["name"],
        namespace=report["namespace"],
        arch=report["arch"],
        agent_path=report["agent_path"],
        agent_from=report["agent_from"],
        agent_sha256=report["agent_sha256"],
        channel=report["channel"],
    )


def render_vm(
    lab: Lab,
    name: str,
    *,
    root_image: str,
    namespace: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    arch: Optional[str] = None,
    agent_path: Optional[str] = None,
    agent_from: str = "embedded",
    agent_disk: Optional[str] = None,
    channel: str = "both",
    golden_pvc: Optional[str] = None,
    golden_pvc_object: PvcObject = NOT_GIVEN,
    cpus: int = 2,
    memory: str = "4Gi",
    backend_namespace: Optional[str] = None,
    backend_labels: Optional[Mapping[str, str]] = None,
    cluster_domain: str = "cluster.local",
    token: Optional[str] = None,
    params: Optional[Mapping[str, str]] = None,
    autologin: bool = True,
) -> RenderedManifests:
    """Renders every object of ``lab``'s VM (a lab of one VM, without
    ``[[vms]]``; a session's is :func:`render_session`'s), exactly as
    ``labctl render LAB --name NAME --root-image IMAGE ...`` writes them:
    the NetworkPolicy, the Secret (as :func:`render_secret` renders it,
    named ``NAME-userdata``) and the ``VirtualMachine`` ``NAME`` that
    boots it. Each keyword is the flag of the same name:

    - ``namespace``, ``labels`` (``--label K=V``, on every object and the
      VM's pod; the ``lab-agent/`` prefix is the renderer's own);
    - ``arch`` (``"amd64"``/``"arm64"``; default: ``agent_path``'s, else
      amd64), ``agent_path`` (``--agent``; default: as
      :func:`render_secret` finds it);
    - ``agent_from`` (``"embedded"`` or ``"disk"``) and ``agent_disk``
      (``"containerdisk:IMAGE"``, the disk with serial ``lab-agent``, or
      ``"configmap:NAME"``, the volume labelled ``LAB-AGENT``): ``"disk"``
      needs one, ``"embedded"`` refuses one;
    - ``channel`` (``"tcp"``, ``"vsock"``: ``autoattachVSOCK`` and no port
      open, or ``"both"``); with TCP, ``backend_namespace`` and/or
      ``backend_labels`` (``--backend-label``) select the pods that alone
      reach port 8899; with ``"vsock"`` they are refused;
    - ``root_image`` (the containerDisk: the root, or the golden's
      original and fallback); ``golden_pvc`` boots the PVC of that name,
      taken as usable; ``golden_pvc_object`` (``--golden-pvc-json``: the
      PVC as ``kubectl get pvc NAME -o json`` gives it, as a dict, or
      None when it was not found) boots it only if
      :func:`golden_unusable_reason` finds nothing wrong, else the
      containerDisk, and ``.root.fallback_reason`` says why;
    - ``cpus``, ``memory`` (a Kubernetes quantity), ``cluster_domain``;
    - ``token`` (``--token-file``'s token; default: a new one, in
      ``.vms[0].token``), ``params`` (``--param KEY=VALUE``),
      ``autologin=False`` (``--no-autologin``).

    A value wrong on its own raises ``ValueError`` starting with its
    keyword; two that cannot work together (``agent_from="disk"`` without
    ``agent_disk``, a label the policy's selector would match, a golden
    PVC smaller than the lab's ``min_root_bytes``, ...) a
    :class:`RenderError` naming both (in ``labctl render``'s flags; its
    ``hint`` names the keywords); the agent, the token, a payload over
    1 MiB a :class:`RenderError`; the lab's files a :class:`LabError`.

    It takes CPU (the agent is compressed into the payload; the GIL is
    released): from asyncio, use :func:`render_vm_async`."""
    return _render(
        lab,
        name,
        False,
        root_image,
        None,
        golden_pvc_object,
        labels,
        params,
        backend_labels,
        namespace=namespace,
        arch=arch,
        agent_path=agent_path,
        agent_from=agent_from,
        agent_disk=agent_disk,
        channel=channel,
        golden_pvc=golden_pvc,
        cpus=cpus,
        memory=memory,
        backend_namespace=backend_namespace,
        cluster_domain=cluster_domain,
        token=token,
        autologin=autologin,
    )


def render_session(
    lab: Lab,
    name: str,
    *,
    root_image: str,
    namespace: Optional[str] = None,
    vm: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    arch: Optional[str] = None,
    agent_path: Optional[str] = None,
    agent_from: str = "embedded",
    agent_disk: Optional[str] = None,
    channel: str = "both",
    golden_pvc: Optional[str] = None,
    golden_pvc_object: PvcObject = NOT_GIVEN,
    cpus: int = 2,
    memory: str = "4Gi",
    backend_namespace: Optional[str] = None,
    backend_labels: Optional[Mapping[str, str]] = None,
    cluster_domain: str = "cluster.local",
    token: Optional[str] = None,
    params: Optional[Mapping[str, str]] = None,
    autologin: bool = True,
) -> RenderedManifests:
    """Renders every object of a session of ``lab`` (a lab with
    ``[[vms]]``), exactly as ``labctl render LAB --name NAME --namespace NS
    --root-image IMAGE ...`` writes them: the NetworkPolicy, the headless
    Service ``NAME``, and per VM its Secret ``NAME-VM-userdata`` and its
    ``VirtualMachine`` ``NAME-VM`` (``hostname``/``subdomain``: the VMs
    find each other at ``VM.NAME.NS.svc.CLUSTER_DOMAIN``, and each payload
    gets that domain as ``LAB_PARAM_SESSION_DOMAIN``). ``namespace`` is
    required. ``vm`` renders one VM of it (``--vm``: its Secret and VM,
    and the session's objects); ``token`` is that VM's (each VM of a
    session has its own: without ``vm`` a new one is made per VM, in
    ``.vms``). The other keywords, and the errors, are
    :func:`render_vm`'s. From asyncio, use :func:`render_session_async`."""
    return _render(
        lab,
        name,
        True,
        root_image,
        vm,
        golden_pvc_object,
        labels,
        params,
        backend_labels,
        namespace=namespace,
        arch=arch,
        agent_path=agent_path,
        agent_from=agent_from,
        agent_disk=agent_disk,
        channel=channel,
        golden_pvc=golden_pvc,
        cpus=cpus,
        memory=memory,
        backend_namespace=backend_namespace,
        cluster_domain=cluster_domain,
        token=token,
        autologin=autologin,
    )


async def render_vm_async(
    lab: Lab,
    name: str,
    *,
    root_image: str,
    namespace: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    arch: Optional[str] = None,
    agent_path: Optional[str] = None,
    agent_from: str = "embedded",
    agent_disk: Optional[str] = None,
    channel: str = "both",
    golden_pvc: Optional[str] = None,
    golden_pvc_object: PvcObject = NOT_GIVEN,
    cpus: int = 2,
    memory: str = "4Gi",
    backend_namespace: Optional[str] = None,
    backend_labels: Optional[Mapping[str, str]] = None,
    cluster_domain: str = "cluster.local",
    token: Optional[str] = None,
    params: Optional[Mapping[str, str]] = None,
    autologin: bool = True,
) -> RenderedManifests:
    """:func:`render_vm` off the event loop: it runs in asyncio's default
    thread pool (``asyncio.to_thread``), so the loop goes on serving while
    the agent is compressed (the render releases the GIL); the same
    arguments, answer and errors."""
    return await asyncio.to_thread(
        render_vm,
        lab,
        name,
        root_image=root_image,
        namespace=namespace,
        labels=labels,
        arch=arch,
        agent_path=agent_path,
        agent_from=agent_from,
        agent_disk=agent_disk,
        channel=channel,
        golden_pvc=golden_pvc,
        golden_pvc_object=golden_pvc_object,
        cpus=cpus,
        memory=memory,
        backend_namespace=backend_namespace,
        backend_labels=backend_labels,
        cluster_domain=cluster_domain,
        token=token,
        params=params,
        autologin=autologin,
    )


async def render_session_async(
    lab: Lab,
    name: str,
    *,
    root_image: str,
    namespace: Optional[str] = None,
    vm: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    arch: Optional[str] = None,
    agent_path: Optional[str] = None,
    agent_from: str = "embedded",
    agent_disk: Optional[str] = None,
    channel: str = "both",
    golden_pvc: Optional[str] = None,
    golden_pvc_object: PvcObject = NOT_GIVEN,
    cpus: int = 2,
    memory: str = "4Gi",
    backend_namespace: Optional[str] = None,
    backend_labels: Optional[Mapping[str, str]] = None,
    cluster_domain: str = "cluster.local",
    token: Optional[str] = None,
    params: Optional[Mapping[str, str]] = None,
    autologin: bool = True,
) -> RenderedManifests:
    """:func:`render_session` off the event loop (``asyncio.to_thread``);
    the same arguments, answer and errors."""
    return await asyncio.to_thread(
        render_session,
        lab,
        name,
        vm=vm,
        root_image=root_image,
        namespace=namespace,
        labels=labels,
        arch=arch,
        agent_path=agent_path,
        agent_from=agent_from,
        agent_disk=agent_disk,
        channel=channel,
        golden_pvc=golden_pvc,
        golden_pvc_object=golden_pvc_object,
        cpus=cpus,
        memory=memory,
        backend_namespace=backend_namespace,
        backend_labels=backend_labels,
        cluster_domain=cluster_domain,
        token=token,
        params=params,
        autologin=autologin,
    )


def golden_unusable_reason(
    pvc: Optional[Mapping[str, Any]], image: str, min_bytes: int
) -> Optional[str]:
    """None when ``pvc`` (the PVC object as ``kubectl get pvc NAME -o
    json`` gives it, as a dict; None when it was not found or may not be
    read) can be the golden root of a VM whose containerDisk is ``image``,
    for a lab that needs ``min_bytes`` of root (``Lab.min_root_bytes``, 0
    for any size); else one sentence naming the PVC and why not: not
    bound, being deleted, still importing, no image or another image
    recorded (annotation ``lab-agent/golden-image``, else CDI's import
    endpoint), an access mode one node at a time, a ``volumeMode`` KubeVirt
    cannot layer over, no size, or smaller than ``min_bytes``. The Rust
    function's exact text, the one :func:`render_vm` reports as
    ``.root.fallback_reason``. A backend asks it before each VM: golden is
    an optimisation, never a prerequisite."""
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int):
        raise ValueError(f"min_bytes must be a number of bytes, not {min_bytes!r}")
    return _native.golden_unusable_reason(_pvc_json("pvc", pvc), image, min_bytes)
