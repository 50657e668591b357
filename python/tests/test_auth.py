"""The bearer token: read from its file for each request, never shown, and
the service's 401, 403 and 429 raised as errors that are never retried."""

from __future__ import annotations

import logging
import os
import tempfile
import unittest
from pathlib import Path
from typing import Optional
from unittest import mock

from sandbox_client import (
    Client,
    SandboxAuthError,
    SandboxQuotaExceeded,
    SandboxRequestError,
    SandboxUnavailable,
    handle_run_python,
    run_python,
)

from . import sample_tools
from .servers import Reply, Stub, json_reply
from .test_fail_closed import CALL_OK, EXECUTE_OK, ok_for

SECRET = "eyJhbGciOiJSUzI1NiJ9.secret-claims.signature"


class TokenTest(unittest.TestCase):
    """A stub that admits only the token written last to the file."""

    def setUp(self) -> None:
        env = mock.patch.dict(os.environ, {"AGENT_IMAGE": "agent:1"})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("SANDBOX_TOKEN_FILE", None)
        os.environ.pop("TOOL_SANDBOX", None)
        sample_tools.CALLS.clear()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.token = self.dir / "token"
        # The default file, moved here: absent unless a test writes it.
        self.default = self.dir / "default-token"
        p = mock.patch("sandbox_client._token.DEFAULT_TOKEN_FILE", str(self.default))
        p.start()
        self.addCleanup(p.stop)
        self.admitted: Optional[str] = None

        def reply(path: str, body: bytes, n: int) -> Reply:
            if self.srv.authorization[n - 1] != f"Bearer {self.admitted}":
                return json_reply(401, {"error": "token expired"}, {"X-Request-Id": f"req-{n}"})
            return json_reply(200, dict(ok_for(path), request_id=f"req-{n}"), {"X-Request-Id": f"req-{n}"})

        self.srv = Stub(reply)
        self.addCleanup(self.srv.stop)
        os.environ["SANDBOX_URL"] = self.srv.url

    def rotate(self, path: Path, token: str) -> None:
        path.write_text(token + "\n")
        self.admitted = token

    def test_token_file_is_read_for_each_request(self) -> None:
        os.environ["SANDBOX_TOKEN_FILE"] = str(self.token)
        client = Client()  # one client, as a long-running agent keeps it
        self.rotate(self.token, "tok-1")
        r1 = run_python("print(1)", client=client)
        self.rotate(self.token, "tok-2")  # the kubelet rotated it
        r2 = run_python("print(1)", client=client)
        self.assertEqual(sample_tools.echo(1), {"echo": 1})
        self.assertEqual(self.srv.authorization, ["Bearer tok-1", "Bearer tok-2", "Bearer tok-2"])
        self.assertEqual((r1.request_id, r2.request_id), ("req-1", "req-2"))

    def test_client_argument_names_the_file(self) -> None:
        self.rotate(self.token, "tok-arg")
        run_python("print(1)", client=Client(token_file=str(self.token)))
        self.assertEqual(self.srv.authorization, ["Bearer tok-arg"])

    def test_default_file_when_present(self) -> None:
        self.rotate(self.default, "tok-default")
        run_python("print(1)")
        self.assertEqual(self.srv.authorization, ["Bearer tok-default"])

    def test_no_header_without_the_default_file(self) -> None:
        with self.assertRaises(SandboxAuthError):
            run_python("print(1)")
        self.assertEqual(self.srv.authorization, [None])

    def test_named_file_that_cannot_be_used_fails_closed_before_sending(self) -> None:
        for name, content, reason in [
            ("missing", None, "no such file"),
            ("empty", " \n", "empty"),
            ("two-words", f"{SECRET} {SECRET}", "not a bearer token"),
            ("newline-inside", f"{SECRET}\n{SECRET}", "not a bearer token"),
            ("too-big", "s" * (65 << 10), "over 65536 bytes"),
        ]:
            with self.subTest(name):
                path = self.dir / name
                if content is not None:
                    path.write_text(content)
                os.environ["SANDBOX_TOKEN_FILE"] = str(path)
                for call in (lambda: run_python("print(1)"), lambda: sample_tools.echo(1)):
                    with self.assertRaises(SandboxUnavailable) as cm:
                        call()
                    self.assertIn(f"sandbox token file {path}: {reason}", str(cm.exception))
                    self.assertNotIn("secret", str(cm.exception))
        self.assertEqual((self.srv.requests, sample_tools.CALLS), ([], []))

    def test_token_is_never_shown(self) -> None:
        os.environ["SANDBOX_TOKEN_FILE"] = str(self.token)
        self.token.write_text(SECRET)
        client = Client()
        with self.assertLogs("sandbox_client", logging.DEBUG) as logs:
            logging.getLogger("sandbox_client").debug("start")
            with self.assertRaises(SandboxAuthError) as cm:
                run_python("print(1)", client=client)
        self.assertEqual(self.srv.authorization, [f"Bearer {SECRET}"])
        for shown in (str(cm.exception), repr(cm.exception), repr(client), repr(vars(client)), "\n".join(logs.output)):
            self.assertNotIn("secret", shown)


