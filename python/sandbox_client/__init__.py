"""The agent's side of the sandbox service.

Two things an agent needs, standard library only:

- ``run_python(code, files=None, timeout_s=None, outputs=None) -> Result``: run
  model-written code in a fresh one-use sandbox; the files named by
  ``outputs`` come back in ``Result.files`` (``save_files`` writes them). ``RUN_PYTHON_TOOL`` (Anthropic) and
  ``RUN_PYTHON_TOOL_OPENAI`` describe it to a model; ``handle_run_python``
  runs a model's call and ``result_text`` says what happened in words;
  images among the outputs come back to the model as image content blocks.
- ``@sandboxed``: the agent's own tool functions run in a one-use pod of the
  agent's image, away from its credentials (``TOOL_SANDBOX=false`` runs them
  here instead).
- ``AsyncClient``: the same for asyncio (``run_python``, ``call``, and
  ``stream_python``, which yields the output as it comes, then the Result);
  ``run_python(..., on_output=callback)`` streams synchronously.

Both fail closed: when the sandbox cannot be used they raise
``SandboxUnavailable`` and never run the code in this process.

The service's address comes from ``SANDBOX_URL``; the agent's image from
``AGENT_IMAGE``; the bearer token that says who is calling from the file
``SANDBOX_TOKEN_FILE`` names (see Client).
"""

from .aio import AsyncClient, OutputEvent
from .client import Client
from .errors import (
    RemoteToolError,
    SandboxAuthError,
    SandboxError,
    SandboxQuotaExceeded,
    SandboxRequestError,
    SandboxUnavailable,
    ToolCallFailed,
)
from .outputs import save_files
from .results import CallResult, OutputFile, RemoteError, Result, Usage
from .images import MAX_IMAGE_BYTES, MAX_IMAGES
from .snippets import (
    RUN_PYTHON_DESCRIPTION,
    RUN_PYTHON_PARAMETERS,
    RUN_PYTHON_PARAMETERS_STRICT,
    RUN_PYTHON_TOOL,
    RUN_PYTHON_TOOL_OPENAI,
    handle_run_python,
    result_text,
    run_python,
)
from .tools import sandboxed, tool_sandbox_enabled

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "CallResult",
    "Client",
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "OutputEvent",
    "OutputFile",
    "RUN_PYTHON_DESCRIPTION",
    "RUN_PYTHON_PARAMETERS",
    "RUN_PYTHON_PARAMETERS_STRICT",
    "RUN_PYTHON_TOOL",
    "RUN_PYTHON_TOOL_OPENAI",
    "RemoteError",
    "RemoteToolError",
    "Result",
    "SandboxAuthError",
    "SandboxError",
    "SandboxQuotaExceeded",
    "SandboxRequestError",
    "SandboxUnavailable",
    "ToolCallFailed",
    "Usage",
    "handle_run_python",
    "result_text",
    "run_python",
    "save_files",
    "sandboxed",
    "tool_sandbox_enabled",
]
