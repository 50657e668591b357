"""The client of one sandbox service: POST /v1/execute and POST /v1/call."""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import time
from email.utils import parsedate_to_datetime
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

from . import _transport
from ._transport import Abort, OnOutput
from ._token import TokenFile
from .errors import SandboxAuthError, SandboxQuotaExceeded, SandboxRequestError, SandboxUnavailable
from .jsoncheck import check_json
from .results import CallResult, MalformedAnswer, Result

log = logging.getLogger("sandbox_client")

# The service's defaults when a request names no timeout_s, and its limits.
EXECUTE_DEFAULT_TIMEOUT_S = 20
CALL_DEFAULT_TIMEOUT_S = 30
EXECUTE_MAX_TIMEOUT_S = 60
CALL_MAX_TIMEOUT_S = 120

# The largest request body the service takes (1 MiB): serve's --max-body
# default, and Client's (max_body= for a service set otherwise). A larger
# body is refused here, before it is sent, as the 413 the service would
# answer: the service closes the connection on a body it will not read, so
# a client still sending it would often see a reset instead of that 413.
MAX_BODY = 1 << 20

# How long an answer may take beyond the run's own timeout_s before the
# client gives up. /v1/execute may wait 30 s for a free warm pod before it
# runs anything; /v1/call creates a pod per call and waits up to 110 s for it
# (scheduling and the image pull). 15 s on top of each covers the transfer
# and a slow API server.
EXECUTE_OVERHEAD_S = 30 + 15
CALL_OVERHEAD_S = 110 + 15

# The longest the client keeps retrying a 503 with Retry-After, counted from
# the first attempt. The service's own 503 comes after it waited 30 s for a
# pod and says to retry in 5 s, so a minute is one or two more tries: enough
# to ride out a burst, short enough that an agent does not hang on a
# saturated service.
DEFAULT_RETRY_BUDGET_S = 60.0

# The shortest wait between two attempts, whatever Retry-After says, so that
# "Retry-After: 0" cannot turn the budget into a busy loop.
MIN_RETRY_DELAY_S = 0.2

# run_python's files: a mapping of path to text or bytes, or the API's own
# list of {"path", "content", "encoding"}.
FilesArg = Union[Mapping[str, Union[str, bytes]], Sequence[Mapping[str, str]]]


