"""@sandboxed: the agent's own tool functions, run in a one-use pod of the
agent's image instead of beside the agent's credentials."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from typing import Any, Callable, Mapping, Optional, TypeVar, overload

from .client import Client
from .errors import SandboxUnavailable
from .jsoncheck import check_json

log = logging.getLogger("sandbox_client")

F = TypeVar("F", bound=Callable[..., Any])

# The one value of TOOL_SANDBOX that switches sandboxing off, as docs/python.md
# says it. Anything else keeps it on, "False", "0" or "off" included: a value
# that only may have meant off runs no tool beside the agent's credentials.
_OFF = "false"

_warned_lock = threading.Lock()
_warned = False


def tool_sandbox_enabled() -> bool:
    """False only when ``TOOL_SANDBOX`` is exactly ``false``."""
    return os.environ.get("TOOL_SANDBOX") != _OFF


def _warn_in_process_once() -> None:
    global _warned
    with _warned_lock:
        if _warned:
            return
        _warned = True
    # _OFF is the only value that gets here, so the warning names what was set.
    log.warning(
        "TOOL_SANDBOX=%s: @sandboxed tool functions run in this process, next to its credentials, "
        "not in a sandbox. Only do this if you trust every tool.",
        _OFF,
    )


@overload
def sandboxed(func: F) -> F: ...


@overload
def sandboxed(
    func: None = None,
    *,
    image: Optional[str] = None,
    timeout_s: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    client: Optional[Client] = None,
) -> Callable[[F], F]: ...


def sandboxed(
    func: Optional[F] = None,
    *,
    image: Optional[str] = None,
    timeout_s: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    client: Optional[Client] = None,
) -> Any:
    """Make calls to a tool function run in a one-use sandbox pod.

    Use as ``@sandboxed`` or ``@sandboxed(timeout_s=60, env={...})``. A call
    sends ``module:qualname``, the arguments and the agent's image to
    ``POST /v1/call``; the pod imports the function from the image and runs
    it there, without the agent's credentials. The call returns the
    function's return value, decoded from JSON.

    Args:
        func: the tool function: a module-level function (or a staticmethod
            inside a class) that the image can import by its module name.
        image: the agent's container image. Default: ``AGENT_IMAGE``, read
            at each call.
        timeout_s: the call's deadline in seconds (1 to 120; the service's
            default is 30).
        env: environment variables for the pod; it gets no others from the
            agent.
        client: the Client to use; by default one for ``SANDBOX_URL``, made
            at each call.

    With ``TOOL_SANDBOX=false`` the function runs in this process instead,
    and a warning says so once per process. Otherwise, nothing ever runs
    here: every failure raises.

    Raises (from a call):
        TypeError: an argument is not JSON-serialisable; nothing was sent.
        RemoteToolError: the function raised in the sandbox (type, message,
            remote traceback).
        ToolCallFailed: it timed out, ran out of memory, or crashed.
        SandboxRequestError: the service refused the call (4xx);
            SandboxAuthError when it refused this caller (401, 403).
        SandboxUnavailable: no sandbox could be used (no SANDBOX_URL, no
            image, an unreadable token file, refused, timed out, 5xx,
            malformed answer, ...); SandboxQuotaExceeded when this caller
            is over its quota (429).

    The wrapper keeps the function as ``__wrapped__`` and its reference as
    ``sandbox_function``: the pod must call ``__wrapped__``, since calling
    the wrapper there would ask for yet another sandbox.
    """

    def decorate(f: F) -> F:
        ref = function_ref(f)

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not tool_sandbox_enabled():
                _warn_in_process_once()
                return f(*args, **kwargs)
            # Arguments are checked before the URL and the image, so that a
            # call that could never be sent says so whatever the setup.
            check_json(list(args), "args")
            check_json(kwargs, "kwargs")
            img = image or os.environ.get("AGENT_IMAGE", "")
            if not img:
                raise SandboxUnavailable(
                    f"no image to run tool {ref} in: set AGENT_IMAGE or pass image= to @sandboxed; "
                    "the tool is not run here instead"
                )
            c = client if client is not None else Client()
            return c.call(ref, args, kwargs, image=img, timeout_s=timeout_s, env=env).value()

        wrapper.sandbox_function = ref  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    if func is not None:
        return decorate(func)
    return decorate


def function_ref(f: Callable[..., Any]) -> str:
    """The ``module:qualname`` by which a pod of the agent's image imports f.

    Raises TypeError for a function no other process could import: one
    defined inside another function, a lambda, one in ``__main__`` (the pod
    runs its own main), or a coroutine function (the pod calls the function
    and sends back what it returns, and a coroutine is not a value).
    """
    if inspect.iscoroutinefunction(f):
        raise TypeError(f"@sandboxed cannot run the coroutine function {f.__qualname__}: make it a plain function")
    module = getattr(f, "__module__", None)
    qualname = getattr(f, "__qualname__", None)
    if not module or not qualname:
        raise TypeError(f"@sandboxed needs a function with __module__ and __qualname__, got {f!r}")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(
            f"@sandboxed cannot run {module}.{qualname}: it is defined inside a function or is a lambda, "
            "so the sandbox cannot import it; define it at module level"
        )
    if module == "__main__":
        raise TypeError(
            f"@sandboxed cannot run {qualname} from __main__: the sandbox imports tools by module name, "
            "so put it in a module of the agent's image"
        )
    return f"{module}:{qualname}"
