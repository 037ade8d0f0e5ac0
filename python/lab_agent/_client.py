"""One agent's client, twice: :class:`Client` blocks the calling thread
(the native call releases the GIL), :class:`AsyncClient` has the same
methods as coroutines. Both only build requests and type answers; the calls
are the native module's (the Rust ``lab-agent-client``)."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from . import _native
from ._exec import (
    AsyncExecStream,
    ExecResult,
    ExecStream,
    SetupLog,
    _exec_request,
    _exec_result,
    _setup_log,
)
from ._grade import Report
from ._native import Lab
from ._ready import Info, Ready, _info, _ready

#: Seconds a client awaits an answer beyond what the request asks the
#: agent to spend (the Rust client's ``DEFAULT_REQUEST_TIMEOUT``); the
#: default of ``request_timeout``.
DEFAULT_REQUEST_TIMEOUT: float = _native.DEFAULT_REQUEST_TIMEOUT


def _log_args(offset: int, wait: int) -> None:
    """``setup_log``'s arguments, refused before anything is sent."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError("offset must be a byte offset >= 0, not %r" % (offset,))
    if isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= 60:
        raise ValueError("wait must be whole seconds from 0 to 60 (the agent's most), not %r" % (wait,))


def _lab_dir(lab_dir: Optional[str]) -> Optional[str]:
    """``grade``'s ``lab_dir``: the guest's absolute ``LAB_DIR``, or None."""
    if lab_dir is not None and not (isinstance(lab_dir, str) and lab_dir.startswith("/")):
        raise ValueError(
            "lab_dir must be the guest's absolute LAB_DIR (e.g. \"/opt/lab\"), or None for "
            "what the agent reports, not %r" % (lab_dir,)
        )
    return lab_dir


class _Base:
    _native: _native.Client

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        instance: Optional[str] = None,
        kube_server: Optional[str] = None,
        kube_token_file: Optional[str] = None,
        kube_ca_file: Optional[str] = None,
    ) -> None:
        """A client for the agent at ``url``, with its token given, or read
        from ``token_file``: exactly one of the two.

        ``url`` is where the agent is: ``http://HOST:8899`` (TCP),
        ``vsock://CID:PORT`` (AF_VSOCK from this host),
        ``vsock+unix:///PATH?port=PORT`` (a hybrid vsock socket: Firecracker,
        Cloud Hypervisor, vhost-device-vsock) or
        ``kubevirt://NAMESPACE/VMI[?port=8899]`` (KubeVirt's vsock
        subresource through the API server). For ``kubevirt://`` the pod's
        own service account is used unless ``kube_server``
        (``https://HOST[:PORT]``), ``kube_token_file`` and ``kube_ca_file``
        are given, all three; credentials that cannot be used are a
        ``ValueError``. KubeVirt's refusals raise :class:`Unreachable` with
        ``relay_status`` (403: no RBAC ``get`` on
        ``virtualmachineinstances/vsock``; 404: no such VMI).

        ``request_timeout`` is how many seconds an answer is awaited beyond
        what the request asks the agent to spend (an exec's
        ``timeout_secs``, a readiness long-poll): an agent that never
        answers costs a call that much, then :class:`Timeout`. Above 0, at
        most a day; a bad value is a ``ValueError``, and so is a ``url``
        without its scheme (``10.0.0.5:8899``).

        ``instance`` pins the client to one life of the VM: the
        ``Ready.instance.id`` recorded when the VM was handed to the
        student. Every exec (and each check of a grade) carries it: the
        agent of another instance runs nothing and the call raises
        :class:`InstanceChanged` (the VM was reset), as does any answer of
        another instance (ready, info); one naming no instance raises
        :class:`InstanceUnknown`. (An agent older than pinned execs is held
        to it on its answer, after the command ran.) Not 32 lowercase hex
        digits: ``ValueError``."""
        self._native = _native.Client(
            url,
            token=token,
            token_file=token_file,
            request_timeout=request_timeout,
            instance=instance,
            kube_server=kube_server,
            kube_token_file=kube_token_file,
            kube_ca_file=kube_ca_file,
        )

    @property
    def url(self) -> str:
        return self._native.url

    @property
    def instance(self) -> Optional[str]:
        """The instance id the client is pinned to, or None."""
        return self._native.instance

    def __repr__(self) -> str:
        return "%s(%r)" % (type(self).__name__, self.url)


