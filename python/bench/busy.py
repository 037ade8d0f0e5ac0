"""A burst of execs past the agent's `--max-execs`: what the ones past the
limit cost a backend, for one or more agent builds side by side.

Each agent is started with `--max-execs 8`; each round sends N concurrent
`echo` execs (as nobody, profile none, cwd /) from one `AsyncClient`
(`asyncio.gather`) and times the whole burst, for N = 8, 9 and 40, the
agents and the Ns in a shuffled order each round. An agent that refuses
past the limit (429 + `Retry-After: 1`) costs the client whole seconds of
retries; one that queues briefly costs the wait for a slot. Prints a
Markdown table for BENCHMARKS.md.

    python busy.py --agent LABEL=PATH [--agent LABEL=PATH] [--rounds 10]

Run it with the interpreter of a virtualenv the wheel is installed in (see
BENCHMARKS.md, "Python client").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lab_agent

sys.path.insert(0, str(Path(__file__).parent))
from exec_overhead import start_agent  # noqa: E402

BURSTS = (8, 9, 40)


async def burst(client: lab_agent.AsyncClient, n: int) -> float:
    start = time.perf_counter()
    results = await asyncio.gather(
        *(client.exec("echo x", user="nobody", cwd="/", profile="none") for _ in range(n))
    )
    took = time.perf_counter() - start
    assert all(r.stdout == "x\n" for r in results), results
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", action="append", required=True, metavar="LABEL=PATH")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    agents = [a.split("=", 1) for a in args.agent]
    dirs, procs, clients = [], [], {}
    try:
        for label, path in agents:
            d = Path(tempfile.mkdtemp(prefix="lab-agent-bench-busy-"))
            dirs.append(d)
            proc, url, token = start_agent(path, d, ["--max-execs", "8"])
            procs.append(proc)
            clients[label] = lab_agent.AsyncClient(url, token=token)
        samples: dict = {(label, n): [] for label in clients for n in BURSTS}

        async def run() -> None:
            for label, c in clients.items():  # warm up: connections, shells
                await burst(c, 8)
            for _ in range(args.rounds):
                order = list(samples)
                random.shuffle(order)
                for label, n in order:
                    samples[(label, n)].append(await burst(clients[label], n))

        asyncio.run(run())
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    print("| agent | concurrent execs | rounds | median s | max s | vs 8 (medians) |")
    print("|---|---:|---:|---:|---:|---:|")
    for label in clients:
        base = statistics.median(samples[(label, 8)])
        for n in BURSTS:
            s = samples[(label, n)]
            med = statistics.median(s)
            print(
                f"| {label} | {n} | {len(s)} | {med:.3f} | {max(s):.3f} | "
                f"{med / base:.1f}× |"
            )


if __name__ == "__main__":
    main()
