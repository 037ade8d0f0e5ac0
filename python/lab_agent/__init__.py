"""lab_agent: the lab-agent client for Python backends.

One implementation, two languages: every call runs the Rust
``lab-agent-client`` (and, for :func:`render_secret`, what ``labctl secret``
runs) inside this package's native module, on one tokio runtime per
process. This file only gives the answers Python types.

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
- :func:`wait_all` / :func:`wait_all_async` wait for a session's VMs;
- :func:`grade_all` / :func:`grade_all_async` grade many VMs with a
  concurrency bound;
- :func:`render_secret` makes a lab's Kubernetes Secret, byte-identical to
  ``labctl secret``;
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
  ``Ready.instance.id`` recorded when the VM was handed out): an answer of
  another instance raises :class:`InstanceChanged` (the VM was reset, the
  student's work inside it is gone), one naming none (an older agent)
  :class:`InstanceUnknown`;
- ``grade`` and :func:`grade_all` keep the grading rule themselves: a VM
  that is not ready raises :class:`NotReady` (:class:`SetupFailed` when its
  setup failed) with nothing run;
- the blocking :class:`Client` (and an :class:`ExecStream` waiting for
  its next chunk) raises ``KeyboardInterrupt`` on Ctrl-C within 50 ms; a cancelled :class:`AsyncClient` call closes its
  connection; at interpreter exit, calls still running are ended before
  the interpreter finalises (no crash, whatever the agents did).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
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

__version__: str = _native.__version__

#: Seconds a client awaits an answer beyond what the request asks the
#: agent to spend (the Rust client's ``DEFAULT_REQUEST_TIMEOUT``); the
#: default of ``request_timeout``.
DEFAULT_REQUEST_TIMEOUT: float = _native.DEFAULT_REQUEST_TIMEOUT

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
    "ExecResult",
    "ExecStream",
    "Instance",
    "InstanceChanged",
    "InstanceUnknown",
    "Lab",
    "LabError",
    "MalformedAnswer",
    "NotReady",
    "ProtocolError",
    "Ready",
    "Rejected",
    "RenderError",
    "Rendered",
    "Report",
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
    "WaitTimeout",
    "grade_all",
    "grade_all_async",
    "render_secret",
    "wait_all",
    "wait_all_async",
]


@dataclass(frozen=True)
class CloudInit:
    """cloud-init's part of readiness: done this boot, the errors it
    recorded, and (cloud-init 23.4 and later) what it kept as recoverable:
    a "degraded" boot. Neither holds readiness back."""

    done: bool
    errors: List[str]
    warnings: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class SetupStatus:
    """The lab's setup script: pending, running, succeeded or failed."""

    state: str
    exit_code: Optional[int] = None
    duration_ms: Optional[int] = None
    log_tail: Optional[str] = None


@dataclass(frozen=True)
class Instance:
    """Which life of the VM answered: ``id`` is made once per root disk
    (a reboot keeps it and counts in ``boots``; a VM reset onto a fresh
    disk gets a new one, and the student's work inside is gone)."""

    id: str
    boots: int
    boot_id: str
    first_boot_at: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Instance":
        return cls(
            id=d["id"], boots=d["boots"], boot_id=d["boot_id"], first_boot_at=d["first_boot_at"]
        )


@dataclass(frozen=True)
class Span:
    """When a phase started and finished, in seconds since the kernel
    booted; each None until it happened."""

    start_secs: Optional[float] = None
    finished_secs: Optional[float] = None

    @property
    def duration_secs(self) -> Optional[float]:
        if self.start_secs is None or self.finished_secs is None:
            return None
        return self.finished_secs - self.start_secs

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Span":
        return cls(start_secs=d.get("start_secs"), finished_secs=d.get("finished_secs"))


#: cloud-init's stages in the order they run, as its ``status.json`` names them.
CLOUD_INIT_STAGES = ("init-local", "init", "modules-config", "modules-final")