class Client(_Base):
    """A blocking client for one agent. Thread-safe: share one per VM.

    Every method raises an :class:`AgentError` subclass on failure, and
    :class:`Unauthorized` whenever the token is refused.
    """

    def ready(self) -> Ready:
        """The agent's readiness now (one request, no waiting)."""
        return _ready(self._native.ready())

    def info(self) -> Info:
        """What the agent says of itself and its VM (``/v1/info``): its
        version, the OS, ``lab_dir`` (the guest's ``LAB_DIR``), which life
        of the VM (``instance``), the root disk."""
        return _info(self._native.info())

    def wait_ready(self, timeout: float) -> Ready:
        """Waits up to ``timeout`` seconds until the VM is ready.

        Long-polls, and treats "port closed, reset, no answer" as not up
        yet with bounded backoff. Raises :class:`SetupFailed` at once when
        setup failed (``exit_code``, ``log_tail``), :class:`Unauthorized`,
        :class:`WaitTimeout` (the agent answered, not ready) or
        :class:`Timeout` / :class:`Unreachable` (it never answered).
        """
        return _ready(self._native.wait_ready(timeout))

    def exec(
        self,
        command: str,
        user: Optional[str] = None,
        timeout_secs: Optional[int] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        profile: Optional[str] = None,
        leave_running: bool = False,
        max_pids: Optional[int] = None,
        max_memory_bytes: Optional[int] = None,
    ) -> ExecResult:
        """Runs ``command`` in a login shell as ``user`` (default root).

        ``profile`` picks the shell's startup files: ``"login"`` (the
        default: the system's and the user's own), ``"system"`` (the
        system's only: a student cannot change what a check sees by
        editing their dotfiles) or ``"none"`` (``--noprofile --norc``).

        What the command leaves running when its shell exits is killed
        with it, unless ``leave_running`` is true (a server the lab needs).
        ``max_pids`` and ``max_memory_bytes`` set its limits where the
        guest delegates the controllers (default: the agent's); a limit it
        hit is in :attr:`ExecResult.limits_hit`.

        A non-zero exit is a result, not an exception; a command that
        cannot start (unknown user, missing cwd) raises :class:`Rejected`.
        An agent that restarted, crashed or was reset since the last call
        may leave the request on a dead kept-alive connection: then
        :class:`AgentWentAway`, whose ``may_have_started`` says whether the
        command may have run (it is never sent again behind your back).
        """
        request = _exec_request(
            command, user, timeout_secs, cwd, env, stdin, max_output_bytes, profile,
            leave_running, max_pids, max_memory_bytes,
        )
        return _exec_result(self._native.exec(request))

    def exec_stream(
        self,
        command: str,
        user: Optional[str] = None,
        timeout_secs: Optional[int] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        profile: Optional[str] = None,
        leave_running: bool = False,
        max_pids: Optional[int] = None,
        max_memory_bytes: Optional[int] = None,
    ) -> ExecStream:
        """:meth:`exec` with the output as it comes: an :class:`ExecStream`
        of :class:`StreamChunk` s, then its ``result``. The request is sent
        now: what :meth:`exec` raises before the command runs (a bad
        request, :class:`Rejected`, :class:`Busy`) is raised here. The same
        caps, timeouts and kill rules as :meth:`exec`; the streamed bytes
        count against ``max_output_bytes``."""
        request = _exec_request(
            command, user, timeout_secs, cwd, env, stdin, max_output_bytes, profile,
            leave_running, max_pids, max_memory_bytes,
        )
        return ExecStream(self._native.exec_stream(request))

    def setup_log(self, offset: int = 0, wait: int = 0) -> SetupLog:
        """The setup log's bytes from ``offset``; with ``wait`` (seconds,
        at most 60) it waits while the setup runs and nothing new was
        written. Follow a setup by calling again from ``next_offset`` until
        ``running`` is false and ``data`` is empty. A negative ``offset``
        or a ``wait`` past 60: ``ValueError``."""
        _log_args(offset, wait)
        return _setup_log(self._native.setup_log(offset, wait))

    def grade(
        self,
        lab: Lab,
        checks: Optional[Sequence[str]] = None,
        lab_dir: Optional[str] = None,
    ) -> Report:
        """Grades ``lab`` as ``labctl grade`` does: a VM that is not ready
        is not graded, nothing is run (:class:`NotReady`, or
        :class:`SetupFailed`; the rule is the library's); the report's
        ``instance`` is the VM life graded (another one answering a check,
        a reset mid-grade, raises :class:`InstanceChanged`);
        ``checks`` picks checks by name (unknown: :class:`LabError`);
        ``lab_dir`` is the guest's ``LAB_DIR`` (default: what the agent
        reports, else ``/opt/lab``; not absolute: ``ValueError``)."""
        return Report.from_json(
            self._native.grade(
                lab, checks=None if checks is None else list(checks), lab_dir=_lab_dir(lab_dir)
            )
        )


