"""lab_agent: the lab-agent client for Python backends.

One implementation, two languages: every call runs the Rust
``lab-agent-client`` (and, for :func:`render_secret`, what ``labctl secret``
runs) inside this package's native module, on one tokio runtime per
process. The Python modules here only give the answers Python types.

- :class:`Client` blocks the calling thread (the GIL is released while it
  waits, and one client may be shared by many threads);
- :class:`AsyncClient` has the same methods as coroutines, for asyncio and
  FastAPI, without blocking the event loop;
- ``exec_stream`` runs a command with its output streamed: a
  :class:`ExecStream` (``for chunk in ...``; :class:`AsyncExecStream` with
  ``async for``) yields each :class:`StreamChunk` as the command writes it,
  then holds the :class:`ExecResult` in ``.result``; a stream that breaks
  before its result raises, never ends quietly; leaving the loop early and
  dropping (or closing) the stream ends the request, and the agent kills
  the command. ``setup_log(offset, wait)`` reads the setup log as it grows
  (:class:`SetupLog`);
- :func:`wait_each` / :func:`wait_each_async` hand out each VM the moment
  its wait ends (``(key, Ready | AgentError)`` as they come);
  :func:`wait_all` / :func:`wait_all_async` wait for every VM, then answer;
- ``info()`` tells what the agent says of itself (:class:`Info`: its
  version, ``lab_dir``, the VM's ``instance``);
- :func:`grade_all` / :func:`grade_all_async` grade many VMs with a
  concurrency bound;
- :func:`render_secret` makes a lab's Kubernetes Secret, byte-identical to
  ``labctl secret`` (:func:`render_secret_async` off the event loop);
  :func:`render_vm` and :func:`render_session` every object of a lab's VM
  or session (NetworkPolicy, Service, Secrets, VirtualMachines: a
  :class:`RenderedManifests`), byte-identical to ``labctl render``
  (``*_async`` off the event loop); :func:`golden_unusable_reason` says
  whether a golden PVC can be a VM's root now, and why not;
- :func:`timeline_distribution` sums up many VMs' logged ``/v1/ready``
  answers (with the backend's own stamps beside them: request to ready)
  per phase, the figures of ``labctl timeline --json``;
- every bad argument is a ``ValueError``, raised before anything is sent;
- every error is an :class:`AgentError`; catch :class:`Unauthorized`,
  :class:`SetupFailed`, :class:`Timeout`, :class:`Unreachable`, ... as the
  Rust client's ``is_*`` predicates would branch; a guest that answers what
  no lab-agent does raises :class:`TooLarge`, :class:`MalformedAnswer` or
  :class:`ProtocolError`. An agent that restarted, crashed or was reset
  between calls costs a read nothing (it is sent again on a fresh
  connection); an exec that met its dead connection raises
  :class:`AgentWentAway` (an :class:`Unreachable`), whose
  ``may_have_started`` says whether the command may have run: it is never
  sent again behind your back. Messages show the guest's text escaped; the
  attributes (``agent_message``, ``ready``, ``log_tail``) hold it as sent;
- a client may be pinned to one life of the VM (``instance=ID``, the
  ``Ready.instance.id`` recorded when the VM was handed out): the agent of
  another instance runs none of its commands, and the call raises
  :class:`InstanceChanged` (the VM was reset, the student's work inside it
  is gone; ``pinned_by`` says whose pin it was), one naming none (an older
  agent) :class:`InstanceUnknown`; an error's ``ready`` is a :class:`Ready`
  and an :class:`ExecResult` says which ``instance_id``/``boot_id`` ran it;
- ``grade`` and :func:`grade_all` keep the grading rule themselves: a VM
  that is not ready raises :class:`NotReady` (:class:`SetupFailed` when its
  setup failed) with nothing run;
- the blocking :class:`Client` (and an :class:`ExecStream` waiting for
  its next chunk) raises ``KeyboardInterrupt`` on Ctrl-C within 50 ms; a cancelled :class:`AsyncClient` call closes its
  connection; at interpreter exit, calls still running are ended before
  the interpreter finalises (no crash, whatever the agents did).
"""

