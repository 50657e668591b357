"""Every way the sandbox can be missing or broken raises SandboxUnavailable,
for run_python and for a @sandboxed tool, and never runs the code here.

Each failure is real: a port that refuses, a server that accepts and never
answers, one that trickles, and ones that answer garbage.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import threading
import time
import unittest
from typing import Callable, Dict, Optional
from unittest import mock
from urllib.parse import urlsplit

from sandbox_client import Client, SandboxRequestError, SandboxUnavailable, _transport, run_python
from sandbox_client.client import CALL_DEFAULT_TIMEOUT_S, CALL_OVERHEAD_S

from . import sample_tools
from .servers import RawServer, Reply, Stub, hang, json_reply, refuse_unread, refused_port, reset

# The service's limit on a request body: serve's --max-body default.
MAX_BODY = 1 << 20

# Clients with short limits, so that a hang costs the tests a second, not
# the production 45 s: the run's timeout_s of 1 plus 0.3 s.
FastClient = functools.partial(Client, overhead_s=0.3, retry_budget_s=1.5)

EXECUTE_OK = {
    "sandbox_id": "s-1", "stdout": "1\n", "stderr": "", "exit_code": 0, "duration_ms": 5,
    "stdout_truncated": False, "stderr_truncated": False, "timed_out": False, "oom_killed": False,
}
CALL_OK = {
    "sandbox_id": "t-1", "result": {"echo": 1}, "stdout": "", "stderr": "", "exit_code": 0, "duration_ms": 5,
    "timed_out": False, "oom_killed": False,
}


def ok_for(path: str) -> Dict[str, object]:
    return dict(EXECUTE_OK if path == "/v1/execute" else CALL_OK)


class FailClosedTest(unittest.TestCase):
    def setUp(self) -> None:
        for target in ("sandbox_client.snippets.Client", "sandbox_client.tools.Client"):
            p = mock.patch(target, FastClient)
            p.start()
            self.addCleanup(p.stop)
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("TOOL_SANDBOX", None)
        os.environ["AGENT_IMAGE"] = "registry.example/agents/test:1"
        sample_tools.CALLS.clear()

    def assert_fails_closed(self, url: Optional[str], reason: str, status: Optional[int] = None) -> None:
        """run_python and a @sandboxed tool at url (None: no SANDBOX_URL)
        both raise SandboxUnavailable naming reason, and the tool did not run here."""
        if url is None:
            os.environ.pop("SANDBOX_URL", None)
        else:
            os.environ["SANDBOX_URL"] = url
        calls: Dict[str, Callable[[], object]] = {
            "run_python": lambda: run_python("print(1)", timeout_s=1),
            "@sandboxed": lambda: sample_tools.echo(1),
        }
        for name, call in calls.items():
            with self.subTest(name):
                with self.assertRaises(SandboxUnavailable) as cm:
                    call()
                self.assertIn(reason, cm.exception.reason)
                self.assertEqual(cm.exception.status, status)
        self.assertEqual(sample_tools.CALLS, [], "a tool ran in-process after a failure")

    def stub(self, reply: Callable[[str, bytes, int], Reply]) -> Stub:
        s = Stub(reply)
        self.addCleanup(s.stop)
        return s

    def raw(self, handle: Callable[[socket.socket, threading.Event], None]) -> RawServer:
        s = RawServer(handle)
        self.addCleanup(s.stop)
        return s

    def test_no_sandbox_url(self) -> None:
        self.assert_fails_closed(None, "SANDBOX_URL is not set")

    def test_sandbox_url_not_http(self) -> None:
        self.assert_fails_closed("ftp://sandbox", "want http://host[:port]")

    def test_connection_refused(self) -> None:
        sock, url = refused_port()
        self.addCleanup(sock.close)
        self.assert_fails_closed(url, "connection refused")

    def test_server_accepts_and_never_answers(self) -> None:
        srv = self.raw(hang)
        start = time.monotonic()
        self.assert_fails_closed(srv.url, "no answer within 1.3s")
        elapsed = time.monotonic() - start
        # Two calls of 1.3 s each; nowhere near the production 45 s.
        self.assertGreater(elapsed, 2.5)
        self.assertLess(elapsed, 6)
        self.assertEqual(len(srv.received), 2)
        self.assertTrue(srv.received[0].startswith(b"POST /v1/execute "), srv.received[0][:40])
        self.assertTrue(srv.received[1].startswith(b"POST /v1/call "), srv.received[1][:40])

    def test_server_trickles_an_answer_that_never_ends(self) -> None:
        # Each read gets a byte well within any socket timeout: only a
        # deadline on the whole answer stops this. The server gives up after
        # 4 s, so that a client without that deadline fails the test rather
        # than hanging it.
        def trickle(conn: socket.socket, stopped: threading.Event) -> None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            end = time.monotonic() + 4
            while not stopped.wait(0.05) and time.monotonic() < end:
                conn.sendall(b" ")
            conn.close()

        start = time.monotonic()
        self.assert_fails_closed(self.raw(trickle).url, "no answer within 1.3s")
        self.assertLess(time.monotonic() - start, 4)

    def test_not_http_at_all(self) -> None:
        def ssh(conn: socket.socket, stopped: threading.Event) -> None:
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
            conn.close()

        self.assert_fails_closed(self.raw(ssh).url, "broken answer: BadStatusLine")

    def test_answer_cut_short(self) -> None:
        def cut(conn: socket.socket, stopped: threading.Event) -> None:
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"sandbox_id": "s-1", ')
            conn.close()

        self.assert_fails_closed(self.raw(cut).url, "broken answer: IncompleteRead")

    def test_200_that_is_not_json(self) -> None:
        srv = self.stub(lambda path, body, n: (200, {"Content-Type": "text/html"}, b"<html>It works!</html>"))
        self.assert_fails_closed(srv.url, "malformed answer: not JSON", 200)

    def test_200_json_that_is_not_an_object(self) -> None:
        srv = self.stub(lambda path, body, n: json_reply(200, ["stdout", "1"]))
        self.assert_fails_closed(srv.url, "the answer is a JSON array, not an object", 200)

    def test_200_without_a_field(self) -> None:
        def reply(path: str, body: bytes, n: int) -> Reply:
            obj = ok_for(path)
            del obj["exit_code"]
            return json_reply(200, obj)

        self.assert_fails_closed(self.stub(reply).url, 'field "exit_code" is missing', 200)

    def test_200_with_a_field_of_the_wrong_type(self) -> None:
        def reply(path: str, body: bytes, n: int) -> Reply:
            obj = ok_for(path)
            obj["timed_out"] = "false"
            return json_reply(200, obj)

        self.assert_fails_closed(self.stub(reply).url, 'field "timed_out" is a JSON string, want boolean', 200)

    def test_500(self) -> None:
        srv = self.stub(lambda path, body, n: json_reply(500, {"error": "backend exploded"}))
        self.assert_fails_closed(srv.url, "HTTP 500: backend exploded", 500)

    def test_502_from_a_proxy(self) -> None:
        srv = self.stub(lambda path, body, n: (502, {}, b""))
        self.assert_fails_closed(srv.url, "HTTP 502: empty answer", 502)

    def test_4xx_that_is_not_the_services(self) -> None:
        srv = self.stub(lambda path, body, n: (404, {"Content-Type": "text/html"}, b"<h1>Not Found</h1>"))
        self.assert_fails_closed(srv.url, "HTTP 404 that is not the sandbox service's answer", 404)

    def test_redirect_is_not_followed(self) -> None:
        elsewhere = self.stub(lambda path, body, n: json_reply(200, ok_for(path)))
        srv = self.stub(lambda path, body, n: (307, {"Location": elsewhere.url + path}, b""))
        self.assert_fails_closed(srv.url, "HTTP 307", 307)
        self.assertEqual(elsewhere.requests, [], "the code was sent where a redirect pointed")

    def test_503_without_retry_after_is_not_retried(self) -> None:
        srv = self.stub(lambda path, body, n: json_reply(503, {"error": "upstream down"}))
        self.assert_fails_closed(srv.url, "HTTP 503: upstream down", 503)
        self.assertEqual(len(srv.requests), 2)  # one per call

    def test_503_with_retry_after_that_never_ends(self) -> None:
        srv = self.stub(lambda path, body, n: json_reply(503, {"error": "no warm sandbox pod available"}, {"Retry-After": "1"}))
        start = time.monotonic()
        # Budget 1.5 s, Retry-After 1 s: a second try at 1 s, then a third
        # would start past the budget, so it gives up.
        self.assert_fails_closed(srv.url, "gave up after 2 attempt(s)", 503)
        self.assertEqual([p for p, _ in srv.requests], ["/v1/execute"] * 2 + ["/v1/call"] * 2)
        self.assertLess(time.monotonic() - start, 4)

    def test_no_image_for_a_tool(self) -> None:
        srv = self.stub(lambda path, body, n: json_reply(200, ok_for(path)))
        os.environ["SANDBOX_URL"] = srv.url
        del os.environ["AGENT_IMAGE"]
        with self.assertRaises(SandboxUnavailable) as cm:
            sample_tools.echo(1)
        self.assertIn("set AGENT_IMAGE", cm.exception.reason)
        self.assertEqual((srv.requests, sample_tools.CALLS), ([], []))

    def test_call_that_finished_without_a_result(self) -> None:
        def reply(path: str, body: bytes, n: int) -> Reply:
            obj = ok_for("/v1/call")
            del obj["result"]
            return json_reply(200, obj)

        os.environ["SANDBOX_URL"] = self.stub(reply).url
        with self.assertRaises(SandboxUnavailable) as cm:
            sample_tools.echo(1)
        self.assertIn('field "result" is missing', cm.exception.reason)
        self.assertEqual(sample_tools.CALLS, [])


class AgentEnvTest(unittest.TestCase):
    """A test against a stub service, with an agent image set, sandboxing
    on, and no tool calls recorded; the environment is restored after."""

    def setUp(self) -> None:
        env = mock.patch.dict(os.environ, {"AGENT_IMAGE": "agent:1"})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("TOOL_SANDBOX", None)
        sample_tools.CALLS.clear()


class RetryTest(AgentEnvTest):
    """A 503 with Retry-After is the service saying it is busy and ran
    nothing: it is retried within the budget."""

    def busy_once(self, retry_after: str) -> Stub:
        def reply(path: str, body: bytes, n: int) -> Reply:
            if n == 1:
                return json_reply(503, {"error": "no warm sandbox pod available, try again shortly"}, {"Retry-After": retry_after})
            return json_reply(200, ok_for(path))

        s = Stub(reply)
        self.addCleanup(s.stop)
        return s

    def test_execute_succeeds_on_the_second_try_after_waiting(self) -> None:
        srv = self.busy_once("1")
        start = time.monotonic()
        r = run_python("print(1)", client=Client(srv.url, retry_budget_s=5))
        elapsed = time.monotonic() - start
        self.assertEqual((r.sandbox_id, r.stdout), ("s-1", "1\n"))
        self.assertEqual(len(srv.requests), 2)
        self.assertEqual(srv.bodies()[0], srv.bodies()[1])  # the same request again
        self.assertGreaterEqual(elapsed, 1.0, "Retry-After was not honoured")
        self.assertLess(elapsed, 3)

    def test_tool_succeeds_on_the_second_try(self) -> None:
        srv = self.busy_once("0")
        os.environ["SANDBOX_URL"] = srv.url
        self.assertEqual(sample_tools.echo(1), {"echo": 1})
        self.assertEqual(len(srv.requests), 2)
        self.assertEqual(sample_tools.CALLS, [])

    def test_zero_budget_does_not_retry(self) -> None:
        srv = self.busy_once("0")
        with self.assertRaises(SandboxUnavailable) as cm:
            run_python("print(1)", client=Client(srv.url, retry_budget_s=0))
        self.assertIn("gave up after 1 attempt(s)", cm.exception.reason)
        self.assertEqual(len(srv.requests), 1)

    def test_http_date_retry_after(self) -> None:
        from email.utils import formatdate

        srv = self.busy_once(formatdate(time.time() + 1, usegmt=True))
        r = run_python("print(1)", client=Client(srv.url, retry_budget_s=5))
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(len(srv.requests), 2)


class RequestErrorTest(unittest.TestCase):
    """A 4xx with the service's {"error": ...} is the caller's mistake: a
    SandboxRequestError with the message, not SandboxUnavailable, and not
    retried."""

    def test_4xx_names_the_services_message(self) -> None:
        srv = Stub(lambda path, body, n: json_reply(403, {"error": 'image "evil:1" is not allowed by --tool-images'}))
        self.addCleanup(srv.stop)
        with mock.patch.dict(os.environ, {"SANDBOX_URL": srv.url, "AGENT_IMAGE": "evil:1"}):
            os.environ.pop("TOOL_SANDBOX", None)
            sample_tools.CALLS.clear()
            with self.assertRaises(SandboxRequestError) as cm:
                sample_tools.echo(1)
        self.assertEqual(cm.exception.status, 403)
        self.assertEqual(cm.exception.message, 'image "evil:1" is not allowed by --tool-images')
        self.assertNotIsInstance(cm.exception, SandboxUnavailable)
        self.assertEqual(len(srv.requests), 1)
        self.assertEqual(sample_tools.CALLS, [])
        self.assertEqual(json.loads(srv.requests[0][1])["image"], "evil:1")


def code_for_body(size: int) -> str:
    """Code whose run_python request body is size bytes."""
    return "#" * (size - len(json.dumps({"code": ""}, separators=(",", ":"))))


class BodyLimitTest(AgentEnvTest):
    """A body over the service's limit is the caller's mistake, as the
    service's 413 says, whether or not that 413 can be read: the service
    closes the connection on a body it will not read, and the client, still
    sending, may see only the reset."""

    def test_body_over_the_limit_is_refused_before_sending(self) -> None:
        srv = Stub(lambda path, body, n: json_reply(200, ok_for(path)))
        self.addCleanup(srv.stop)
        os.environ["SANDBOX_URL"] = srv.url
        with self.assertRaises(SandboxRequestError) as cm:
            run_python(code_for_body(MAX_BODY + 1))
        self.assertEqual(cm.exception.status, 413)
        self.assertIn(f"request body too large: {MAX_BODY + 1} bytes", cm.exception.message)
        self.assertIn(f"the limit is {MAX_BODY} bytes", cm.exception.message)
        with self.assertRaises(SandboxRequestError) as cm:
            sample_tools.collect("x" * MAX_BODY)
        self.assertEqual(cm.exception.status, 413)
        self.assertEqual((srv.requests, sample_tools.CALLS), ([], []))
        run_python(code_for_body(MAX_BODY))
        self.assertEqual([len(b) for _, b in srv.requests], [MAX_BODY])

    def test_reset_while_sending_is_413_only_for_a_body_over_the_limit(self) -> None:
        srv = RawServer(refuse_unread, read_body=False)
        self.addCleanup(srv.stop)
        body = json.dumps({"code": "#" * (8 << 20)}).encode()  # more than the socket buffers hold
        with self.assertRaises(SandboxRequestError) as cm:
            _transport.post(urlsplit(srv.url), "/v1/execute", body, 5, max_body=MAX_BODY)
        self.assertEqual(cm.exception.status, 413)
        self.assertIn(f"over the {MAX_BODY}-byte limit", cm.exception.message)
        with self.assertRaises(SandboxUnavailable) as cm2:
            _transport.post(urlsplit(srv.url), "/v1/execute", body, 5, max_body=len(body))
        self.assertRegex(cm2.exception.reason, "ConnectionResetError|BrokenPipeError")

    def test_reset_on_a_small_body_is_unavailable(self) -> None:
        srv = RawServer(reset)
        self.addCleanup(srv.stop)
        for call in (lambda: run_python("print(1)", client=Client(srv.url)),
                     lambda: _transport.post(urlsplit(srv.url), "/v1/execute", b'{"code":"1"}', 5, max_body=MAX_BODY)):
            with self.assertRaises(SandboxUnavailable) as cm:
                call()
            self.assertIn("ConnectionResetError", cm.exception.reason)


class TimeoutRangeTest(unittest.TestCase):
    """A timeout_s out of range goes to the service as it is, for its 400 to
    say so; the client's own wait for that answer stays a sane one."""

    def test_call_timeout_out_of_range_is_sent_as_is(self) -> None:
        def reply(path: str, body: bytes, n: int) -> Reply:
            t = json.loads(body)["timeout_s"]
            if 1 <= t <= 120:
                return json_reply(200, ok_for(path))
            return json_reply(400, {"error": f"timeout_s {t} out of range: must be from 1 to 120 seconds"})

        srv = Stub(reply)
        self.addCleanup(srv.stop)
        c = Client(srv.url)
        wrong = [-100, -45, 0, 121, 10**20]
        with mock.patch("sandbox_client._transport.post", wraps=_transport.post) as post:
            for t in wrong:
                with self.subTest(t):
                    with self.assertRaises(SandboxRequestError) as cm:
                        c.call("tests.sample_tools:add", [1, 2], image="agent:1", timeout_s=t)
                    self.assertEqual(cm.exception.status, 400)
                    self.assertIn("out of range", cm.exception.message)
                    self.assertEqual(post.call_args.args[3], CALL_DEFAULT_TIMEOUT_S + CALL_OVERHEAD_S)
            c.call("tests.sample_tools:add", [1, 2], image="agent:1", timeout_s=7)
            self.assertEqual(post.call_args.args[3], 7 + CALL_OVERHEAD_S)
        self.assertEqual([b["timeout_s"] for b in srv.bodies()], wrong + [7])


if __name__ == "__main__":
    unittest.main()