@dataclass(frozen=True)
class Timeline:
    """Where the time of this boot went, in seconds since the kernel booted
    (``boot_at`` is when that was, UTC); what has not happened is None.
    ``cloud_init`` maps each stage that started (``CLOUD_INIT_STAGES``
    order) to its :class:`Span`."""

    boot_at: Optional[str] = None
    agent_started_secs: Optional[float] = None
    cloud_init: Dict[str, Span] = field(default_factory=dict)
    setup: Optional[Span] = None
    ready_secs: Optional[float] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Timeline":
        stages = d.get("cloud_init") or {}
        ordered = [n for n in CLOUD_INIT_STAGES if n in stages]
        ordered += sorted(n for n in stages if n not in CLOUD_INIT_STAGES)
        setup = d.get("setup")
        return cls(
            boot_at=d.get("boot_at"),
            agent_started_secs=d.get("agent_started_secs"),
            cloud_init={n: Span.from_dict(stages[n]) for n in ordered},
            setup=None if setup is None else Span.from_dict(setup),
            ready_secs=d.get("ready_secs"),
        )


@dataclass(frozen=True)
class RootDisk:
    """The root filesystem: size and free space (``df``'s), and bytes
    written to its block device since boot (None off a block device)."""

    size_bytes: int
    free_bytes: int
    written_bytes: Optional[int] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RootDisk":
        return cls(
            size_bytes=d["size_bytes"],
            free_bytes=d["free_bytes"],
            written_bytes=d.get("written_bytes"),
        )


def _maybe(cls: Any, d: Optional[Mapping[str, Any]]) -> Any:
    return None if d is None else cls.from_dict(d)


@dataclass(frozen=True)
class Ready:
    """The agent's ``/v1/ready`` answer.

    ``state`` is one of ``booting``, ``setting_up``,
    ``waiting_for_cloud_init``, ``ready``, ``failed``.
    """

    state: str
    reason: Optional[str]
    cloud_init: CloudInit
    setup: SetupStatus
    #: Which life of the VM answered; None from an agent that predates it.
    instance: Optional[Instance] = None
    #: Where the time of this boot went; None from an older agent.
    timeline: Optional[Timeline] = None
    #: The root filesystem; None from an older agent.
    root: Optional[RootDisk] = None

    @property
    def is_ready(self) -> bool:
        return self.state == "ready"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Ready":
        ci = d.get("cloud_init", {})
        s = d.get("setup", {})
        return cls(
            state=d["state"],
            reason=d.get("reason"),
            cloud_init=CloudInit(
                done=ci.get("done", False),
                errors=list(ci.get("errors", [])),
                warnings=list(ci.get("warnings", [])),
            ),
            setup=SetupStatus(
                state=s.get("state", "pending"),
                exit_code=s.get("exit_code"),
                duration_ms=s.get("duration_ms"),
                log_tail=s.get("log_tail"),
            ),
            instance=_maybe(Instance, d.get("instance")),
            timeline=_maybe(Timeline, d.get("timeline")),
            root=_maybe(RootDisk, d.get("root")),
        )


@dataclass(frozen=True)
class ExecResult:
    """What ``/v1/exec`` returned: a command that ran (whatever its exit)."""

    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    duration_ms: int
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    #: The limits the command ran into: ``"pids"`` (a fork refused at its
    #: process limit), ``"memory"`` (the OOM killer ran in its cgroup);
    #: empty when none (and from agents that predate it).
    limits_hit: List[str] = field(default_factory=list)
    #: The values of the limits it hit, where the agent sent them.
    max_pids: Optional[int] = None
    max_memory_bytes: Optional[int] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecResult":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class StreamChunk:
    """A piece of a streamed command's output, as it came: ``stream`` is
    ``"stdout"`` or ``"stderr"``, ``text`` its UTF-8 (lossy; a character is
    never split between two chunks). As the guest wrote it: escape it
    before showing it to a person."""

    stream: str
    text: str


