"""Schemathesis hooks for the contract test (agent/tests/agent/contract.rs).

The agent runs what /v1/exec sends, as root. Property-based generation sends
arbitrary strings, so before each call the `command` of an exec body that the
agent would accept is rewritten into `printf %s '<the original>'`: the same
bytes travel through the agent and come back as stdout (exercising the UTF-8
and size paths), but nothing generated is ever executed as a command.
Bodies the agent must refuse are left exactly as generated, so negative
cases stay negative. A HOME without a login profile keeps each shell fast.
"""

import schemathesis

MAX_COMMAND_BYTES = 128 * 1024 - 1
# Variables a login shell or the loader would act on: dropped, should the
# generator ever produce one.
RISKY = {"BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
         "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS"}


def _would_run(command):
    return (
        isinstance(command, str)
        and command.strip() != ""
        and "\x00" not in command
        and len(command.encode("utf-8", "surrogatepass")) <= MAX_COMMAND_BYTES
    )


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path != "/v1/exec" or not isinstance(case.body, dict):
        return
    body = dict(case.body)
    if _would_run(body.get("command")):
        body["command"] = "printf %s '" + body["command"].replace("'", "'\\''") + "'"
    env = body.get("env", {})
    if isinstance(env, dict):
        env = {k: v for k, v in env.items() if k not in RISKY and not k.startswith("BASH_FUNC")}
        env.setdefault("HOME", "/nonexistent")
        body["env"] = env
    case.body = body