class RefusedTest(unittest.TestCase):
    """401, 403 and 429 from the service: raised once, never retried, never
    handed to the model as something it could fix."""

    def setUp(self) -> None:
        env = mock.patch.dict(os.environ, {"AGENT_IMAGE": "agent:1"})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("SANDBOX_TOKEN_FILE", None)
        os.environ.pop("TOOL_SANDBOX", None)
        sample_tools.CALLS.clear()

    def refusing(self, status: int, error: str, retry_after: Optional[str] = None) -> Stub:
        headers = {"X-Request-Id": "req-9"}
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        srv = Stub(lambda path, body, n: json_reply(status, {"error": error}, headers))
        self.addCleanup(srv.stop)
        os.environ["SANDBOX_URL"] = srv.url
        return srv

    def test_401_and_403(self) -> None:
        for status, error in [
            (401, "token has expired"),
            (403, "system:serviceaccount:agents:bot may not run snippets"),
        ]:
            with self.subTest(status):
                srv = self.refusing(status, error)
                for call in (
                    lambda: run_python("print(1)"),
                    lambda: handle_run_python({"code": "print(1)"}),
                    lambda: sample_tools.echo(1),
                ):
                    with self.assertRaises(SandboxAuthError) as cm:
                        call()
                    e = cm.exception
                    self.assertIsInstance(e, SandboxRequestError)
                    self.assertEqual((e.status, e.message, e.request_id), (status, error, "req-9"))
                    self.assertIn(error, str(e))
                self.assertEqual(len(srv.requests), 3)
        self.assertEqual(sample_tools.CALLS, [])

    def test_429(self) -> None:
        srv = self.refusing(429, "over 4 requests in flight", retry_after="7")
        for call in (
            lambda: run_python("print(1)", client=Client(retry_budget_s=60)),
            lambda: handle_run_python({"code": "print(1)"}),
            lambda: sample_tools.echo(1),
        ):
            with self.assertRaises(SandboxQuotaExceeded) as cm:
                call()
            e = cm.exception
            self.assertIsInstance(e, SandboxUnavailable)
            self.assertEqual((e.status, e.retry_after, e.request_id), (429, 7.0, "req-9"))
            self.assertIn("HTTP 429: over 4 requests in flight", e.reason)
        self.assertEqual(len(srv.requests), 3)
        self.assertEqual(sample_tools.CALLS, [])

    def test_other_4xx_still_goes_to_the_model(self) -> None:
        self.refusing(400, "timeout_s 99 out of range")
        text = handle_run_python({"code": "print(1)"})
        self.assertEqual(text, "error: the sandbox refused the call, nothing ran: timeout_s 99 out of range")

    def test_request_id_of_a_result(self) -> None:
        answers = {
            "with": dict(CALL_OK, request_id="req-c"),
            "without": CALL_OK,  # an older service
            "wrong": dict(EXECUTE_OK, request_id=5),
        }
        srv = Stub(lambda path, body, n: json_reply(200, answers[path.split("/")[1]]))
        self.addCleanup(srv.stop)
        self.assertEqual(Client(srv.url + "/with").call("m:f", image="a").request_id, "req-c")
        self.assertIsNone(Client(srv.url + "/without").call("m:f", image="a").request_id)
        with self.assertRaises(SandboxUnavailable) as cm:
            Client(srv.url + "/wrong").execute("print(1)")
        self.assertIn('field "request_id" is a JSON number, want string', cm.exception.reason)


if __name__ == "__main__":
    unittest.main()
