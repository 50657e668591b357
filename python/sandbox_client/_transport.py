"""One HTTP POST with a deadline on the whole exchange.

http.client rather than urllib.request: urllib follows redirects and honours
HTTP(S)_PROXY, and neither belongs between an agent and its sandbox (a
redirect or a proxy would send the code and the tool's arguments somewhere
else). A socket timeout alone bounds each read, not the answer: a server
that sends a byte a second would hold the caller forever, so a timer shuts
the socket down at the deadline whatever phase the exchange is in.

Asked to stream (on_output), it asks for server-sent events and hands each
piece of output on as it arrives; an Abort ends such an exchange, or any
other, from another thread (the asyncio client cancelling a task).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple
from urllib.parse import SplitResult

from .errors import SandboxRequestError, SandboxUnavailable

# MAX_ANSWER bounds how much of an answer is read (64 MiB): a /v1/call answer
# is at most 8 MiB and a snippet's two streams of 1 MiB fit many times over
# even with JSON's worst escaping, while a broken or hostile server cannot
# make the agent buffer without end.
MAX_ANSWER = 64 << 20

_USER_AGENT = "sandbox-client-python"


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: its status, Retry-After and X-Request-Id headers and body.

    A streamed answer's body is the data of its last event, which event
    names: "result" or "error" ("" for a plain answer).
    """

    status: int
    retry_after: Optional[str]
    request_id: Optional[str]
    body: bytes
    event: str = ""


# An output callback: the stream ("stdout" or "stderr") and the new text.
OnOutput = Callable[[str, str], None]

EVENT_STREAM = "text/event-stream"


