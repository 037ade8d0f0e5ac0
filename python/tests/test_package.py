"""The installed package: where it imports from, its types and stubs."""

from __future__ import annotations

import os
from pathlib import Path

import lab_agent
from conftest import REPO


def test_imports_the_installed_wheel_with_its_stubs() -> None:
    native = Path(lab_agent._native.__file__)
    assert REPO not in native.parents, native  # the wheel, not the tree
    assert native.name.endswith(".abi3.so"), native
    pkg = native.parent
    assert (pkg / "py.typed").is_file()
    assert (pkg / "_native.pyi").is_file()
    assert lab_agent.__version__


def test_one_exception_hierarchy() -> None:
    for name in ["Unauthorized", "Unreachable", "Timeout", "WaitTimeout", "SetupFailed",
                 "NotReady", "Rejected", "LabError", "RenderError"]:
        cls = getattr(lab_agent, name)
        assert issubclass(cls, lab_agent.AgentError), name
        assert cls.__module__ == "lab_agent", cls.__module__
    assert issubclass(lab_agent.WaitTimeout, lab_agent.Timeout)
    assert issubclass(lab_agent.AgentError, Exception)
