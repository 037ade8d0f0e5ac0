# Type stubs of the Rust extension (python/src/). The typed API is the
# package's Python modules (lab_agent/_*.py, re-exported by __init__.py);
# this module is their engine.
from os import PathLike
from typing import Any, Awaitable, Dict, List, Optional, Tuple, Union

from ._ready import Ready

__version__: str
EXEC_HAS_PROFILE: bool
DEFAULT_REQUEST_TIMEOUT: float

class AgentError(Exception):
    """Base of every lab_agent error. str(e) shows text from the guest
    with its control characters escaped (\\x1b, \\n); the attributes hold
    it as sent."""

    status: Optional[int]
    code: Optional[str]
    hint: Optional[str]
    # The agent's error message (or the start of a non-JSON error body),
    # as sent: may hold terminal escapes; print str(e) instead.
    agent_message: Optional[str]
    # AgentWentAway: whether the command may have started (the request
    # was written whole before the connection died); None for the others.
    may_have_started: Optional[bool]
    # The agent's readiness answer (SetupFailed, NotReady, WaitTimeout).
    ready: Optional[Ready]
    exit_code: Optional[int]
    log_tail: Optional[str]

class Unauthorized(AgentError): ...
class Unreachable(AgentError):
    """No answer could be had from the agent. relay_status: when KubeVirt's
    vsock relay refused the connection (``kubevirt://``), its HTTP status
    (401, 403, 404, 400, 5xx); else None (also for a TLS failure)."""

    relay_status: Optional[int]

class AgentWentAway(Unreachable):
    """The agent restarted, crashed or was reset between two calls, and an
    exec met the kept-alive connection to the agent that was: it closed
    before any byte of the answer. may_have_started is True when the
    request was written whole (the agent may have read it and started the
    command), False when it was cut short (it cannot have started). The
    command was not sent again: re-running it is the caller's decision.
    Reads (ready, info) never raise this: they are sent again on a fresh
    connection, within the call's timeout."""
class Timeout(AgentError): ...
class WaitTimeout(Timeout): ...

class Busy(Timeout):
    """exec found the agent busy (429) until the call's deadline; the
    command never started."""

class SetupFailed(AgentError): ...
class NotReady(AgentError): ...
class InstanceChanged(AgentError):
    expected: str
    found: str
    first_boot_at: Optional[str]
    # "caller" (the client's instance=) or "grade" (the instance a grade
    # began on).
    pinned_by: str

class InstanceUnknown(AgentError):
    expected: str

class Rejected(AgentError): ...

class TooLarge(AgentError):
    """The answer was larger than the request allows (announced or read):
    something other than lab-agent answers, or the guest is hostile."""

class MalformedAnswer(AgentError):
    """The answer was not the JSON expected, whatever its status (also a
    readiness answer with an unknown state)."""

class ProtocolError(AgentError):
    """The answer says what no lab-agent says: an exit code outside
    0..=255, a signal outside 1..=64, more output than max_output_bytes
    allows, a relative lab_dir, more than 8 interim (1xx) responses."""

class LabError(AgentError): ...
class RenderError(AgentError): ...

class Lab:
    @staticmethod
    def load(path: Union[str, PathLike[str]]) -> Lab: ...
    @property
    def name(self) -> str: ...
    @property
    def dir(self) -> str: ...
    @property
    def check_names(self) -> List[str]: ...
    @property
    def max_score(self) -> int: ...
    @property
    def readiness_timeout_secs(self) -> int: ...
    @property
    def min_root_bytes(self) -> Optional[int]: ...
    @property
    def on_small_root(self) -> str: ...
    @property
    def vm_names(self) -> List[str]: ...
    @property
    def check_vms(self) -> List[Tuple[str, Optional[str]]]: ...

class Rendered:
    text: str
    user_data: str
    user_data_bytes: bytes
    agent_from: str
    agent_sha256: str
    channel: str
    token: str
    token_generated: bool
    agent_path: str
    budget_json: str
    arch: str
    vm: Optional[str]

class ExecStream:
    """A streamed exec's events (python/src/stream.rs). One read at a time:
    a second while one runs raises RuntimeError. An error, Ctrl-C, a
    cancelled next_async or close() ends it (the connection closes, the
    agent kills the command)."""

    # ("stdout" | "stderr", text) or ("result", the ExecResult's JSON);
    # None once the result was read (and after the stream ended).
    def next(self) -> Optional[Tuple[str, str]]: ...
    def next_async(self) -> Awaitable[Optional[Tuple[str, str]]]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

