"""Servers for the tests: the real `sandbox serve --backend local`, and stubs
that fail in each way the client must fail closed on."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]

# A reply of a stub: status, headers, body.
Reply = Tuple[int, Dict[str, str], bytes]


def json_reply(status: int, obj: object, headers: Optional[Dict[str, str]] = None) -> Reply:
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return status, h, json.dumps(obj).encode()


class SandboxServe:
    """The real service: `sandbox serve --backend local` on a port of its own.

    The binary is $SANDBOX_BIN (the Makefile passes the one it built), else
    one built here with `go build` from the repository root.
    """

    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="sandbox-client-test-")
        self.bin = os.environ.get("SANDBOX_BIN") or self._build()
        self.log_path = Path(self.tmp.name) / "serve.log"
        self._log = open(self.log_path, "wb")
        # Port 0 and the address read back from the log: no free port to
        # guess, so no race with another test taking it.
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--backend", "local", "--listen", "127.0.0.1:0", "--log-format", "json"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            self.url = "http://" + self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _build(self) -> str:
        go = shutil.which("go") or "/usr/local/go/bin/go"
        if not os.path.exists(go):
            # Not a skip: a test that cannot run must not pass.
            raise RuntimeError("no go toolchain to build sandbox: set SANDBOX_BIN to a built binary")
        out = os.path.join(self.tmp.name, "sandbox")
        subprocess.run([go, "build", "-o", out, "."], cwd=REPO, check=True)
        return out

    def _wait_ready(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        addr = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandbox serve exited with {self.proc.returncode}:\n{self.log()}")
            if addr is None:
                for line in self.log().splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("msg") == "serving":
                        addr = rec["addr"]
            if addr is not None:
                try:
                    with urllib.request.urlopen(f"http://{addr}/healthz", timeout=2) as r:
                        if r.status == 200:
                            return addr
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"sandbox serve not healthy within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.tmp.cleanup()


class Stub:
    """An HTTP server that answers every POST with reply(path, body, n),
    n counting the requests from 1, and records what it was sent: each
    request's path and body, and its Authorization header (None without)."""

    def __init__(self, reply: Callable[[str, bytes, int], Reply]) -> None:
        self.requests: List[Tuple[str, bytes]] = []
        self.authorization: List[Optional[str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                stub.authorization.append(self.headers.get("Authorization"))
                stub.requests.append((self.path, body))
                status, headers, data = reply(self.path, body, len(stub.requests))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep the test output to the tests

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def bodies(self) -> List[dict]:
        return [json.loads(b) for _, b in self.requests]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class RawServer:
    """A TCP server that hands each accepted connection to handle(conn) on a
    thread of its own, for answers no HTTP server would send: none at all, a
    trickle, garbage, a body cut short."""

    def __init__(self, handle: Callable[[socket.socket, threading.Event], None], read_body: bool = True) -> None:
        self.read_body = read_body
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.received: List[bytes] = []
        self.stopped = threading.Event()
        self._conns: List[socket.socket] = []
        self._threads: List[threading.Thread] = []
        self._handle = handle
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(0.5)
            self.received.append(read_request(conn, self.read_body))
            self._handle(conn, self.stopped)
        except OSError:
            pass  # the client gave up and closed: expected in these tests

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)


def read_request(conn: socket.socket, read_body: bool = True) -> bytes:
    """The whole request, headers and body. A server that closes with part
    of the request unread makes the kernel answer with a reset instead of an
    orderly close, and the client then sees "connection reset" instead of the
    answer the test sends; one recv is not enough when the client writes the
    body after the headers. With read_body false it stops after the headers,
    for the tests that want that reset."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        if not read_body:
            return data
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
        want = int(m.group(1)) if m else 0
        while len(body) < want:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
            data += chunk
    except OSError:
        pass
    return data


def refuse_unread(conn: socket.socket, stopped: threading.Event) -> None:
    """Answer 413 before the body is read, and close: what the service does
    with a body over its limit, so the client may see only the reset."""
    body = b'{"error":"request body too large: the limit is 1048576 bytes"}'
    conn.sendall(
        b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    conn.close()


def reset(conn: socket.socket, stopped: threading.Event) -> None:
    """Read the request and close with a reset instead of an answer."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def hang(conn: socket.socket, stopped: threading.Event) -> None:
    """Accept, read the request, and never answer (until the test ends)."""
    stopped.wait(30)


def refused_port() -> Tuple[socket.socket, str]:
    """A URL whose port refuses connections: bound, so nothing else takes it,
    but not listening, so the kernel answers a connect with a reset. The
    caller closes the socket."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, f"http://127.0.0.1:{s.getsockname()[1]}"
