"""A wrong token is Unauthorized from every call, blocking and asyncio."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import lab_agent
from conftest import Agent, REPO


def test_every_call_raises_unauthorized(agent: Agent) -> None:
    wrong = "wrong-token-" + "z" * 40
    lab = lab_agent.Lab.load(REPO / "examples/hello-lab")
    c = lab_agent.Client(agent.url, token=wrong)
    calls = {
        "ready": lambda: c.ready(),
        "wait_ready": lambda: c.wait_ready(10),
        "exec": lambda: c.exec("true"),
        "grade": lambda: c.grade(lab),
    }
    for name, call in calls.items():
        with pytest.raises(lab_agent.Unauthorized) as info:
            call()
        assert info.value.status == 401, name
        assert info.value.code == "unauthorized", name
    ac = lab_agent.AsyncClient(agent.url, token=wrong)

    async def all_async() -> list:
        return await asyncio.gather(
            ac.ready(), ac.wait_ready(10), ac.exec("true"), ac.grade(lab),
            return_exceptions=True,
        )

    for e in asyncio.run(all_async()):
        assert isinstance(e, lab_agent.Unauthorized), e
    [out] = lab_agent.wait_all([c], 10)
    assert isinstance(out, lab_agent.Unauthorized)
    [aout] = asyncio.run(lab_agent.wait_all_async([ac], 10))
    assert isinstance(aout, lab_agent.Unauthorized)
    # The right token, from its file, works: the 401s were the token's.
    ok = lab_agent.Client(agent.url, token_file=str(Path(agent.token_file)))
    assert ok.wait_ready(10).is_ready
