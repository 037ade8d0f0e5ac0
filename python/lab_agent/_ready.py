"""The agent's readiness answer (``/v1/ready``) as Python types: where the
boot is (:class:`Ready`), which life of the VM answered (:class:`Instance`),
where the boot's time went (:class:`Timeline`) and the root disk. Plain
frozen dataclasses built from the wire types' JSON, so an answer can be
kept, compared and shown without the client that fetched it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional


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
class Disk:
    """Whether the VM's root disk was booted before the VM first booted
    (a booted golden, a cloned disk): judged once per instance, with one
    short sentence per finding in ``evidence``. Such a VM still gets an
    instance id of its own."""

    booted_before: bool
    evidence: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Disk":
        return cls(booted_before=d["booted_before"], evidence=list(d.get("evidence", [])))


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
    """The root filesystem: size and free space (``df``'s); bytes written
    to its block device since boot and over the instance's life (None off
    a block device); the lab's ``min_root_bytes`` once its setup ran, and
    whether the root is below it (``on_small_root = "warn"``: ready
    anyway)."""

    size_bytes: int
    free_bytes: int
    written_bytes: Optional[int] = None
    written_bytes_total: Optional[int] = None
    min_bytes: Optional[int] = None
    below_min: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RootDisk":
        return cls(
            size_bytes=d["size_bytes"],
            free_bytes=d["free_bytes"],
            written_bytes=d.get("written_bytes"),
            written_bytes_total=d.get("written_bytes_total"),
            min_bytes=d.get("min_bytes"),
            below_min=d.get("below_min", False),
        )


def _maybe(cls: Any, d: Optional[Mapping[str, Any]]) -> Any:
    return None if d is None else cls.from_dict(d)


@dataclass(frozen=True)
class Ready:
    """The agent's ``/v1/ready`` answer.

    ``state`` is one of ``booting``, ``setting_up``,
    ``waiting_for_cloud_init``, ``ready``, ``failed``. ``reason`` says why
    it is not ready, or, when it is, what it is ready despite (a root
    filesystem under the lab's ``min_root_bytes``).
    """

    state: str
    reason: Optional[str]
    cloud_init: CloudInit
    setup: SetupStatus
    #: Which life of the VM answered; None from an agent that predates it.
    instance: Optional[Instance] = None
    #: Whether its disk was booted before it; None from an older agent.
    disk: Optional[Disk] = None
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
            disk=_maybe(Disk, d.get("disk")),
            timeline=_maybe(Timeline, d.get("timeline")),
            root=_maybe(RootDisk, d.get("root")),
        )


@dataclass(frozen=True)
class Info:
    """The agent's ``/v1/info`` answer: what runs there and where the
    lab's files are (``lab_dir``: the ``LAB_DIR`` checks get; None from an
    older agent), which life of the VM answered, its root disk."""

    version: str
    agent_uptime_secs: float
    os: Optional[str] = None
    kernel: Optional[str] = None
    hostname: Optional[str] = None
    uptime_secs: Optional[float] = None
    boot_id: Optional[str] = None
    lab_dir: Optional[str] = None
    instance: Optional[Instance] = None
    root: Optional[RootDisk] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Info":
        return cls(
            version=d["version"],
            agent_uptime_secs=d["agent_uptime_secs"],
            os=d.get("os"),
            kernel=d.get("kernel"),
            hostname=d.get("hostname"),
            uptime_secs=d.get("uptime_secs"),
            boot_id=d.get("boot_id"),
            lab_dir=d.get("lab_dir"),
            instance=_maybe(Instance, d.get("instance")),
            root=_maybe(RootDisk, d.get("root")),
        )


def _ready(text: str) -> Ready:
    return Ready.from_dict(json.loads(text))


def _info(text: str) -> Info:
    return Info.from_dict(json.loads(text))
