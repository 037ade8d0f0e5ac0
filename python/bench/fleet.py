"""One Python process grading a fleet of VMs: the Python side of
`lab-agent-bench fleet --python PYTHON` (bench/src/fleet.rs), which starts
the agents (and the hostile fakes), writes FLEET.json and runs this script
once per fleet, with the interpreter of a virtualenv the wheel is installed
in. Not meant to be run by hand.

    python fleet.py FLEET.json

Two passes over the same clients, each measured on its own:
- ``grade_all``: ``lab_agent.grade_all(clients, lab, concurrency)``, the
  package's one call for a fleet (the Rust ``grade_all`` under it); it
  returns no per-VM time, so its p50/p99 are not reported.
- ``asyncio``: ``AsyncClient.grade`` per VM under an ``asyncio.Semaphore``
  of ``concurrency``, timed in Python around each call, as a backend
  written by hand would do it (``grade`` also asks ``/v1/ready`` first).

For each pass: wall time, this process's CPU (``RUSAGE_SELF``: every thread,
the package's tokio runtime included), its peak RSS (``VmHWM``, reset
before the pass through ``/proc/self/clear_refs``) and its RSS before the
pass, the agents' CPU over the pass (``/proc/PID/stat``, theirs and their
reaped commands'), each VM's time and verdict (each check's name, status,
exit code, stdout). Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time

import lab_agent

HZ = os.sysconf("SC_CLK_TCK")


def agents_cpu(pids: list) -> float:
    """Seconds of CPU of the agents and their reaped commands."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime: fields 14-17, 12-15 after `(comm)`.
        total += sum(int(v) for v in rest[11:15])
    return total / HZ


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def verdict(o) -> str:
    if isinstance(o, lab_agent.AgentError):
        return f"error: {type(o).__name__}: {o}"
    return "".join(f"{c.name}:{c.status}:{c.exit_code}:{c.stdout!r}|" for c in o.checks)


def summary(o) -> dict:
    if isinstance(o, lab_agent.AgentError):
        return {"graded": False, "error": type(o).__name__}
    return {"graded": True, "passed": o.passed, "failed": o.failed, "errors": o.errors}


def measured(pids: list, run) -> dict:
    # Reset the peak RSS so it is this pass's.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss_before = status_kib("VmRSS")
    agents_before = agents_cpu(pids)
    cpu_before = self_cpu()
    start = time.perf_counter()
    outcomes, times = run()
    wall = time.perf_counter() - start
    cpu = self_cpu() - cpu_before
    agents = agents_cpu(pids) - agents_before
    return {
        "wall": wall,
        "client_cpu": cpu,
        "agents_cpu": agents,
        "hwm_kib": status_kib("VmHWM"),
        "rss_before_kib": rss_before,
        "times": times,
        "verdicts": [verdict(o) for o in outcomes],
        "summaries": [summary(o) for o in outcomes],
    }


async def graded_by_hand(clients: list, lab, concurrency: int):
    slots = asyncio.Semaphore(concurrency)

    async def one(c):
        async with slots:
            start = time.perf_counter()
            try:
                r = await c.grade(lab)
            except lab_agent.AgentError as e:
                r = e
            return r, time.perf_counter() - start

    done = await asyncio.gather(*(one(c) for c in clients))
    return [r for r, _ in done], [t for _, t in done]


def main() -> None:
    with open(sys.argv[1]) as f:
        fleet = json.load(f)
    lab = lab_agent.Lab.load(fleet["lab"])
    concurrency = fleet["concurrency"]
    pids = fleet["agent_pids"]
    vms = fleet["vms"]
    blocking = [lab_agent.Client(v["url"], token_file=v["token_file"]) for v in vms]
    asynchronous = [lab_agent.AsyncClient(v["url"], token_file=v["token_file"]) for v in vms]
    passes = {
        "grade_all": measured(
            pids,
            lambda: (lab_agent.grade_all(blocking, lab, concurrency), []),
        ),
        "asyncio": measured(
            pids,
            lambda: asyncio.run(graded_by_hand(asynchronous, lab, concurrency)),
        ),
    }
    json.dump(passes, sys.stdout)


if __name__ == "__main__":
    main()