class _Stream:
    """What :class:`ExecStream` and :class:`AsyncExecStream` share: the
    events of the native stream turned into chunks and a result."""

    def __init__(self, native: "_native.ExecStream") -> None:
        self._native = native
        self._queue: Deque[StreamChunk] = deque()
        self._result: Optional[ExecResult] = None
        self._over = False
        #: The command's :class:`ExecResult`, once the stream was read to
        #: its end (None before, and when it was closed or failed first).
        #: Its ``stdout``/``stderr`` are empty: every byte of output was
        #: yielded as a chunk (also what the agent put in the result); the
        #: ``*_truncated`` flags say what was cut at ``max_output_bytes``.
        self.result: Optional[ExecResult] = None

    def _take(self, ev: Optional[Tuple[str, str]]) -> None:
        if ev is None:
            # The native stream ends only after its result (else it raised).
            self._over = True
            self.result = self._result
            return
        kind, text = ev
        if kind == "result":
            d = json.loads(text)
            # What the agent did not stream (or all of it, from something
            # between that answered the plain way) comes as chunks too.
            for name in ("stdout", "stderr"):
                if d.get(name):
                    self._queue.append(StreamChunk(name, d[name]))
                d[name] = ""
            self._result = ExecResult.from_dict(d)
        elif text:
            self._queue.append(StreamChunk(kind, text))

    def _failed(self) -> None:
        # The native stream ends itself on an error; a cancelled read ends
        # it on the runtime a moment later: close it now, so `closed` holds
        # as the exception is seen.
        self._native.close()
        self._over = True
        self._queue.clear()
        self._result = None

    @property
    def closed(self) -> bool:
        """Whether the request is over (read to its end, failed or closed)."""
        return self._native.closed

    def close(self) -> None:
        """Ends the stream now: the request's connection closes and the
        agent kills the command if it still runs. What was not read is
        lost; ``result`` stays None unless the end was read. Idempotent."""
        self._native.close()
        self._over = True
        self._queue.clear()


class ExecStream(_Stream):
    """A streamed exec (:meth:`Client.exec_stream`): iterate it for the
    :class:`StreamChunk` s as the command writes them; then ``result`` is
    its :class:`ExecResult`. Each wait for the next chunk releases the GIL,
    is bounded by the call's deadline (``timeout_secs`` +
    ``request_timeout``) and the bytes the request allows, and Ctrl-C
    raises ``KeyboardInterrupt`` (ending the stream). An error ends the
    stream; a stream that breaks before the result raises
    :class:`Unreachable` (never a quiet end).

    Leaving the loop early (``break``) and dropping the stream ends the
    request and the agent kills the command; ``with`` (or :meth:`close`)
    ends it deterministically::

        with client.exec_stream("make -j4") as s:
            for chunk in s:
                print(chunk.text, end="")
        print(s.result.exit_code)
    """

    def __iter__(self) -> "ExecStream":
        return self

    def __next__(self) -> StreamChunk:
        while not self._queue:
            if self._over:
                raise StopIteration
            try:
                ev = self._native.next()
            except BaseException:
                self._failed()
                raise
            self._take(ev)
        return self._queue.popleft()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncExecStream(_Stream):
    """:class:`ExecStream` for asyncio (:meth:`AsyncClient.exec_stream`):
    ``async for chunk in stream``. The request is sent by the first
    ``__anext__`` (whose errors are then the call's: :class:`Rejected`,
    :class:`Busy`, ...). A cancelled ``__anext__`` ends the stream, as
    leaving the loop and dropping it, or ``async with`` / :meth:`aclose`,
    do."""

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> StreamChunk:
        while not self._queue:
            if self._over:
                raise StopAsyncIteration
            try:
                ev = await self._native.next_async()
            except BaseException:
                self._failed()
                raise
            self._take(ev)
        return self._queue.popleft()

    async def aclose(self) -> None:
        """:meth:`close`, as ``contextlib.aclosing`` expects it."""
        self.close()

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


@dataclass(frozen=True)
class SetupLog:
    """One read of the setup log (``GET /v1/setup/log``): ``data`` are its
    bytes from the offset asked for, as the setup wrote them (escape before
    showing them); ``next_offset`` is where the next read starts; ``state``
    the setup's (``pending``, ``running``, ``succeeded``, ``failed``);
    ``restarted`` says the log was shorter than the offset (a new setup
    run): ``data`` then starts at 0."""

    data: bytes
    next_offset: int
    state: str
    restarted: bool = False

    @property
    def text(self) -> str:
        """``data`` decoded (lossy UTF-8; a character cut at the read's end
        shows as U+FFFD: use ``codecs.getincrementaldecoder`` to follow a
        log across reads)."""
        return self.data.decode("utf-8", "replace")

    @property
    def running(self) -> bool:
        """Whether the setup may still write (pending or running)."""
        return self.state in ("pending", "running")


