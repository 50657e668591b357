"""@sandboxed against a stub of POST /v1/call: the service does not offer
it yet, so the stub answers as the API will (see docs/api.md)."""

from __future__ import annotations

import logging
import os
import unittest
from typing import Any, Dict, List, Tuple
from unittest import mock

from sandbox_client import (
    CallResult,
    RemoteToolError,
    SandboxUnavailable,
    ToolCallFailed,
    sandboxed,
    tools,
)

from . import sample_tools
from .servers import Reply, Stub, json_reply

TRACEBACK = 'Traceback (most recent call last):\n  File "/app/tools/weather.py", line 9, in get\nKeyError: \'Atlantis\'\n'


def answer(**fields: Any) -> Dict[str, Any]:
    a: Dict[str, Any] = {
        "sandbox_id": "tool-abc", "result": None, "stdout": "", "stderr": "", "exit_code": 0,
        "duration_ms": 812, "timed_out": False, "oom_killed": False,
    }
    a.update(fields)
    return a


class SandboxedTest(unittest.TestCase):
    def setUp(self) -> None:
        self.reply: Reply = json_reply(200, answer(result=5))
        self.stub = Stub(lambda path, body, n: self.reply)
        self.addCleanup(self.stub.stop)
        env = mock.patch.dict(os.environ, {"SANDBOX_URL": self.stub.url, "AGENT_IMAGE": "registry.example/agents/a:7"})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("TOOL_SANDBOX", None)
        sample_tools.CALLS.clear()

    def sent(self) -> List[Dict[str, Any]]:
        self.assertTrue(all(p == "/v1/call" for p, _ in self.stub.requests))
        return self.stub.bodies()

    def test_sends_the_function_arguments_and_image_and_returns_the_value(self) -> None:
        self.assertEqual(sample_tools.add(2, b=3), 5)
        self.assertEqual(
            self.sent(),
            [{"image": "registry.example/agents/a:7", "function": "tests.sample_tools:add", "args": [2], "kwargs": {"b": 3}}],
        )
        self.assertEqual(sample_tools.CALLS, [], "the tool ran in the agent's process")

    def test_decorator_parameters(self) -> None:
        self.reply = json_reply(200, answer(result={"city": "Oslo", "days": 2}))
        self.assertEqual(sample_tools.forecast("Oslo", days=2), {"city": "Oslo", "days": 2})
        self.assertEqual(
            self.sent(),
            [{"image": "registry.example/agents/weather:1.2", "function": "tests.sample_tools:forecast",
              "args": ["Oslo"], "kwargs": {"days": 2}, "timeout_s": 5, "env": {"UNITS": "metric"}}],
        )

    def test_staticmethod_in_a_class(self) -> None:
        sample_tools.Calc.mul(3, 4)
        self.assertEqual(self.sent()[0]["function"], "tests.sample_tools:Calc.mul")

    def test_the_wrapper_keeps_the_function(self) -> None:
        self.assertEqual(sample_tools.add.__name__, "add")
        self.assertEqual(sample_tools.add.__doc__, "Add two numbers.")
        self.assertEqual(sample_tools.add.sandbox_function, "tests.sample_tools:add")  # type: ignore[attr-defined]
        # What a pod calls: the function itself, not the wrapper again.
        self.assertEqual(sample_tools.add.__wrapped__(1, 1), 2)  # type: ignore[attr-defined]

    def test_none_is_a_value(self) -> None:
        self.reply = json_reply(200, answer(result=None))
        self.assertIsNone(sample_tools.add(1, 1))

    def test_the_tools_exception_is_raised_with_its_remote_traceback(self) -> None:
        self.reply = json_reply(200, answer(
            exit_code=1, stderr="looking up Atlantis\n",
            error={"type": "KeyError", "message": "'Atlantis'", "traceback": TRACEBACK},
        ))
        with self.assertRaises(RemoteToolError) as cm:
            sample_tools.forecast("Atlantis")
        e = cm.exception
        self.assertEqual((e.type, e.message, e.traceback), ("KeyError", "'Atlantis'", TRACEBACK))
        self.assertIn("KeyError: 'Atlantis'", str(e))
        self.assertIn('File "/app/tools/weather.py", line 9', str(e))
        self.assertIn("tool-abc", str(e))
        self.assertIsInstance(e.result, CallResult)
        self.assertEqual(e.result.stderr, "looking up Atlantis\n")
        self.assertNotIsInstance(e, SandboxUnavailable)
        self.assertEqual(sample_tools.CALLS, [])

    def test_a_call_that_did_not_finish(self) -> None:
        cases = {
            "timed out": (answer(exit_code=-1, timed_out=True, stderr="timed out after 5s"), "timed out"),
            "out of memory": (answer(exit_code=137, oom_killed=True), "out of memory"),
            "crashed": (answer(exit_code=2, stderr="python3: can't open file"), "exited with code 2"),
        }
        for name, (a, want) in cases.items():
            with self.subTest(name):
                self.reply = json_reply(200, a)
                with self.assertRaises(ToolCallFailed) as cm:
                    sample_tools.add(1, 2)
                self.assertNotIsInstance(cm.exception, RemoteToolError)
                self.assertIn(want, str(cm.exception))
        self.assertEqual(sample_tools.CALLS, [])

    def test_arguments_that_are_not_json_raise_before_anything_is_sent(self) -> None:
        cases: Dict[str, Tuple[Tuple[Any, ...], Dict[str, Any], str]] = {
            "an object": ((object(),), {}, "args[0]: a value of type object is not JSON-serialisable"),
            "bytes in kwargs": ((1,), {"b": b"\x00"}, "kwargs['b']: a value of type bytes"),
            "a set deep down": (([{"k": {1, 2}}],), {}, "args[0][0]['k']: a value of type set"),
            "a non-str key": (({1: "one"},), {}, "key 1 (int) is not a str"),
            "NaN": ((float("nan"),), {}, "no NaN"),
        }
        for name, (args, kwargs, want) in cases.items():
            with self.subTest(name):
                with self.assertRaises(TypeError) as cm:
                    sample_tools.collect(*args, **kwargs)
                self.assertIn(want, str(cm.exception))
        self.assertEqual(self.stub.requests, [])
        self.assertEqual(sample_tools.CALLS, [])

    def test_a_cycle_raises_before_anything_is_sent(self) -> None:
        loop: List[Any] = []
        loop.append(loop)
        with self.assertRaises(TypeError):
            sample_tools.collect(loop, 1)
        self.assertEqual(self.stub.requests, [])

    def test_tuples_arrive_as_lists(self) -> None:
        sample_tools.collect((1, 2), 3)
        self.assertEqual(self.sent()[0]["args"], [[1, 2], 3])

    def test_functions_a_pod_cannot_import_are_refused_when_decorated(self) -> None:
        def local() -> None:
            pass

        async def coro() -> None:
            pass

        main = lambda: None  # noqa: E731
        main.__module__ = "__main__"
        main.__qualname__ = "main"
        for name, f, want in [
            ("nested", local, "defined inside a function"),
            ("lambda", lambda: None, "defined inside a function or is a lambda"),
            ("__main__", main, "from __main__"),
            ("coroutine", coro, "coroutine"),
        ]:
            with self.subTest(name):
                with self.assertRaises(TypeError) as cm:
                    sandboxed(f)
                self.assertIn(want, str(cm.exception))