class Abort:
    """Ends an exchange in flight from another thread: abort() shuts its
    socket down, which wakes a blocked read, and post raises
    SandboxUnavailable. An exchange that starts after abort() ends at once.
    The service sees the connection close, which ends a run in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self.aborted = threading.Event()

    def abort(self) -> None:
        with self._lock:
            self.aborted.set()
            for s in self._socks:
                _shutdown(s)

    def _watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.aborted.is_set():
                _shutdown(sock)

    def wait(self, delay: float) -> bool:
        """Sleep for delay seconds, or less if aborted; report whether it was."""
        return self.aborted.wait(delay)


def _shutdown(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)  # wakes a blocked read on another thread
    except OSError:
        pass


class _CallbackFailed(Exception):
    """The caller's own on_output raised: its exception goes to the caller
    as it is, not as a failure of the exchange."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def post(
    base: SplitResult,
    path: str,
    body: bytes,
    timeout: float,
    max_body: Optional[int] = None,
    token: Optional[str] = None,
    on_output: Optional[OnOutput] = None,
    abort: Optional[Abort] = None,
) -> Answer:
    """POST body as JSON to base + path, with token as its bearer token when
    there is one, and return the answer.

    Every failure to get a whole answer within timeout seconds is raised as
    SandboxUnavailable naming the URL and what happened, except that a body
    over max_body, when the connection breaks before the answer, is raised
    as SandboxRequestError 413.

    With on_output it asks for server-sent events: each stdout and stderr
    event goes to on_output as it arrives, and the answer is the last event
    (Answer.event). A service that answers plainly gives a plain Answer. An
    exception on_output raises ends the exchange and is raised as it is.
    """
    url = base.scheme + "://" + base.netloc + base.path.rstrip("/") + path
    host = base.hostname or ""
    conn: http.client.HTTPConnection
    if base.scheme == "https":
        conn = http.client.HTTPSConnection(host, base.port, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(host, base.port, timeout=timeout)

    expired = threading.Event()
    sock_holder: List[socket.socket] = []

    def expire() -> None:
        expired.set()
        for s in sock_holder:
            _shutdown(s)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        # Kept here because conn drops its own reference once the answer
        # says the connection will close, while the answer still reads from it.
        if conn.sock is not None:
            sock_holder.append(conn.sock)
            if abort is not None:
                abort._watch(conn.sock)
        if expired.is_set():
            raise socket.timeout()
        if abort is not None and abort.aborted.is_set():
            raise _Aborted()
        headers = {
            "Content-Type": "application/json",
            "Accept": EVENT_STREAM if on_output is not None else "application/json",
            "User-Agent": _USER_AGENT,
            "Connection": "close",
        }
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        try:
            conn.request("POST", base.path.rstrip("/") + path, body=body, headers=headers)
            resp = conn.getresponse()
        except (ConnectionResetError, BrokenPipeError) as e:
            # The service answers 413 to a body over its limit and closes
            # without reading it, and the rest of the body, still coming,
            # turns that close into a reset that loses the 413. Only for such
            # a body is the reset that answer; on any other it is a failure.
            if max_body is not None and len(body) > max_body and not expired.is_set():
                raise SandboxRequestError(
                    413,
                    f"request body too large: {len(body)} bytes, over the {max_body}-byte limit "
                    f"(the service closed the connection while it was sent: {type(e).__name__})",
                ) from e
            raise
        ctype = (resp.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if on_output is not None and resp.status == 200 and ctype == EVENT_STREAM:
            event, data = _read_events(resp, on_output, url, expired, abort)
            if expired.is_set():
                raise socket.timeout()
            return Answer(resp.status, resp.getheader("Retry-After"), resp.getheader("X-Request-Id"), data, event)
        length = resp.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > MAX_ANSWER:
            raise SandboxUnavailable(f"POST {url}: answer of {length} bytes is over the {MAX_ANSWER}-byte limit", resp.status)
        if resp.length is not None:
            # Without an amount, read raises IncompleteRead on a body cut
            # short; with one it returns the part quietly.
            data = resp.read()
        else:
            data = resp.read(MAX_ANSWER + 1)
        if expired.is_set():
            # The shutdown may read as a short or empty body rather than an error.
            raise socket.timeout()
        if len(data) > MAX_ANSWER:
            raise SandboxUnavailable(f"POST {url}: answer over the {MAX_ANSWER}-byte limit", resp.status)
        return Answer(resp.status, resp.getheader("Retry-After"), resp.getheader("X-Request-Id"), data)
    except (SandboxUnavailable, SandboxRequestError):
        raise
    except _CallbackFailed as e:
        raise e.error from None
    except Exception as e:  # every other way the exchange can break: classified below
        if abort is not None and abort.aborted.is_set() and not expired.is_set():
            raise SandboxUnavailable(f"POST {url}: cancelled: the connection was closed, which ends the run") from None
        raise SandboxUnavailable(f"POST {url}: {_describe(e, expired.is_set(), timeout)}") from e
    finally:
        timer.cancel()
        conn.close()


class _Aborted(Exception):
    pass


def _read_events(
    resp: http.client.HTTPResponse, on_output: OnOutput, url: str, expired: threading.Event, abort: Optional[Abort]
) -> Tuple[str, bytes]:
    """Read server-sent events to the answer's last (result or error) and
    return its name and data, handing stdout and stderr on as they come.
    The events, all told, are at most MAX_ANSWER bytes. The end of the
    answer (the socket shut down, at the deadline or by abort, reads as
    one too) before that last event is a failure."""
    buf = b""
    total = 0
    name, data = "", b""
    while True:
        nl = buf.find(b"\n")
        if nl < 0:
            chunk = resp.read1(65536)
            if not chunk:
                if expired.is_set():
                    raise socket.timeout()
                if abort is not None and abort.aborted.is_set():
                    raise _Aborted()
                raise SandboxUnavailable(f"POST {url}: broken answer: it ended before its result", 200)
            total += len(chunk)
            if total > MAX_ANSWER:
                raise SandboxUnavailable(f"POST {url}: answer over the {MAX_ANSWER}-byte limit", 200)
            buf += chunk
            continue
        line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1 :]
        if line.startswith(b":"):
            continue
        if line:
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"event":
                name = value.decode("utf-8", "replace")
            elif field == b"data":
                data = data + b"\n" + value if data else value
            continue
        if not name and not data:
            continue  # blank lines between events
        if name in ("result", "error"):
            return name, data
        if name in ("stdout", "stderr"):
            try:
                text = json.loads(data)
            except ValueError:
                text = None
            if not isinstance(text, str):
                raise SandboxUnavailable(f"POST {url}: malformed answer: a {name} event that is not a string", 200)
            try:
                on_output(name, text)
            except Exception as e:
                raise _CallbackFailed(e) from e
        # An event of another name is for a newer client: skipped.
        name, data = "", b""


def _describe(e: BaseException, expired: bool, timeout: float) -> str:
    if expired or isinstance(e, (socket.timeout, TimeoutError)):
        return f"no answer within {timeout:g}s (the code may have run there; it did not run here)"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused: no sandbox service listens there"
    if isinstance(e, socket.gaierror):
        return f"cannot resolve the host: {e}"
    if isinstance(e, http.client.HTTPException):
        return f"broken answer: {type(e).__name__}: {e}"
    if isinstance(e, OSError):
        return f"{type(e).__name__}: {e}"
    return f"unexpected {type(e).__name__}: {e}"
