"""Many agents from one event loop; one blocking Client from many threads."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import lab_agent
from conftest import Agent, Agents


def test_async_client_waits_on_50_agents_at_once(agents: Agents) -> None:
    # Each agent's setup takes a second: waiting on them one after another
    # would take 50 s, so finishing in a few proves the waits overlapped.
    started = [agents.start(setup="sleep 1\n", wait_bound=True) for _ in range(50)]
    clients = [lab_agent.AsyncClient(a.url, token=a.token) for a in started]
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> list:
        stop = asyncio.Event()
        t = asyncio.ensure_future(ticker(stop))
        out = await asyncio.gather(*(c.wait_ready(60) for c in clients))
        stop.set()
        await t
        return out

    t0 = time.monotonic()
    results = asyncio.run(main())
    elapsed = time.monotonic() - t0
    assert len(results) == 50 and all(r.is_ready for r in results)
    assert elapsed < 20, elapsed
    # The loop kept running while all 50 waited (it was never blocked).
    assert ticks >= 10, ticks
    outcomes = asyncio.run(lab_agent.wait_all_async(clients, 10))
    assert all(isinstance(o, lab_agent.Ready) and o.is_ready for o in outcomes)


def test_one_blocking_client_from_8_threads(agent: Agent) -> None:
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(10)
    barrier = threading.Barrier(8)

    # profile="system": root's own dotfiles are not what this test is
    # about, and on a developer's machine they can cost a second a shell
    # (`pyenv init` in ~/.bashrc here: 80 execs took 9-27 s, now ~1 s).
    def work(i: int) -> list:
        barrier.wait()
        return [
            c.exec("echo $N-%d" % j, env={"N": str(i)}, profile="system").stdout
            for j in range(10)
        ]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    for i, outs in enumerate(results):
        assert outs == ["%d-%d\n" % (i, j) for j in range(10)]


def test_the_gil_is_released_while_waiting(agent: Agent) -> None:
    # A command that sleeps 1 s; a Python thread counting meanwhile gets to
    # run only if exec let go of the GIL.
    c = lab_agent.Client(agent.url, token=agent.token)
    c.wait_ready(10)
    count = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        before = count
        c.exec("sleep 1")
        during = count - before
    finally:
        stop.set()
        t.join()
    assert during > 10000, during
