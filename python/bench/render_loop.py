"""What rendering a Secret costs an asyncio event loop: `render_secret`
called on the loop against `await render_secret_async` (a worker thread),
with a ticker task sleeping 1 ms meanwhile; the loop's largest gap between
two ticks is how long it could not serve. Prints Markdown rows for
BENCHMARKS.md.

    python render_loop.py LAB_DIR STATIC_AGENT [RENDERS]

Run it with the interpreter of a virtualenv the wheel is installed in (see
BENCHMARKS.md, "Python client").
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Awaitable, Callable, List, Tuple

import lab_agent


async def measure(render: Callable[[], Awaitable[None]], n: int) -> Tuple[float, float]:
    gaps: List[float] = []
    stop = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    for _ in range(n):
        await render()
    per_render = (time.perf_counter() - start) / n
    stop = True
    await task
    return per_render, max(gaps)


def main() -> None:
    lab = lab_agent.Lab.load(sys.argv[1])
    agent = sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 20

    async def on_the_loop() -> None:
        lab_agent.render_secret(lab, "vm", agent_path=agent)

    async def off_the_loop() -> None:
        await lab_agent.render_secret_async(lab, "vm", agent_path=agent)

    async def run() -> None:
        print("| call | ms per render | the loop's largest stall, ms |")
        print("|---|---:|---:|")
        for name, render in [
            ("`render_secret(...)` on the loop", on_the_loop),
            ("`await render_secret_async(...)`", off_the_loop),
        ] * 2:
            per, stall = await measure(render, n)
            print(f"| {name} | {per * 1000:.0f} | {stall * 1000:.1f} |")

    asyncio.run(run())


if __name__ == "__main__":
    main()
