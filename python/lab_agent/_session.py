"""A lab of several VMs (``[[vms]]``) waited for and graded as one
(:class:`Session`): the native session fails fast on the first VM that
fails and grades into one report, each check on its VM."""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional

from . import _native
from ._client import _Base
from ._grade import Report
from ._native import Lab
from ._ready import Ready, _ready


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