def _setup_log(t: Tuple[bytes, int, str, bool]) -> SetupLog:
    return SetupLog(data=t[0], next_offset=t[1], state=t[2], restarted=t[3])


@dataclass(frozen=True)
class CheckResult:
    """One check of a :class:`Report`: ``status`` is passed, failed or error."""

    name: str
    status: str
    passed: bool
    points: int
    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int
    fail_message: Optional[str] = None
    error: Optional[str] = None
    hint: Optional[str] = None
    #: As :attr:`ExecResult.limits_hit`: a check that hit a limit keeps
    #: ``status == "failed"`` (its exit code decides), and says which.
    limits_hit: List[str] = field(default_factory=list)
    max_pids: Optional[int] = None
    max_memory_bytes: Optional[int] = None
    #: The VM it ran on, in a lab of several VMs (``[[vms]]``); else None.
    vm: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CheckResult":
        values = {k: d.get(k) for k in cls.__dataclass_fields__}
        values["limits_hit"] = list(d.get("limits_hit") or [])
        return cls(**values)


@dataclass(frozen=True)
class Report:
    """A grade, as ``labctl grade --json`` prints it (``docs/lab-toml.md`` documents its JSON).

    ``to_json()`` is that exact text; ``to_dict()`` is it parsed.
    A check with ``status == "error"`` could not run: the lab's fault, not
    the student's (see :attr:`has_errors`).
    """

    lab: str
    passed: int
    failed: int
    errors: int
    total: int
    score: int
    max_score: int
    checks: List[CheckResult]
    #: The life of the VM graded (the instance that answered ready); None
    #: from an agent that predates instance identity.
    instance: Optional[Instance]
    _json: str = field(repr=False, compare=False)
    #: A session's report (:class:`Session`): the life of each VM graded,
    #: by name (``instance`` is then None); empty for one VM.
    instances: Dict[str, Instance] = field(default_factory=dict)

    @property
    def all_passed(self) -> bool:
        return self.passed == self.total

    @property
    def has_errors(self) -> bool:
        return self.errors > 0

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(self._json)

    def to_json(self) -> str:
        return self._json

    @classmethod
    def from_json(cls, text: str) -> "Report":
        d = json.loads(text)
        return cls(
            lab=d["lab"],
            passed=d["passed"],
            failed=d["failed"],
            errors=d["errors"],
            total=d["total"],
            score=d["score"],
            max_score=d["max_score"],
            checks=[CheckResult.from_dict(c) for c in d["checks"]],
            instance=_maybe(Instance, d.get("instance")),
            _json=text,
            instances={
                vm: Instance.from_dict(i) for vm, i in (d.get("instances") or {}).items()
            },
        )


@dataclass(frozen=True)
class Rendered:
    """A lab's payload: ``text`` is the Secret manifest ``labctl secret``
    prints; ``user_data`` what it carries; ``token`` the agent's token;
    ``budget`` the byte budget (``labctl secret --json``'s ``budget``)."""

    text: str
    user_data: str
    token: str
    token_generated: bool
    agent_path: str
    budget: Dict[str, Any]
    arch: str = "amd64"
    #: The VM of a lab with ``[[vms]]`` this payload is for; else None.
    vm: Optional[str] = None


def _ready(text: str) -> Ready:
    return Ready.from_dict(json.loads(text))


def _exec_result(text: str) -> ExecResult:
    return ExecResult.from_dict(json.loads(text))


def _exec_request(
    command: str,
    user: Optional[str],
    timeout_secs: Optional[int],
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    stdin: Optional[str],
    max_output_bytes: Optional[int],
    profile: Optional[str],
    leave_running: bool = False,
    max_pids: Optional[int] = None,
    max_memory_bytes: Optional[int] = None,
) -> str:
    """The ``/v1/exec`` request as JSON; what is None is left to the wire
    type's defaults (user root, 60 s, 1 MiB per stream)."""
    if profile is not None and not _native.EXEC_HAS_PROFILE:
        raise ValueError(
            "exec(profile=%r): this build of lab_agent has no `profile` in its exec request "
            "(the agent it was built with lacks it); leave profile=None" % (profile,)
        )
    fields = {
        "command": command,
        "user": user,
        "timeout_secs": timeout_secs,
        "cwd": cwd,
        "env": None if env is None else dict(env),
        "stdin": stdin,
        "max_output_bytes": max_output_bytes,
        "profile": profile,
        # Only when asked for: an agent that predates them refuses unknown
        # fields, and the defaults need no field.
        "leave_running": True if leave_running else None,
        "max_pids": max_pids,
        "max_memory_bytes": max_memory_bytes,
    }
    return json.dumps({k: v for k, v in fields.items() if v is not None})