class InProcessTest(unittest.TestCase):
    """TOOL_SANDBOX=false runs the tool here, and says so once."""

    def setUp(self) -> None:
        self.stub = Stub(lambda path, body, n: json_reply(500, {"error": "must not be called"}))
        self.addCleanup(self.stub.stop)
        sample_tools.CALLS.clear()
        tools._warned = False
        self.addCleanup(setattr, tools, "_warned", False)

    def test_false_runs_in_process_and_warns_once(self) -> None:
        with mock.patch.dict(os.environ, {"TOOL_SANDBOX": "false", "SANDBOX_URL": self.stub.url}):
            with self.assertLogs("sandbox_client", level="WARNING") as logs:
                self.assertEqual(sample_tools.add(2, 3), 5)
                self.assertEqual(sample_tools.forecast("Oslo"), {"city": "Oslo", "days": 1})
                anything = object()  # no JSON check: it is a plain call
                self.assertIs(sample_tools.echo(anything)["echo"], anything)
        self.assertEqual(len(logs.records), 1, logs.output)
        self.assertEqual(logs.records[0].levelno, logging.WARNING)
        self.assertIn("TOOL_SANDBOX=false", logs.output[0])
        self.assertIn("in this process", logs.output[0])
        self.assertEqual(sample_tools.CALLS[:2], [("add", (2, 3)), ("forecast", ("Oslo", 1))])
        self.assertEqual(sample_tools.CALLS[2], ("echo", anything))
        self.assertEqual(self.stub.requests, [])

    def test_it_needs_no_sandbox_url(self) -> None:
        with mock.patch.dict(os.environ, {"TOOL_SANDBOX": "false"}):
            os.environ.pop("SANDBOX_URL", None)
            with self.assertLogs("sandbox_client", level="WARNING"):
                self.assertEqual(sample_tools.add(1, 1), 2)

    def test_anything_but_false_keeps_the_sandbox(self) -> None:
        for value in ("true", "1", "", "flase", "disabled"):
            with self.subTest(value):
                with mock.patch.dict(os.environ, {"TOOL_SANDBOX": value, "SANDBOX_URL": self.stub.url, "AGENT_IMAGE": "a:1"}):
                    with self.assertRaises(SandboxUnavailable):  # the stub's 500
                        sample_tools.add(1, 1)
        self.assertEqual(sample_tools.CALLS, [])

    def test_only_false_itself_turns_the_sandbox_off(self) -> None:
        # Failing closed: a value that may have meant "off" but is not the
        # documented one keeps the tools away from the agent's credentials.
        for value in ("False", "FALSE", " false", "false\n", "0", "no", "off", " OFF "):
            with self.subTest(value):
                with mock.patch.dict(os.environ, {"TOOL_SANDBOX": value, "SANDBOX_URL": self.stub.url, "AGENT_IMAGE": "a:1"}):
                    self.assertTrue(tools.tool_sandbox_enabled())
                    with self.assertRaises(SandboxUnavailable):  # the stub's 500
                        sample_tools.add(1, 1)
        self.assertEqual(sample_tools.CALLS, [])
        self.assertFalse(tools._warned)


if __name__ == "__main__":
    unittest.main()
