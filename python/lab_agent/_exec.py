"""A command's run: the ``/v1/exec`` request a client sends
(:func:`_exec_request`, shared by every exec method so a parameter is
forwarded the same way everywhere), its answer (:class:`ExecResult`), its
streamed output (:class:`ExecStream`, :class:`AsyncExecStream` over the
native stream, chunk by chunk) and the setup log read as it grows
(:class:`SetupLog`)."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, List, Mapping, Optional, Tuple

from . import _native


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
    #: Which life of the VM ran it (``Ready.instance.id``) and in which
    #: boot (``Instance.boot_id``); None from agents that predate them.
    instance_id: Optional[str] = None
    boot_id: Optional[str] = None

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
