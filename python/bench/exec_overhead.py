"""Per-call overhead of lab_agent (Python) over the Rust client, for one
exec round trip of `true` (as nobody), side by side in one run against one agent.

Each round runs a batch with the Rust client itself (timed in Rust, through
lab_agent._native._rust_exec_timings: same runtime and connection pool), a
batch with the blocking Client and one with AsyncClient (timed in Python,
around the call as a backend sees it), in a shuffled order. Prints a
Markdown table for BENCHMARKS.md.

    python exec_overhead.py --agent target/release/lab-agent [--rounds 40 --batch 25]

Run it with the interpreter of a virtualenv the wheel is installed in (see
BENCHMARKS.md, "Python client").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import lab_agent
from lab_agent import _native


def start_agent(binary: str, d: Path, extra: tuple = ()) -> tuple:
    token = secrets.token_urlsafe(32)
    fd = os.open(d / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, token.encode())
    os.close(fd)
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--addr-file", str(d / "addr"),
         "--token-file", str(d / "token"), "--state-dir", str(d / "state"),
         "--no-cloud-init", *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if (d / "addr").exists() and (d / "addr").read_text().strip():
            return proc, "http://" + (d / "addr").read_text().strip(), token
        time.sleep(0.01)
    proc.kill()
    raise SystemExit("the agent wrote no address")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--command", default="true")
    # Not root: root's login profile on a developer machine may run anything
    # (pyenv's rehash, say); nobody's is the system's alone.
    ap.add_argument("--user", default="nobody")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="lab-agent-bench-py-"))
    proc, url, token = start_agent(args.agent, d)
    try:
        client = lab_agent.Client(url, token=token)
        aclient = lab_agent.AsyncClient(url, token=token)
        # No setup: the agent reports `failed` (setup never ran), and exec
        # works all the same; root's login shell stays out of the run.
        client.ready()
        loop = asyncio.new_event_loop()
        samples: dict = {"rust": [], "python": [], "asyncio": []}

        def rust() -> None:
            samples["rust"] += _native._rust_exec_timings(
                client._native, args.command, args.user, "/", args.batch
            )

        def blocking() -> None:
            for _ in range(args.batch):
                t = time.perf_counter()
                client.exec(args.command, user=args.user, cwd="/")
                samples["python"].append(time.perf_counter() - t)

        async def in_loop() -> None:
            for _ in range(args.batch):
                t = time.perf_counter()
                await aclient.exec(args.command, user=args.user, cwd="/")
                samples["asyncio"].append(time.perf_counter() - t)

        variants = [rust, blocking, lambda: loop.run_until_complete(in_loop())]
        for v in variants:  # warm-up: connections, caches
            v()
        for k in samples:
            samples[k].clear()
        rng = random.Random(7)
        for _ in range(args.rounds):
            rng.shuffle(variants)
            for v in variants:
                v()
        loop.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)

    def q(xs: list, p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1000

    base = statistics.median(samples["rust"]) * 1000
    print("| client | n | median ms | p90 ms | overhead vs Rust (medians) |")
    print("|---|---:|---:|---:|---:|")
    names = {"rust": "Rust `lab_agent_client::Client::exec`",
             "python": "Python `lab_agent.Client.exec` (blocking)",
             "asyncio": "Python `await lab_agent.AsyncClient.exec`"}
    for k, name in names.items():
        med = statistics.median(samples[k]) * 1000
        over = "–" if k == "rust" else "+%.3f ms (%.1f%%)" % (med - base, (med / base - 1) * 100)
        print("| %s | %d | %.3f | %.3f | %s |" % (name, len(samples[k]), med, q(samples[k], 0.9), over))


if __name__ == "__main__":
    main()
