"""A lab's payload as a Kubernetes Secret (:func:`render_secret`,
:func:`render_secret_async`): the native module runs what ``labctl secret``
runs, so both make the same bytes; :class:`Rendered` hands back the
manifest, the token and the budget."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from . import _native
from ._native import Lab


@dataclass(frozen=True)
class Rendered:
    """A lab's payload: ``text`` is the Secret manifest ``labctl secret``
    prints; ``user_data`` the user-data as text (the MIME message
    cloud-init splits) and ``user_data_bytes`` exactly what the Secret
    carries (the same bytes, or them gzip'd with ``agent_from="disk"``);
    ``token`` the agent's token; ``budget`` the byte budget (``labctl
    secret --json``'s ``budget``); ``agent_sha256`` the agent's SHA-256,
    which a ``"disk"`` payload pins."""

    text: str
    user_data: str
    token: str
    token_generated: bool
    agent_path: str
    budget: Dict[str, Any]
    arch: str = "amd64"
    #: The VM of a lab with ``[[vms]]`` this payload is for; else None.
    vm: Optional[str] = None
    user_data_bytes: bytes = b""
    #: ``"embedded"`` or ``"disk"``.
    agent_from: str = "embedded"
    agent_sha256: str = ""
    #: ``"tcp"``, ``"vsock"`` or ``"both"``: where the agent listens.
    channel: str = "both"



def render_secret(
    lab: Lab,
    name: str,
    namespace: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    agent_path: Optional[str] = None,
    token: Optional[str] = None,
    format: str = "yaml",
    arch: Optional[str] = None,
    vm: Optional[str] = None,
    params: Optional[Mapping[str, str]] = None,
    agent_from: str = "embedded",
    channel: str = "both",
) -> Rendered:
    """Renders ``lab``'s payload into a Kubernetes Secret, exactly as
    ``labctl secret LAB --name NAME [--namespace NS] [--label K=V]...
    [--agent PATH] [--token-file F] --format FORMAT [--arch ARCH]`` prints it.

    ``arch`` is the lab VM's architecture, ``"amd64"`` or ``"arm64"`` (the
    node's ``kubernetes.io/arch``; default: ``agent_path``'s, else amd64):
    it picks the agent and the serial console. ``agent_path`` is the static
    ``lab-agent`` (default: what ``labctl secret`` finds, the ``labctl`` on
    ``PATH`` looking for that architecture's: beside itself, in its target
    dir, in the source tree it was built from; none usable: a
    :class:`RenderError` listing each place and why it did not do);
    ``token`` is generated when not given (``.token`` has it).

    In a lab of several VMs (``[[vms]]``), ``vm`` names the one this
    payload is for (required there; refused for a lab of one VM): its
    setup, its own token, and ``LAB_VM``/``LAB_VMS`` for its setup and
    checks. ``params`` become ``LAB_PARAM_<KEY>`` for them (keys: letters,
    digits, ``_``; values any text), as ``--vm NAME --param KEY=VALUE``.
    Either wrong is a ``ValueError``.

    ``agent_from="disk"`` (``labctl secret --agent-from disk``) leaves the
    agent out: the payload pins the SHA-256 of ``agent_path``'s agent, and
    the VM takes it from the agent's disk (``labctl agent-disk``, attached
    once per cluster as a containerDisk with ``serial: lab-agent`` or a
    ConfigMap volume with ``volumeLabel: LAB-AGENT``); the user-data is
    gzip'd, a few KiB. ``"embedded"`` (the default) carries the agent.
    ``channel`` (``labctl secret --channel``) is where the agent listens:
    ``"tcp"`` (port 8899), ``"vsock"`` (virtio-vsock port 8899, KubeVirt's
    ``autoattachVSOCK``: no network at all) or ``"both"`` (the default);
    another is a ``ValueError``.
    Raises :class:`RenderError` (agent, names, token, over 1 MiB) or
    :class:`LabError`.

    It takes CPU: the agent is compressed into the payload (~95 ms per
    call, with the GIL released). From asyncio, use
    :func:`render_secret_async`, which runs it in a worker thread."""
    r = _native.render_secret(
        lab,
        name,
        namespace=namespace,
        labels=None if labels is None else dict(labels),
        agent_path=agent_path,
        token=token,
        format=format,
        arch=arch,
        vm=vm,
        params=None if params is None else dict(params),
        agent_from=agent_from,
        channel=channel,
    )
    return Rendered(
        text=r.text,
        user_data=r.user_data,
        token=r.token,
        token_generated=r.token_generated,
        agent_path=str(r.agent_path),
        budget=json.loads(r.budget_json),
        arch=r.arch,
        vm=r.vm,
        user_data_bytes=r.user_data_bytes,
        agent_from=r.agent_from,
        agent_sha256=r.agent_sha256,
        channel=r.channel,
    )


async def render_secret_async(
    lab: Lab,
    name: str,
    namespace: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    agent_path: Optional[str] = None,
    token: Optional[str] = None,
    format: str = "yaml",
    arch: Optional[str] = None,
    vm: Optional[str] = None,
    params: Optional[Mapping[str, str]] = None,
    agent_from: str = "embedded",
    channel: str = "both",
) -> Rendered:
    """:func:`render_secret` off the event loop: it runs in asyncio's
    default thread pool (``asyncio.to_thread``), so the loop goes on
    serving while the agent is compressed (the render releases the GIL);
    the same arguments, answer and errors."""
    return await asyncio.to_thread(
        render_secret,
        lab,
        name,
        namespace,
        labels,
        agent_path,
        token,
        format,
        arch,
        vm,
        params,
        agent_from,
        channel,
    )
