"""Where many VMs' preparation time went, request to ready: the
distribution (count, min, median, p90, max) of each phase over the
``/v1/ready`` answers a backend logged, what ``labctl timeline`` prints.

The figures are the Rust client's (``labctl timeline``'s own code, in the
native module), so :func:`timeline_distribution` and ``labctl timeline
--json`` agree on the same answers to the last digit.

An answer may carry the backend's own stamps from before the guest could
say anything, as a ``backend`` object of RFC 3339 times::

    {"state": "ready", ..., "timeline": {...},
     "backend": {"vm_created_at": "2026-12-03T10:00:00Z",
                 "vmi_scheduled_at": "2026-12-03T10:00:02Z",
                 "vmi_running_at": "2026-12-03T10:00:12Z"}}

(the VM's ``metadata.creationTimestamp`` and the VMI's
``status.phaseTransitionTimestamps`` for ``Scheduled`` and ``Running``); the
report then starts at the request (phases ``scheduled``, ``running``,
``kernel_boot``, and the total ``request_to_ready``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import _native
from ._ready import Ready

#: One answer as :func:`timeline_distribution` takes it: a :class:`Ready`,
#: the answer's JSON object (a dict, with a ``backend`` key when the
#: backend has stamps), or its JSON text.
Answer = Union[Ready, Mapping[str, Any], str, bytes]


@dataclass(frozen=True)
class PhaseStats:
    """One phase over many VMs, in seconds; the figures are None when no
    VM has the phase (``count`` 0)."""

    #: ``scheduled``, ``running``, ``kernel_boot``, ``agent_started``,
    #: cloud-init's stages (``init-local``, ``init``, ``modules-config``,
    #: ``modules-final``), ``setup``, ``ready`` (kernel to ready),
    #: ``request_to_ready`` (VM created to ready).
    phase: str
    count: int
    min_secs: Optional[float]
    median_secs: Optional[float]
    p90_secs: Optional[float]
    max_secs: Optional[float]


@dataclass(frozen=True)
class Distribution:
    """Every phase, in the order a VM goes through them (the totals last).
    ``malformed_stamps`` names the backend stamps that were not RFC 3339
    times (left out of every phase), as ``(document, stamp)``."""

    answers: int
    timelines: int
    without_timeline: int
    phases: List[PhaseStats]
    malformed_stamps: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
    #: The answers as the native module read them (for :meth:`to_svg`).
    _text: str = dataclasses.field(default="", repr=False, compare=False)

    def phase(self, name: str) -> PhaseStats:
        """The phase named ``name`` (KeyError if there is none)."""
        for p in self.phases:
            if p.phase == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> Dict[str, Any]:
        """The object ``labctl timeline --json`` prints."""
        return {
            "answers": self.answers,
            "timelines": self.timelines,
            "without_timeline": self.without_timeline,
            "phases": [dataclasses.asdict(p) for p in self.phases],
        }

    def to_svg(self) -> str:
        """The picture ``labctl timeline --svg`` draws."""
        return _native.timeline_svg(self._text)


def _as_json(answer: Answer) -> str:
    if isinstance(answer, (bytes, bytearray)):
        return answer.decode("utf-8")
    if isinstance(answer, str):
        return answer
    if isinstance(answer, Ready):
        return json.dumps(dataclasses.asdict(answer))
    return json.dumps(dict(answer))


def timeline_distribution(answers: Union[str, bytes, Iterable[Answer]]) -> Distribution:
    """The distribution of each phase over ``answers``: the text of a log
    (JSON documents, one per line or pretty-printed: answers, ``labctl
    wait --json`` outputs, arrays of either), or an iterable of answers
    (:data:`Answer`). An answer without a timeline (an older agent, a VM
    that never answered) is counted in ``without_timeline``.

    Raises ValueError naming the document when the text is not JSON or a
    document is no answer.
    """
    if isinstance(answers, (bytes, bytearray)):
        text = answers.decode("utf-8")
    elif isinstance(answers, str):
        text = answers
    else:
        text = "\n".join(_as_json(a) for a in answers)
    raw, malformed = _native.timeline_distribution_json(text)
    d = json.loads(raw)
    return Distribution(
        answers=d["answers"],
        timelines=d["timelines"],
        without_timeline=d["without_timeline"],
        phases=[PhaseStats(**p) for p in d["phases"]],
        malformed_stamps=[(doc, stamp) for doc, stamp in malformed],
        _text=text,
    )