def _outcome(o: Union[str, AgentError]) -> Union[Ready, AgentError]:
    return o if isinstance(o, AgentError) else _ready(o)


class _Base:
    _native: _native.Client

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        instance: Optional[str] = None,
    ) -> None:
        """A client for the agent at ``url`` (``http://HOST:8899``), with its
        token given, or read from ``token_file``: exactly one of the two.

        ``request_timeout`` is how many seconds an answer is awaited beyond
        what the request asks the agent to spend (an exec's
        ``timeout_secs``, a readiness long-poll): an agent that never
        answers costs a call that much, then :class:`Timeout`. Above 0, at
        most a day; a bad value is a ``ValueError``.

        ``instance`` pins the client to one life of the VM: the
        ``Ready.instance.id`` recorded when the VM was handed to the
        student. Any answer (ready, exec, grade) of another instance then
        raises :class:`InstanceChanged` (the VM was reset; ``grade`` runs
        nothing), one naming no instance :class:`InstanceUnknown`. Not 32
        lowercase hex digits: ``ValueError``."""
        self._native = _native.Client(
            url,
            token=token,
            token_file=token_file,
            request_timeout=request_timeout,
            instance=instance,
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
        ``running`` is false and ``data`` is empty."""
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
        reports, else ``/opt/lab``)."""
        return Report.from_json(
            self._native.grade(lab, checks=None if checks is None else list(checks), lab_dir=lab_dir)
        )


class AsyncClient(_Base):
    """:class:`Client` for asyncio: every method is a coroutine, run on the
    package's tokio runtime while the event loop goes on."""

    async def ready(self) -> Ready:
        return _ready(await self._native.ready_async())

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
        return _setup_log(await self._native.setup_log_async(offset, wait))

    async def grade(
        self,
        lab: Lab,
        checks: Optional[Sequence[str]] = None,
        lab_dir: Optional[str] = None,
    ) -> Report:
        """See :meth:`Client.grade`."""
        text = await self._native.grade_async(
            lab, checks=None if checks is None else list(checks), lab_dir=lab_dir
        )
        return Report.from_json(text)


def wait_all(clients: Iterable[_Base], timeout: float) -> List[Union[Ready, AgentError]]:
    """Waits for every client's VM (to the end, even when one fails) up to
    ``timeout`` seconds; returns, in order, each one's :class:`Ready` or
    the :class:`AgentError` its ``wait_ready`` would have raised. Each
    :class:`Ready` carries its VM's ``instance`` (record its ``id`` to pin
    to), ``timeline`` and ``root``."""
    return [_outcome(o) for o in _native.wait_all([c._native for c in clients], timeout)]


async def wait_all_async(
    clients: Iterable[_Base], timeout: float
) -> List[Union[Ready, AgentError]]:
    """:func:`wait_all` as a coroutine."""
    outcomes = await _native.wait_all_async([c._native for c in clients], timeout)
    return [_outcome(o) for o in outcomes]


def _report_outcome(o: Union[str, AgentError]) -> Union[Report, AgentError]:
    return o if isinstance(o, AgentError) else Report.from_json(o)


def grade_all(
    clients: Iterable[_Base], lab: Lab, concurrency: int = 16
) -> List[Union[Report, AgentError]]:
    """Grades ``lab`` on every client's VM, at most ``concurrency`` at once,
    each with ``LAB_DIR`` as its agent reports it; returns, in order, each
    one's :class:`Report` or the :class:`AgentError` that stopped it. A
    hostile or dead VM costs only its own calls (each bounded by its
    deadline). A VM that is not ready is not graded: its outcome is
    :class:`NotReady` (or :class:`SetupFailed`) with nothing run; wait for
    them first (:func:`wait_all`). A pinned client's VM of another instance
    is :class:`InstanceChanged`."""
    outcomes = _native.grade_all([c._native for c in clients], lab, concurrency)
    return [_report_outcome(o) for o in outcomes]


async def grade_all_async(
    clients: Iterable[_Base], lab: Lab, concurrency: int = 16
) -> List[Union[Report, AgentError]]:
    """:func:`grade_all` as a coroutine."""
    outcomes = await _native.grade_all_async([c._native for c in clients], lab, concurrency)
    return [_report_outcome(o) for o in outcomes]


class Session:
    """The VMs of one lab of several (``[[vms]]`` in ``lab.toml``), by name,
    waited for and graded as one: ``Session({"server": c1, "client": c2})``
    with a :class:`Client` or :class:`AsyncClient` per VM.

    A VM's failure is raised as that VM's own :class:`AgentError` subclass
    (:class:`SetupFailed`, :class:`NotReady`, :class:`Unauthorized`, ...)
    with its name in ``vm`` and at the start of the message. Names that are
    not the lab's raise ``ValueError``.
    """

    def __init__(self, vms: Mapping[str, _Base]) -> None:
        self._names = list(vms)
        self._clients = [c._native for c in vms.values()]

    @property
    def vms(self) -> List[str]:
        return list(self._names)

    def __repr__(self) -> str:
        return "Session(%r)" % (self._names,)

    def wait_ready(self, timeout: float) -> Dict[str, Ready]:
        """Waits up to ``timeout`` seconds for every VM at once; fails fast:
        the first VM whose wait fails raises at once (the others are not
        waited for further). Returns each VM's :class:`Ready` by name."""
        return {
            n: _ready(r)
            for n, r in _native.session_wait_ready(self._names, self._clients, timeout)
        }

    async def wait_ready_async(self, timeout: float) -> Dict[str, Ready]:
        """:meth:`wait_ready` as a coroutine."""
        ready = await _native.session_wait_ready_async(self._names, self._clients, timeout)
        return {n: _ready(r) for n, r in ready}

    def grade(
        self,
        lab: Lab,
        checks: Optional[Iterable[str]] = None,
        lab_dir: Optional[str] = None,
    ) -> Report:
        """Grades ``lab`` on the session: every VM must be ready (else
        :class:`NotReady` or :class:`SetupFailed` naming it, nothing run
        anywhere); each check runs on its ``vm``; one :class:`Report`
        whose checks carry their ``vm`` and whose ``instances`` name each
        VM's life, the score over the whole session."""
        text = _native.session_grade_json(
            self._names, self._clients, lab,
            checks=None if checks is None else list(checks), lab_dir=lab_dir,
        )
        return Report.from_json(text)

    async def grade_async(
        self,
        lab: Lab,
        checks: Optional[Iterable[str]] = None,
        lab_dir: Optional[str] = None,
    ) -> Report:
        """:meth:`grade` as a coroutine."""
        text = await _native.session_grade_json_async(
            self._names, self._clients, lab,
            checks=None if checks is None else list(checks), lab_dir=lab_dir,
        )
        return Report.from_json(text)


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
) -> Rendered:
    """Renders ``lab``'s payload into a Kubernetes Secret, exactly as
    ``labctl secret LAB --name NAME [--namespace NS] [--label K=V]...
    [--agent PATH] [--token-file F] --format FORMAT [--arch ARCH]`` prints it.

    ``arch`` is the lab VM's architecture, ``"amd64"`` or ``"arm64"`` (the
    node's ``kubernetes.io/arch``; default: ``agent_path``'s, else amd64):
    it picks the agent and the serial console. ``agent_path`` is the static
    ``lab-agent`` (default: where ``labctl`` looks for that architecture's);
    ``token`` is generated when not given (``.token`` has it).

    In a lab of several VMs (``[[vms]]``), ``vm`` names the one this
    payload is for (required there; refused for a lab of one VM): its
    setup, its own token, and ``LAB_VM``/``LAB_VMS`` for its setup and
    checks. ``params`` become ``LAB_PARAM_<KEY>`` for them (keys: letters,
    digits, ``_``; values any text), as ``--vm NAME --param KEY=VALUE``.
    Either wrong is a ``ValueError``.
    Raises :class:`RenderError` (agent, names, token, over 1 MiB) or
    :class:`LabError`."""
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
    )
