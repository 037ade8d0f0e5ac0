"""A grade (:class:`Report`, one :class:`CheckResult` per check), as
``labctl grade --json`` prints it: the report keeps that exact text, so
what a backend stores is what the CLI would have printed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ._ready import Instance, _maybe


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