class Client:
    """A client of the sandbox service at one URL. Safe to share between threads.

    Args:
        url: the service's base URL, e.g. ``http://sandbox.sandbox.svc``.
            Default: the ``SANDBOX_URL`` environment variable.
        retry_budget_s: how long, from the first attempt, a 503 with
            Retry-After is retried before SandboxUnavailable is raised.
            0 never retries.
        overhead_s: how long an answer may take beyond the run's timeout_s.
            Default: EXECUTE_OVERHEAD_S or CALL_OVERHEAD_S by endpoint.
        token_file: the file of the bearer token sent with every request
            (the agent's projected ServiceAccount token), read again for
            each. Default: the ``SANDBOX_TOKEN_FILE`` environment variable,
            else ``/var/run/secrets/sandbox/token`` when that file exists
            (else no token is sent). A file named here or in
            ``SANDBOX_TOKEN_FILE`` that cannot be read, or holds no token,
            makes each request raise SandboxUnavailable before it is sent.

    Raises:
        SandboxUnavailable: no URL, or one that is not http(s)://host[:port].
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
        overhead_s: Optional[float] = None,
        max_body: int = MAX_BODY,
        token_file: Optional[str] = None,
    ) -> None:
        if url is None:
            url = os.environ.get("SANDBOX_URL", "")
            if not url:
                raise SandboxUnavailable(
                    "SANDBOX_URL is not set: there is no sandbox to run in, and the code is not run here instead"
                )
        try:
            base = urlsplit(url)
            base.port  # raises ValueError on a bad port
        except ValueError as e:
            raise SandboxUnavailable(f"sandbox URL {url!r}: {e}") from None
        if base.scheme not in ("http", "https") or not base.hostname:
            raise SandboxUnavailable(f"sandbox URL {url!r}: want http://host[:port] or https://host[:port]")
        self.url = url
        self._base = base
        self.retry_budget_s = retry_budget_s
        self.overhead_s = overhead_s
        self.max_body = max_body
        self._token = TokenFile.resolve(token_file)

    def execute(
        self,
        code: str,
        files: Optional[FilesArg] = None,
        timeout_s: Optional[int] = None,
        outputs: Optional[Sequence[str]] = None,
        *,
        on_output: Optional[OnOutput] = None,
        abort: Optional[Abort] = None,
    ) -> Result:
        """Run one Python snippet in a fresh sandbox and return its Result.

        See run_python for the arguments. A snippet that fails is still a
        Result; the exceptions are for runs that did not happen. With
        on_output, the output streams: ``on_output(stream, text)`` is called
        as the snippet writes (see run_python). abort (an
        ``_transport.Abort``) lets another thread end the request; the
        asyncio client uses it.

        Raises:
            TypeError: an argument of the wrong type (nothing is sent).
            SandboxAuthError: the service refused this caller (401, 403).
            SandboxRequestError: the service refused the request (4xx).
            SandboxQuotaExceeded: this caller is over its quota (429).
            SandboxUnavailable: no sandbox could be used.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        payload: Dict[str, Any] = {"code": code}
        if timeout_s is not None:
            payload["timeout_s"] = _timeout(timeout_s)
        if files is not None:
            payload["files"] = encode_files(files)
        if outputs is not None:
            payload["outputs"] = _outputs(outputs)
        wait_s = _wait_s(timeout_s, EXECUTE_DEFAULT_TIMEOUT_S, EXECUTE_MAX_TIMEOUT_S)
        obj, streamed = self._post("/v1/execute", payload, wait_s, EXECUTE_OVERHEAD_S, on_output, abort)
        try:
            result = Result.from_json(obj)
        except MalformedAnswer as e:
            raise SandboxUnavailable(f"POST {self._url('/v1/execute')}: malformed answer: {e}", 200) from None
        if on_output is not None and not streamed:
            # A service that does not stream: the output, whole, at the end.
            for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
                if text:
                    on_output(stream, text)
        return result

    def call(
        self,
        function: str,
        args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        *,
        image: str,
        timeout_s: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        abort: Optional[Abort] = None,
    ) -> CallResult:
        """Run ``function`` ("pkg.module:attr.path") with args and kwargs in
        a one-use pod of ``image`` and return the service's answer.

        The return value, or the tool's exception, is in the CallResult
        (``.value()`` returns the one or raises the other).

        Raises:
            TypeError: args, kwargs or env are not JSON (nothing is sent).
            SandboxAuthError: the service refused this caller (401, 403).
            SandboxRequestError: the service refused the request (4xx).
            SandboxQuotaExceeded: this caller is over its quota (429).
            SandboxUnavailable: no sandbox could be used.
        """
        arg_list: List[Any] = list(args)
        kw: Dict[str, Any] = dict(kwargs or {})
        check_json(arg_list, "args")
        check_json(kw, "kwargs")
        payload: Dict[str, Any] = {"image": image, "function": function, "args": arg_list, "kwargs": kw}
        if timeout_s is not None:
            payload["timeout_s"] = _timeout(timeout_s)
        if env:
            for k, v in env.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise TypeError(f"env must map str to str, got {type(k).__name__}: {type(v).__name__}")
            payload["env"] = dict(env)
        wait_s = _wait_s(timeout_s, CALL_DEFAULT_TIMEOUT_S, CALL_MAX_TIMEOUT_S)
        obj, _ = self._post("/v1/call", payload, wait_s, CALL_OVERHEAD_S, abort=abort)
        try:
            return CallResult.from_json(obj)
        except MalformedAnswer as e:
            raise SandboxUnavailable(f"POST {self._url('/v1/call')}: malformed answer: {e}", 200) from None

    def _url(self, path: str) -> str:
        b = self._base
        return b.scheme + "://" + b.netloc + b.path.rstrip("/") + path

    def _post(
        self,
        path: str,
        payload: Mapping[str, Any],
        timeout_s: float,
        overhead_s: float,
        on_output: Optional[OnOutput] = None,
        abort: Optional[Abort] = None,
    ) -> Tuple[Any, bool]:
        """POST payload, retrying a 503 with Retry-After within the budget,
        and return the decoded JSON of a 200 answer (of a streamed one, its
        result event) and whether the answer was streamed. An error event,
        which the service sends when its answer had begun, is raised as its
        status would be."""
        body = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode("utf-8")
        if len(body) > self.max_body:
            raise SandboxRequestError(
                413, f"request body too large: {len(body)} bytes, the limit is {self.max_body} bytes (nothing was sent)"
            )
        timeout = timeout_s + (self.overhead_s if self.overhead_s is not None else overhead_s)
        url = self._url(path)
        start = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            token = self._token.read()
            ans = _transport.post(
                self._base, path, body, timeout, max_body=self.max_body, token=token, on_output=on_output, abort=abort
            )
            rid = ans.request_id
            if ans.event == "error":
                status, message = _stream_error(ans.body)
                if status is None or message is None:
                    raise SandboxUnavailable(
                        f"POST {url}: malformed answer: an error event that is not one: {_snippet(ans.body)}", 200, rid
                    )
                # The run had begun: never tried again, whatever the status.
                if status in (401, 403):
                    raise SandboxAuthError(status, message, rid)
                if 400 <= status < 500:
                    raise SandboxRequestError(status, message, rid)
                raise SandboxUnavailable(f"POST {url}: HTTP {status} after the run began: {message}", status, rid)
            if ans.status == 200:
                try:
                    return json.loads(ans.body), ans.event == "result"
                except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
                    raise SandboxUnavailable(
                        f"POST {url}: malformed answer: not JSON ({e}): {_snippet(ans.body)}", 200, rid
                    ) from None
            message = _service_message(ans.body)
            if ans.status == 503:
                # 503 with Retry-After is the service saying it ran nothing
                # and has no sandbox free yet, so sending the request again
                # cannot run it twice. A bare 503 says neither (a proxy whose
                # backend is down sends one): it fails closed at once.
                delay = _retry_after(ans.retry_after)
                if delay is not None:
                    delay = max(delay, MIN_RETRY_DELAY_S)
                    elapsed = time.monotonic() - start
                    if elapsed + delay <= self.retry_budget_s:
                        log.info("sandbox busy (HTTP 503: %s); retrying in %.1fs", message, delay)
                        if abort is None:
                            time.sleep(delay)
                        elif abort.wait(delay):
                            raise SandboxUnavailable(f"POST {url}: cancelled while waiting to retry a 503", 503, rid)
                        continue
                    raise SandboxUnavailable(
                        f"POST {url}: HTTP 503: {message or _snippet(ans.body)}; gave up after "
                        f"{attempts} attempt(s) in {elapsed:.1f}s (retry budget {self.retry_budget_s:g}s)",
                        503,
                        rid,
                    )
            if ans.status in (401, 403) and message is not None:
                raise SandboxAuthError(ans.status, message, rid)
            if ans.status == 429 and message is not None:
                raise SandboxQuotaExceeded(f"POST {url}: HTTP 429: {message}", _retry_after(ans.retry_after), rid)
            if 400 <= ans.status < 500 and message is not None:
                raise SandboxRequestError(ans.status, message, rid)
            if 400 <= ans.status < 500:
                # A 4xx that is not the service's {"error": ...} comes from
                # something else at that address (a proxy, another program):
                # not the caller's fault, and not a sandbox.
                raise SandboxUnavailable(
                    f"POST {url}: HTTP {ans.status} that is not the sandbox service's answer: {_snippet(ans.body)}",
                    ans.status,
                    rid,
                )
            raise SandboxUnavailable(f"POST {url}: HTTP {ans.status}: {message or _snippet(ans.body)}", ans.status, rid)


