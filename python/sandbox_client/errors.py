"""The exceptions of sandbox_client.

Every way a request can end without a result has its own class, so an agent
can tell apart "the sandbox could not be used" (stop; never run the code
anywhere else), "the request was wrong" (fix it) and "the code ran and
failed" (read why)::

    SandboxError
    ├── SandboxUnavailable        no sandbox: fail closed
    │   └── SandboxQuotaExceeded  ... for now: this caller is over its quota (429)
    ├── SandboxRequestError       the service refused the request (4xx)
    │   └── SandboxAuthError      ... because of who is asking (401, 403)
    └── ToolCallFailed            a tool ran but returned no value
        └── RemoteToolError       ... because it raised
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .results import CallResult


class SandboxError(Exception):
    """Base class of every error sandbox_client raises on purpose."""


class SandboxUnavailable(SandboxError):
    """The sandbox could not be used, so nothing was run here instead.

    Raised when ``SANDBOX_URL`` is unset or invalid, the token file cannot
    be read, the connection is refused or times out, the service answers 5xx
    (or 503 for longer than the retry budget), the answer is not the
    service's, or no agent image is known for a tool call. The code may or
    may not have run in the sandbox (after a timeout it may have); it
    certainly did not run in this process.

    Attributes:
        reason: what went wrong, in a sentence.
        status: the HTTP status when there was an answer, else None.
        request_id: the answer's ``X-Request-Id``, by which the service's
            log names the request; None when there was none.
    """

    def __init__(self, reason: str, status: Optional[int] = None, request_id: Optional[str] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.request_id = request_id


class SandboxQuotaExceeded(SandboxUnavailable):
    """The service refused the request because this caller is over its quota
    (HTTP 429): too many requests in flight, or too many a second. Nothing ran.

    Unlike a busy service's 503, it is not retried: this caller is the
    burst, and retrying from inside every call would keep it going. Wait
    ``retry_after`` seconds, or stop.

    Attributes:
        retry_after: the seconds the service asked to wait (its
            ``Retry-After``), or None when it did not say.
    """

    def __init__(self, reason: str, retry_after: Optional[float], request_id: Optional[str] = None) -> None:
        super().__init__(reason, 429, request_id)
        self.retry_after = retry_after


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
        request_id: the answer's ``X-Request-Id``, or None.
    """

    def __init__(self, status: int, message: str, request_id: Optional[str] = None) -> None:
        super().__init__(f"sandbox refused the request: HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.request_id = request_id


class SandboxAuthError(SandboxRequestError):
    """The service refused the request because of who is asking: nothing ran.

    401: it did not take the caller's token (none was sent, or it is
    malformed, expired or for another audience; ``message`` says which).
    403: the caller is not granted what it asked, such as running snippets
    or calling that image (``message`` names the identity the service saw).
    The same request fails the same way until the token or the service's
    policy changes, so it is never retried; the fix is the deployment's, not
    the model's (see Client for where the token comes from).
    """


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