class Client:
    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        request_timeout: Optional[float] = None,
        instance: Optional[str] = None,
        kube_server: Optional[str] = None,
        kube_token_file: Optional[str] = None,
        kube_ca_file: Optional[str] = None,
    ) -> None: ...
    @property
    def url(self) -> str: ...
    @property
    def instance(self) -> Optional[str]: ...
    def ready(self) -> str: ...
    def ready_async(self) -> Awaitable[str]: ...
    def info(self) -> str: ...
    def info_async(self) -> Awaitable[str]: ...
    def wait_ready(self, timeout: float) -> str: ...
    def wait_ready_async(self, timeout: float) -> Awaitable[str]: ...
    def exec(self, request: str) -> str: ...
    def exec_async(self, request: str) -> Awaitable[str]: ...
    # Sends the request now (blocking, Ctrl-C interrupts).
    def exec_stream(self, request: str) -> ExecStream: ...
    # Sends nothing until the stream's first next_async.
    def exec_stream_unsent(self, request: str) -> ExecStream: ...
    # (the log's bytes, next offset, setup state, restarted)
    def setup_log(self, offset: int = 0, wait: int = 0) -> Tuple[bytes, int, str, bool]: ...
    def setup_log_async(
        self, offset: int = 0, wait: int = 0
    ) -> Awaitable[Tuple[bytes, int, str, bool]]: ...
    def grade(
        self, lab: Lab, checks: Optional[List[str]] = None, lab_dir: Optional[str] = None
    ) -> str: ...
    def grade_async(
        self, lab: Lab, checks: Optional[List[str]] = None, lab_dir: Optional[str] = None
    ) -> Awaitable[str]: ...

class WaitEach:
    """Every client's wait, started when made (python/src/each.rs); each
    read takes the next one to end. Dropping it ends the waits still
    running."""

    def __init__(self, clients: List[Client], timeout: float) -> None: ...
    # (index in clients, readiness JSON or the exception), or None at the end.
    def next(self) -> Optional[Tuple[int, Union[str, AgentError]]]: ...
    def next_async(self) -> Awaitable[Optional[Tuple[int, Union[str, AgentError]]]]: ...
    @property
    def remaining(self) -> int: ...

def wait_all(clients: List[Client], timeout: float) -> List[Union[str, AgentError]]: ...
def wait_all_async(
    clients: List[Client], timeout: float
) -> Awaitable[List[Union[str, AgentError]]]: ...
def grade_all(clients: List[Client], lab: Lab, concurrency: int) -> List[Union[str, AgentError]]: ...
def grade_all_async(
    clients: List[Client], lab: Lab, concurrency: int
) -> Awaitable[List[Union[str, AgentError]]]: ...
def render_secret(
    lab: Lab,
    name: str,
    namespace: Optional[str] = None,
    labels: Optional[Dict[str, str]] = None,
    agent_path: Optional[str] = None,
    token: Optional[str] = None,
    format: str = "yaml",
    arch: Optional[str] = None,
    vm: Optional[str] = None,
    params: Optional[Dict[str, str]] = None,
    agent_from: str = "embedded",
    channel: str = "both",
) -> Rendered: ...
class RenderedManifests:
    text: str
    # {"lab", "name", "namespace", "arch", "agent_path", "agent_from",
    # "agent_sha256", "channel", "root": {...}, "vms": [...], "objects": [...]}
    report_json: str

# labctl render (python/src/manifest.rs); `session`: the lab has [[vms]].
def render_manifests(
    lab: Lab,
    name: str,
    root_image: str,
    session: bool,
    namespace: Optional[str] = None,
    labels: Optional[Dict[str, str]] = None,
    vm: Optional[str] = None,
    params: Optional[Dict[str, str]] = None,
    arch: Optional[str] = None,
    agent_path: Optional[str] = None,
    agent_from: str = "embedded",
    agent_disk: Optional[str] = None,
    channel: str = "both",
    golden_pvc: Optional[str] = None,
    # The PVC object as JSON text; "null": not found; None: not given.
    golden_pvc_json: Optional[str] = None,
    cpus: int = 2,
    memory: str = "4Gi",
    backend_namespace: Optional[str] = None,
    backend_labels: Optional[Dict[str, str]] = None,
    cluster_domain: str = "cluster.local",
    token: Optional[str] = None,
    autologin: bool = True,
) -> RenderedManifests: ...
# The PVC object as JSON text ("null": not found).
def golden_unusable_reason(pvc_json: str, image: str, min_bytes: int) -> Optional[str]: ...
# (labctl timeline --json's object as JSON text, [(document, stamp)] of
# malformed backend stamps); ValueError when the text holds no answers.
def timeline_distribution_json(text: str) -> Tuple[str, List[Tuple[int, str]]]: ...
def timeline_svg(text: str) -> str: ...
def session_wait_ready(
    names: List[str], clients: List[Client], timeout: float
) -> List[Tuple[str, str]]: ...
def session_wait_ready_async(
    names: List[str], clients: List[Client], timeout: float
) -> Awaitable[List[Tuple[str, str]]]: ...
def session_grade_json(
    names: List[str],
    clients: List[Client],
    lab: Lab,
    checks: Optional[List[str]] = None,
    lab_dir: Optional[str] = None,
) -> str: ...
def session_grade_json_async(
    names: List[str],
    clients: List[Client],
    lab: Lab,
    checks: Optional[List[str]] = None,
    lab_dir: Optional[str] = None,
) -> Awaitable[str]: ...
def _shutdown() -> None:
    """The atexit hook (registered on import): ends running async calls and
    keeps the runtime's threads away from the finalising interpreter."""

def _rust_exec_timings(client: Client, command: str, user: str, cwd: str, n: int) -> List[float]: ...