class AsyncClient(_Base):
    """:class:`Client` for asyncio: every method is a coroutine, run on the
    package's tokio runtime while the event loop goes on."""

    async def ready(self) -> Ready:
        return _ready(await self._native.ready_async())

    async def info(self) -> Info:
        """See :meth:`Client.info`."""
        return _info(await self._native.info_async())

    async def wait_ready(self, timeout: float) -> Ready:
        """See :meth:`Client.wait_ready`."""
        return _ready(await self._native.wait_ready_async(timeout))

    async def exec(
        self,
        command: str,
        user: Optional[str] = None,
        timeout_secs: Optional[int] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        profile: Optional[str] = None,
        leave_running: bool = False,
        max_pids: Optional[int] = None,
        max_memory_bytes: Optional[int] = None,
    ) -> ExecResult:
        """See :meth:`Client.exec`."""
        request = _exec_request(
            command, user, timeout_secs, cwd, env, stdin, max_output_bytes, profile,
            leave_running, max_pids, max_memory_bytes,
        )
        return _exec_result(await self._native.exec_async(request))

    def exec_stream(
        self,
        command: str,
        user: Optional[str] = None,
        timeout_secs: Optional[int] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        profile: Optional[str] = None,
        leave_running: bool = False,
        max_pids: Optional[int] = None,
        max_memory_bytes: Optional[int] = None,
    ) -> AsyncExecStream:
        """See :meth:`Client.exec_stream`; not a coroutine: ``async for
        chunk in client.exec_stream(...)``. A bad request raises
        ``ValueError`` here; the request is sent by the first
        ``__anext__``, which raises what the agent refuses."""
        request = _exec_request(
            command, user, timeout_secs, cwd, env, stdin, max_output_bytes, profile,
            leave_running, max_pids, max_memory_bytes,
        )
        return AsyncExecStream(self._native.exec_stream_unsent(request))

    async def setup_log(self, offset: int = 0, wait: int = 0) -> SetupLog:
        """See :meth:`Client.setup_log`."""
        _log_args(offset, wait)
        return _setup_log(await self._native.setup_log_async(offset, wait))

    async def grade(
        self,
        lab: Lab,
        checks: Optional[Sequence[str]] = None,
        lab_dir: Optional[str] = None,
    ) -> Report:
        """See :meth:`Client.grade`."""
        text = await self._native.grade_async(
            lab, checks=None if checks is None else list(checks), lab_dir=_lab_dir(lab_dir)
        )
        return Report.from_json(text)
