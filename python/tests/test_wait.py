"""wait_ready: a late agent, a failing setup, a wrong token."""

from __future__ import annotations

import asyncio
import threading

import pytest

import lab_agent
from conftest import Agents, ReservedPort


def test_waits_for_an_agent_that_starts_late(agents: Agents, reserved_port: ReservedPort) -> None:
    token = "late-agent-token-" + "x" * 32
    client = lab_agent.Client("http://" + reserved_port.addr, token=token)
    # Nothing listens yet: one request is "unreachable", not "not ready".
    with pytest.raises(lab_agent.Unreachable):
        client.ready()
    result: dict = {}

    def wait() -> None:
        try:
            result["ready"] = client.wait_ready(30)
        except BaseException as e:  # reported below
            result["error"] = e

    waiter = threading.Thread(target=wait)
    waiter.start()
    # The waiter's first attempts are refused (it is waiting, not failed)...
    waiter.join(0.5)
    assert waiter.is_alive(), result
    # ...then the agent starts on the reserved port, with a setup to wait for.
    agents.start(setup="sleep 0.5\n", listen=reserved_port.addr, token=token)
    waiter.join(30)
    assert not waiter.is_alive()
    assert "error" not in result, result
    ready = result["ready"]
    assert isinstance(ready, lab_agent.Ready)
    assert ready.state == "ready" and ready.is_ready
    assert ready.setup.state == "succeeded" and ready.setup.exit_code == 0
    assert ready.cloud_init.done


def test_a_failing_setup_raises_setup_failed_with_exit_code_and_log(agents: Agents) -> None:
    agent = agents.start(setup="echo 'step 3 of 3: broken on purpose' >&2\nexit 7\n")
    client = lab_agent.Client(agent.url, token_file=str(agent.token_file))
    with pytest.raises(lab_agent.SetupFailed) as info:
        client.wait_ready(30)
    e = info.value
    assert isinstance(e, lab_agent.AgentError)
    assert e.exit_code == 7
    assert e.log_tail is not None and "broken on purpose" in e.log_tail
    assert isinstance(e.ready, lab_agent.Ready) and e.ready.state == "failed"
    assert "7" in str(e)
    # The asyncio form raises the same.
    aclient = lab_agent.AsyncClient(agent.url, token=agent.token)
    with pytest.raises(lab_agent.SetupFailed) as ainfo:
        asyncio.run(aclient.wait_ready(30))
    assert ainfo.value.exit_code == 7
    # and wait_all hands it back, in order, beside a ready one.
    good = agents.start()
    out = lab_agent.wait_all([client, lab_agent.Client(good.url, token=good.token)], 30)
    assert isinstance(out[0], lab_agent.SetupFailed) and out[0].exit_code == 7
    assert isinstance(out[1], lab_agent.Ready) and out[1].is_ready


def test_a_wait_that_ends_is_a_timeout(agents: Agents, reserved_port: ReservedPort) -> None:
    client = lab_agent.Client("http://" + reserved_port.addr, token="t" * 40)
    with pytest.raises(lab_agent.Timeout) as info:
        client.wait_ready(0.3)
    # Nothing ever answered: unreachable as well as timed out in Rust terms;
    # the class says the deadline passed.
    assert isinstance(info.value, lab_agent.AgentError)
    agent = agents.start(setup="sleep 30\n")
    slow = lab_agent.Client(agent.url, token=agent.token)
    with pytest.raises(lab_agent.WaitTimeout) as info2:
        slow.wait_ready(0.5)
    ready = info2.value.ready
    assert isinstance(ready, lab_agent.Ready) and ready.state == "setting_up"


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError):
        lab_agent.Client("http://127.0.0.1:1")
    with pytest.raises(ValueError):
        lab_agent.Client("http://127.0.0.1:1", token="a" * 40, token_file="/x")
    with pytest.raises(ValueError):
        lab_agent.Client("not a url", token="a" * 40)
    c = lab_agent.Client("http://127.0.0.1:1", token="a" * 40)
    with pytest.raises(ValueError):
        c.wait_ready(-1)
    # Regression: a PanicException (an `Instant` overflow) before.
    with pytest.raises(ValueError, match="ends past what the clock can count"):
        c.wait_ready(1e19)