# One module per job, each private: import from ``lab_agent`` itself.
# - ``_ready``: the readiness answer (Ready, Instance, Timeline, ...);
# - ``_exec``: an exec's request, result and stream, and the setup log;
# - ``_grade``: a grade's Report and CheckResult;
# - ``_client``: Client and AsyncClient (one agent);
# - ``_fleet``: wait_each, wait_all and grade_all (many VMs, each on its own);
# - ``_session``: Session (a lab of several VMs, as one);
# - ``_render``: render_secret and Rendered;
# - ``_manifests``: render_vm, render_session (every object of a lab's VM
#   or session) and golden_unusable_reason;
# - ``_timeline``: timeline_distribution (labctl timeline's figures).

from __future__ import annotations

from . import _native
from ._client import DEFAULT_REQUEST_TIMEOUT, AsyncClient, Client
from ._exec import (
    AsyncExecStream,
    ExecResult,
    ExecStream,
    SetupLog,
    StreamChunk,
    _exec_request,  # noqa: F401  (its signature is tested against Client.exec's)
)
from ._fleet import (
    WaitEach,
    grade_all,
    grade_all_async,
    wait_all,
    wait_all_async,
    wait_each,
    wait_each_async,
)
from ._grade import CheckResult, Report
from ._native import (
    AgentError,
    AgentWentAway,
    Busy,
    InstanceChanged,
    InstanceUnknown,
    Lab,
    LabError,
    MalformedAnswer,
    NotReady,
    ProtocolError,
    Rejected,
    RenderError,
    SetupFailed,
    Timeout,
    TooLarge,
    Unauthorized,
    Unreachable,
    WaitTimeout,
)
from ._ready import (
    CLOUD_INIT_STAGES,
    CloudInit,
    Disk,
    Info,
    Instance,
    Ready,
    RootDisk,
    SetupStatus,
    Span,
    Timeline,
)
from ._manifests import (
    NOT_GIVEN,
    RenderedManifests,
    RenderedVm,
    RootChoice,
    golden_unusable_reason,
    render_session,
    render_session_async,
    render_vm,
    render_vm_async,
)
from ._render import Rendered, render_secret, render_secret_async
from ._session import Session
from ._timeline import Distribution, PhaseStats, timeline_distribution

__version__: str = _native.__version__

__all__ = [
    "AgentError",
    "AgentWentAway",
    "AsyncClient",
    "AsyncExecStream",
    "Busy",
    "CheckResult",
    "Client",
    "CloudInit",
    "DEFAULT_REQUEST_TIMEOUT",
    "Disk",
    "Distribution",
    "ExecResult",
    "ExecStream",
    "Info",
    "Instance",
    "InstanceChanged",
    "InstanceUnknown",
    "Lab",
    "LabError",
    "MalformedAnswer",
    "NOT_GIVEN",
    "NotReady",
    "PhaseStats",
    "ProtocolError",
    "Ready",
    "Rejected",
    "RenderError",
    "Rendered",
    "RenderedManifests",
    "RenderedVm",
    "Report",
    "RootChoice",
    "Session",
    "RootDisk",
    "SetupFailed",
    "SetupLog",
    "SetupStatus",
    "Span",
    "StreamChunk",
    "Timeline",
    "Timeout",
    "TooLarge",
    "Unauthorized",
    "Unreachable",
    "WaitEach",
    "WaitTimeout",
    "grade_all",
    "golden_unusable_reason",
    "grade_all_async",
    "render_secret",
    "render_secret_async",
    "render_session",
    "render_session_async",
    "render_vm",
    "render_vm_async",
    "timeline_distribution",
    "wait_all",
    "wait_all_async",
    "wait_each",
    "wait_each_async",
]
