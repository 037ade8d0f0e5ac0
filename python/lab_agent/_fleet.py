"""Many VMs at once, each on its own (a fleet of students' VMs, not one
lab): :func:`wait_each` hands out each VM's outcome the moment it is known;
:func:`wait_all` and :func:`grade_all` run every client's call on the
native runtime together (grading at most ``concurrency`` at once) and hand
back each VM's answer or its error in order, so one dead or hostile VM
costs only its own entry."""

from __future__ import annotations

from typing import (
    AsyncIterator,
    Generic,
    Hashable,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from . import _native
from ._client import _Base
from ._grade import Report
from ._native import AgentError, Lab
from ._ready import Ready, _ready

K = TypeVar("K", bound=Hashable)


def _outcome(o: Union[str, AgentError]) -> Union[Ready, AgentError]:
    return o if isinstance(o, AgentError) else _ready(o)


def _keyed(
    clients: Union[Mapping[K, _Base], Iterable[_Base]],
) -> Tuple[List[K], List[_native.Client]]:
    """The keys a fleet's outcomes are given under (a mapping's keys, else
    each client's index) and the clients, in one order."""
    if isinstance(clients, Mapping):
        keys: List[K] = list(clients.keys())
        natives = [clients[k]._native for k in keys]
    else:
        natives = [c._native for c in clients]
        keys = list(range(len(natives)))  # type: ignore[arg-type]  # K is int here
    return keys, natives


class WaitEach(Generic[K]):
    """Each VM's outcome as it comes: iterate it (``for``, or ``async
    for`` from :func:`wait_each_async`) for ``(key, Ready | AgentError)``
    pairs, in the order the waits end. ``remaining`` is how many have not.
    Leaving the loop early and dropping it ends the waits still running."""

    def __init__(self, keys: List[K], native: "_native.WaitEach") -> None:
        self._keys = keys
        self._native = native

    @property
    def remaining(self) -> int:
        return self._native.remaining

    def _pair(
        self, n: Optional[Tuple[int, Union[str, AgentError]]]
    ) -> Optional[Tuple[K, Union[Ready, AgentError]]]:
        return None if n is None else (self._keys[n[0]], _outcome(n[1]))

    def __iter__(self) -> Iterator[Tuple[K, Union[Ready, AgentError]]]:
        while True:
            pair = self._pair(self._native.next())
            if pair is None:
                return
            yield pair

    def __aiter__(self) -> AsyncIterator[Tuple[K, Union[Ready, AgentError]]]:
        return self._async_iter()

    async def _async_iter(self) -> AsyncIterator[Tuple[K, Union[Ready, AgentError]]]:
        while True:
            pair = self._pair(await self._native.next_async())
            if pair is None:
                return
            yield pair


@overload
def wait_each(clients: Mapping[K, _Base], timeout: float) -> WaitEach[K]: ...
@overload
def wait_each(clients: Sequence[_Base], timeout: float) -> WaitEach[int]: ...


def wait_each(clients: Union[Mapping[K, _Base], Iterable[_Base]], timeout: float) -> WaitEach[K]:
    """Waits for every client's VM at once, up to ``timeout`` seconds, and
    yields ``(key, outcome)`` as each wait ends: its :class:`Ready` (hand
    that VM to its student now, and record ``Ready.instance.id`` to pin
    to) or the :class:`AgentError` its ``wait_ready`` would have raised
    (:class:`SetupFailed` at once, :class:`WaitTimeout` or
    :class:`Unreachable` at the deadline). ``key`` is the client's key in
    a mapping (``{"alice": client, ...}``), else its index. A VM that is
    ready is never held back by a slower or dead one (:func:`wait_all`
    answers once every VM is done)::

        for student, outcome in lab_agent.wait_each(vms, timeout=150):
            if isinstance(outcome, lab_agent.Ready):
                hand_out(student, outcome.instance.id)

    The waits start now (a bad ``timeout`` is a ``ValueError`` here); each
    step of the loop blocks with the GIL released (Ctrl-C raises
    ``KeyboardInterrupt``)."""
    keys, natives = _keyed(clients)
    return WaitEach(keys, _native.WaitEach(natives, timeout))


@overload
def wait_each_async(clients: Mapping[K, _Base], timeout: float) -> WaitEach[K]: ...
@overload
def wait_each_async(clients: Sequence[_Base], timeout: float) -> WaitEach[int]: ...


def wait_each_async(
    clients: Union[Mapping[K, _Base], Iterable[_Base]], timeout: float
) -> WaitEach[K]:
    """:func:`wait_each` for asyncio: not a coroutine, ``async for key,
    outcome in lab_agent.wait_each_async(...)``; the event loop runs while
    it waits."""
    keys, natives = _keyed(clients)
    return WaitEach(keys, _native.WaitEach(natives, timeout))


def wait_all(clients: Iterable[_Base], timeout: float) -> List[Union[Ready, AgentError]]:
    """Waits for every client's VM (to the end, even when one fails) up to
    ``timeout`` seconds; returns, in order, each one's :class:`Ready` or
    the :class:`AgentError` its ``wait_ready`` would have raised. Each
    :class:`Ready` carries its VM's ``instance`` (record its ``id`` to pin
    to), ``timeline`` and ``root``. To hand each VM out as soon as it is
    ready, use :func:`wait_each`."""
    return [_outcome(o) for o in _native.wait_all([c._native for c in clients], timeout)]


async def wait_all_async(
    clients: Iterable[_Base], timeout: float
) -> List[Union[Ready, AgentError]]:
    """:func:`wait_all` as a coroutine."""
    outcomes = await _native.wait_all_async([c._native for c in clients], timeout)
    return [_outcome(o) for o in outcomes]


def _report_outcome(o: Union[str, AgentError]) -> Union[Report, AgentError]:
    return o if isinstance(o, AgentError) else Report.from_json(o)


def _concurrency(concurrency: int) -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(
            "concurrency must be a whole number of VMs graded at once, at least 1, not %r"
            % (concurrency,)
        )
    return concurrency


def grade_all(
    clients: Iterable[_Base], lab: Lab, concurrency: int = 16
) -> List[Union[Report, AgentError]]:
    """Grades ``lab`` on every client's VM, at most ``concurrency`` at once
    (at least 1, else ``ValueError`` before anything runs), each with
    ``LAB_DIR`` as its agent reports it; returns, in order, each
    one's :class:`Report` or the :class:`AgentError` that stopped it. A
    hostile or dead VM costs only its own calls (each bounded by its
    deadline). A VM that is not ready is not graded: its outcome is
    :class:`NotReady` (or :class:`SetupFailed`) with nothing run; wait for
    them first (:func:`wait_each`, :func:`wait_all`). A pinned client's VM
    of another instance is :class:`InstanceChanged`, nothing run."""
    n = _concurrency(concurrency)
    outcomes = _native.grade_all([c._native for c in clients], lab, n)
    return [_report_outcome(o) for o in outcomes]


async def grade_all_async(
    clients: Iterable[_Base], lab: Lab, concurrency: int = 16
) -> List[Union[Report, AgentError]]:
    """:func:`grade_all` as a coroutine."""
    n = _concurrency(concurrency)
    outcomes = await _native.grade_all_async([c._native for c in clients], lab, n)
    return [_report_outcome(o) for o in outcomes]
