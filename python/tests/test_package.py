"""The installed package: where it imports from, its types and stubs."""

from __future__ import annotations

import inspect
import os
import typing
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
    for name in ["Unauthorized", "Unreachable", "AgentWentAway", "Timeout", "WaitTimeout",
                 "SetupFailed", "NotReady", "InstanceChanged", "InstanceUnknown", "Rejected",
                 "LabError", "RenderError"]:
        cls = getattr(lab_agent, name)
        assert issubclass(cls, lab_agent.AgentError), name
        assert cls.__module__ == "lab_agent", cls.__module__
    assert issubclass(lab_agent.WaitTimeout, lab_agent.Timeout)
    assert issubclass(lab_agent.AgentWentAway, lab_agent.Unreachable)
    assert issubclass(lab_agent.AgentError, Exception)


def test_async_client_has_client_s_methods_as_coroutines() -> None:
    # Each public signature is written twice (a coroutine cannot share a
    # `def` with a blocking call); this keeps the two copies in step.
    public = [n for n in vars(lab_agent.Client) if not n.startswith("_")]
    assert public, vars(lab_agent.Client)
    for name in public:
        blocking = getattr(lab_agent.Client, name)
        coroutine = getattr(lab_agent.AsyncClient, name)
        if name == "exec_stream":
            # The one plain method: it returns an async iterator (`async
            # for`), with the same parameters.
            assert not inspect.iscoroutinefunction(coroutine)
            assert inspect.signature(coroutine).return_annotation == "AsyncExecStream"
            same = inspect.signature(coroutine).replace(return_annotation="ExecStream")
            assert same == inspect.signature(blocking), name
            continue
        assert inspect.iscoroutinefunction(coroutine), name
        assert inspect.signature(coroutine) == inspect.signature(blocking), name


def test_exec_forwards_every_parameter() -> None:
    # Positional forwarding: a parameter exec gained but the request lacks
    # would be dropped without a word.
    exec_params = list(inspect.signature(lab_agent.Client.exec).parameters)[1:]
    assert list(inspect.signature(lab_agent._exec_request).parameters) == exec_params
    # exec_stream takes exactly exec's.
    stream = inspect.signature(lab_agent.Client.exec_stream)
    assert stream.parameters == inspect.signature(lab_agent.Client.exec).parameters


def test_every_public_name_is_the_package_s_and_its_hints_resolve() -> None:
    # The package is a private module per job, re-exported by __init__.py:
    # a name the re-exports forgot fails here, and so does an annotation
    # naming what its module does not import, in `typing.get_type_hints`
    # (which pydantic and FastAPI call on the dataclasses), not in a
    # user's model.
    for name in lab_agent.__all__:
        obj = getattr(lab_agent, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not obj.__module__.startswith("lab_agent._") or obj.__module__ == "lab_agent._native":
            continue
        typing.get_type_hints(obj)
        for member in vars(obj).values() if inspect.isclass(obj) else []:
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member) or isinstance(member, classmethod):
                typing.get_type_hints(getattr(member, "__func__", member))
