"""Many VMs at once, each on its own (a fleet of students' VMs, not one
lab): :func:`wait_all` and :func:`grade_all` run every client's call on the
native runtime together (grading at most ``concurrency`` at once) and hand
back each VM's answer or its error in order, so one dead or hostile VM
costs only its own entry."""

from __future__ import annotations

from typing import Iterable, List, Union

from . import _native
from ._client import _Base
from ._grade import Report
from ._native import AgentError, Lab
from ._ready import Ready, _ready


def _outcome(o: Union[str, AgentError]) -> Union[Ready, AgentError]:
    return o if isinstance(o, AgentError) else _ready(o)


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
