"""One HTTP POST with a deadline on the whole exchange.

http.client rather than urllib.request: urllib follows redirects and honours
HTTP(S)_PROXY, and neither belongs between an agent and its sandbox (a
redirect or a proxy would send the code and the tool's arguments somewhere
else). A socket timeout alone bounds each read, not the answer: a server
that sends a byte a second would hold the caller forever, so a timer shuts
the socket down at the deadline whatever phase the exchange is in.
"""

from __future__ import annotations

import http.client
import socket
import threading
from dataclasses import dataclass
from typing import List, Optional
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
    """An HTTP answer: its status, Retry-After and X-Request-Id headers and body."""

    status: int
    retry_after: Optional[str]
    request_id: Optional[str]
    body: bytes


def post(
    base: SplitResult,
    path: str,
    body: bytes,
    timeout: float,
    max_body: Optional[int] = None,
    token: Optional[str] = None,
) -> Answer:
    """POST body as JSON to base + path, with token as its bearer token when
    there is one, and return the answer.

    Every failure to get a whole answer within timeout seconds is raised as
    SandboxUnavailable naming the URL and what happened, except that a body
    over max_body, when the connection breaks before the answer, is raised
    as SandboxRequestError 413.
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
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes a blocked read on another thread
            except OSError:
                pass

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        # Kept here because conn drops its own reference once the answer
        # says the connection will close, while the answer still reads from it.
        if conn.sock is not None:
            sock_holder.append(conn.sock)
        if expired.is_set():
            raise socket.timeout()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
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
    except Exception as e:  # every other way the exchange can break: classified below
        raise SandboxUnavailable(f"POST {url}: {_describe(e, expired.is_set(), timeout)}") from e
    finally:
        timer.cancel()
        conn.close()


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
