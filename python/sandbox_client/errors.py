"""The exceptions of sandbox_client.

Every way a request can end without a result has its own class, so an agent
can tell apart "the sandbox could not be used" (stop; never run the code
anywhere else), "the request was wrong" (fix it) and "the code ran and
failed" (read why)::

    SandboxError
    ├── SandboxUnavailable   no sandbox: fail closed
    ├── SandboxRequestError  the service refused the request (4xx)
    └── ToolCallFailed       a tool ran but returned no value
        └── RemoteToolError  ... because it raised
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .results import CallResult


class SandboxError(Exception):
    """Base class of every error sandbox_client raises on purpose."""


class SandboxUnavailable(SandboxError):
    """The sandbox could not be used, so nothing was run here instead.

    Raised when ``SANDBOX_URL`` is unset or invalid, the connection is
    refused or times out, the service answers 5xx (or 503 for longer than the
    retry budget), the answer is not the service's, or no agent image is
    known for a tool call. The code may or may not have run in the sandbox
    (after a timeout it may have); it certainly did not run in this process.

    Attributes:
        reason: what went wrong, in a sentence.
        status: the HTTP status when there was an answer, else None.
    """

    def __init__(self, reason: str, status: Optional[int] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class SandboxRequestError(SandboxError):
    """The service refused the request as wrong (an HTTP 4xx): nothing ran.

    Retrying the same request will not help; fixing it will. The service's
    own message names the problem (a bad file path, a timeout out of range,
    a body over 1 MiB, an image outside the allow list, ...). A body over
    the service's default limit of 1 MiB is refused this way before it is
    sent, as the 413 the service would answer.

    Attributes:
        status: the HTTP status, 400 to 499.
        message: the service's ``{"error": ...}`` message.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"sandbox refused the request: HTTP {status}: {message}")
        self.status = status
        self.message = message


class ToolCallFailed(SandboxError):
    """A sandboxed tool call ran but did not return a value.

    It timed out, ran out of memory, or its process ended without a result.
    ``result`` holds everything the service said, stdout and stderr included.
    """

    def __init__(self, message: str, result: CallResult) -> None:
        super().__init__(message)
        self.result = result


class RemoteToolError(ToolCallFailed):
    """The tool function raised inside its sandbox.

    The original exception cannot be rebuilt here (its class may not even be
    importable in the agent), so this carries what the sandbox reported.

    Attributes:
        type: the exception's class name as the sandbox reported it,
            e.g. ``"ValueError"``.
        message: ``str()`` of the exception.
        traceback: the remote traceback, formatted.
        result: the whole answer (stdout, stderr, sandbox_id, ...).
    """

    def __init__(self, type: str, message: str, traceback: str, result: CallResult) -> None:
        text = f"{type}: {message}"
        if traceback:
            text += "\n\nRemote traceback (in sandbox " + result.sandbox_id + "):\n" + traceback.rstrip("\n")
        super().__init__(text, result)
        self.type = type
        self.message = message
        self.traceback = traceback