def encode_files(files: FilesArg) -> List[Dict[str, str]]:
    """Turn run_python's files argument into the API's list of
    ``{"path", "content", "encoding"}``.

    A mapping of path to str (sent as text) or bytes (sent as base64), or
    a sequence of dicts already in the API's form.
    """
    out: List[Dict[str, str]] = []
    if isinstance(files, Mapping):
        for path, content in files.items():
            if not isinstance(path, str):
                raise TypeError(f"file path must be a str, not {type(path).__name__}")
            if isinstance(content, str):
                out.append({"path": path, "content": content})
            elif isinstance(content, (bytes, bytearray, memoryview)):
                out.append({"path": path, "content": base64.b64encode(bytes(content)).decode("ascii"), "encoding": "base64"})
            else:
                raise TypeError(f"file {path!r}: content must be str or bytes, not {type(content).__name__}")
        return out
    if isinstance(files, (str, bytes)) or not isinstance(files, Sequence):
        raise TypeError(f"files must be a mapping of path to content or a list of files, not {type(files).__name__}")
    for i, f in enumerate(files):
        if not isinstance(f, Mapping):
            raise TypeError(f"files[{i}] must be a mapping with path and content, not {type(f).__name__}")
        entry: Dict[str, str] = {}
        for key in ("path", "content", "encoding"):
            if key in f:
                if not isinstance(f[key], str):
                    raise TypeError(f"files[{i}].{key} must be a str, not {type(f[key]).__name__}")
                entry[key] = f[key]
        extra = set(f) - {"path", "content", "encoding"}
        if extra:
            raise TypeError(f"files[{i}]: unknown key(s) {sorted(extra)}: want path, content, encoding")
        out.append(entry)
    return out


