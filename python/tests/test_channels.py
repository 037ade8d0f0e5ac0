"""The channels beside TCP: ``vsock+unix://`` and ``kubevirt://``, through
the relay stand-ins of tests/src/relay/ (the ``relay-stand-in`` binary: a
hybrid vsock socket as vhost-device-vsock serves one, KubeVirt's vsock
subresource as its source says it behaves) to a real agent on loopback.
The real relays and a guest's vsock are the VM tests'."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

import lab_agent
from conftest import Agent, Agents

RELAY_STAND_IN_BIN = os.environ.get("RELAY_STAND_IN_BIN", "")


class Relays:
    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []

    def start(self, agents: Agents, agent: Agent, die_after: Optional[int] = None) -> Dict[str, Any]:
        assert RELAY_STAND_IN_BIN, "RELAY_STAND_IN_BIN is not set (tests/tests/python.rs sets it)"
        d = agents.mkdir("relay-%d" % len(self.procs))
        args = [RELAY_STAND_IN_BIN, str(d), agent.url[len("http://"):]]
        if die_after is not None:
            args.append(str(die_after))
        p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        assert p.stdout is not None
        return json.loads(p.stdout.readline())

    def close(self) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.close()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def relays() -> Iterator[Relays]:
    r = Relays()
    yield r
    r.close()


def kube(r: Dict[str, Any], ca: str = "kube_ca") -> Dict[str, str]:
    return {
        "kube_server": r["kube_server"],
        "kube_token_file": r["kube_token_file"],
        "kube_ca_file": r[ca],
    }


LAB = 'name = "channels"\n[[checks]]\nname = "echo"\nrun = "echo hi"\n'


def test_every_channel_carries_the_calls(agents: Agents, agent: Agent, relays: Relays) -> None:
    r = relays.start(agents, agent)
    lab_dir = agents.mkdir("lab")
    (lab_dir / "lab.toml").write_text(LAB)
    lab = lab_agent.Lab.load(str(lab_dir))
    for url, extra in [(r["hybrid"], {}), ("kubevirt://labs/vm-1", kube(r))]:
        c = lab_agent.Client(url, token=agent.token, **extra)
        assert c.wait_ready(60).state == "ready"
        res = c.exec("echo out; exit 5", profile="none")
        assert (res.stdout, res.exit_code) == ("out\n", 5)
        assert c.grade(lab).passed == 1

        async def run() -> int:
            a = lab_agent.AsyncClient(url, token=agent.token, **extra)
            return (await a.exec("exit 7", profile="none")).exit_code

        assert asyncio.run(run()) == 7


def test_kubevirt_refusals_and_credentials(agents: Agents, agent: Agent, relays: Relays) -> None:
    r = relays.start(agents, agent)
    c = lab_agent.Client("kubevirt://other/vm-1", token=agent.token, **kube(r))
    with pytest.raises(lab_agent.Unreachable) as e:
        c.ready()
    assert e.value.relay_status == 403
    assert 'cannot get resource "virtualmachineinstances/vsock"' in str(e.value)
    c = lab_agent.Client("kubevirt://labs/vm-1", token=agent.token, **kube(r, "kube_other_ca"))
    with pytest.raises(lab_agent.Unreachable) as e:
        c.ready()
    assert e.value.relay_status is None and "TLS" in str(e.value)
    # An Unreachable that is no relay's refusal has relay_status too.
    c = lab_agent.Client(r["hybrid"].replace("port=8899", "port=9999"), token=agent.token)
    with pytest.raises(lab_agent.Unreachable) as e:
        c.ready()
    assert e.value.relay_status is None
    with pytest.raises(ValueError, match="together"):
        lab_agent.Client("kubevirt://labs/vm-1", token=agent.token, kube_server=r["kube_server"])
    with pytest.raises(ValueError, match="no/such/token"):
        lab_agent.Client(
            "kubevirt://labs/vm-1",
            token=agent.token,
            kube_server=r["kube_server"],
            kube_token_file="/no/such/token",
            kube_ca_file=r["kube_ca"],
        )


def test_a_relay_that_dies_mid_answer_is_no_answer(agents: Agents, agent: Agent, relays: Relays) -> None:
    lab_agent.Client(agent.url, token=agent.token).wait_ready(60)
    r = relays.start(agents, agent, die_after=300)
    for url, extra in [(r["hybrid"], {}), ("kubevirt://labs/vm-1", kube(r))]:
        c = lab_agent.Client(url, token=agent.token, **extra)
        with pytest.raises(lab_agent.Unreachable):
            c.exec("seq 100000", profile="none")