def _outputs(outputs: Any) -> List[str]:
    if isinstance(outputs, (str, bytes)) or not isinstance(outputs, Sequence):
        raise TypeError(f"outputs must be a list of patterns such as ['*.png'], not {type(outputs).__name__}")
    for i, p in enumerate(outputs):
        if not isinstance(p, str):
            raise TypeError(f"outputs[{i}] must be a str, not {type(p).__name__}")
    return list(outputs)


def _timeout(t: Any) -> int:
    # A whole float (10.0) is whole seconds too: several SDKs and models
    # write every number as one.
    if isinstance(t, float) and t.is_integer():
        return int(t)
    if isinstance(t, bool) or not isinstance(t, int):
        raise TypeError(f"timeout_s must be a whole number of seconds, not {t!r}")
    return t


def _wait_s(timeout_s: Optional[int], default: int, maximum: int) -> int:
    """The run's timeout_s as the client waits for it: the default's when
    the request names none or one out of range. The service answers such a
    request at once with a 400 the caller must read, and a wait computed from
    it could be negative or too long for a timer."""
    if timeout_s is None or not 1 <= timeout_s <= maximum:
        return default
    return timeout_s


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP
    date), or None when there is none or it cannot be read."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    delay = when.timestamp() - time.time()
    return max(delay, 0.0) if math.isfinite(delay) else None


def _service_message(body: bytes) -> Optional[str]:
    """The service's ``{"error": "..."}`` message, or None when the body is
    not one."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if isinstance(obj, dict) and isinstance(obj.get("error"), str) and obj["error"]:
        return str(obj["error"])
    return None


def _stream_error(data: bytes) -> "Tuple[Optional[int], Optional[str]]":
    """The status and message of an error event's ``{"error", "status"}``."""
    try:
        obj = json.loads(data)
    except ValueError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    status, message = obj.get("status"), obj.get("error")
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        status = 502
    if not isinstance(message, str) or not message:
        return None, None
    return status, message


def _snippet(body: bytes, n: int = 200) -> str:
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return "empty answer"
    return repr(text if len(text) <= n else text[:n] + "…")
