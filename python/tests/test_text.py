"""What a model reads back, and the tool definitions it is given."""

from __future__ import annotations

import json
import unittest

from sandbox_client import (
    RUN_PYTHON_PARAMETERS,
    RUN_PYTHON_PARAMETERS_STRICT,
    RUN_PYTHON_TOOL,
    RUN_PYTHON_TOOL_OPENAI,
    Result,
    result_text,
)


def result(**fields: object) -> Result:
    base = dict(
        sandbox_id="s", stdout="", stderr="", exit_code=0, duration_ms=1,
        stdout_truncated=False, stderr_truncated=False, timed_out=False, oom_killed=False,
    )
    base.update(fields)
    return Result(**base)  # type: ignore[arg-type]


class ResultTextTest(unittest.TestCase):
    def test_plain_run(self) -> None:
        self.assertEqual(
            result_text(result(stdout="42\n", stderr="warning: x\n")),
            "exit code: 0\nstdout:\n42\nstderr:\nwarning: x",
        )

    def test_each_failure_is_said_first_and_plainly(self) -> None:
        cases = {
            "timed out": (result(timed_out=True, exit_code=-1, stderr="timed out after 20s"), "The code timed out"),
            "oom": (result(oom_killed=True, exit_code=137), "The code ran out of memory and was killed."),
            "stdout cut": (result(stdout_truncated=True, stdout="a…b"), "The stdout was longer than the sandbox keeps"),
            "stderr cut": (result(stderr_truncated=True, stderr="a…b"), "The stderr was longer than the sandbox keeps"),
        }
        for name, (r, want) in cases.items():
            with self.subTest(name):
                text = result_text(r)
                self.assertTrue(text.startswith(want), text)
                self.assertIn(f"exit code: {r.exit_code}", text)

    def test_a_clean_run_mentions_no_failure(self) -> None:
        text = result_text(result(stdout="ok\n"))
        for word in ("timed out", "memory", "longer than"):
            self.assertNotIn(word, text)

    def test_long_output_is_clipped_head_and_tail(self) -> None:
        text = result_text(result(stdout="A" * 50 + "B" * 50), max_chars=20)
        self.assertIn("A" * 10 + "\n[... 80 characters cut here", text)
        self.assertIn("cut here to keep this short ...]\n" + "B" * 10, text)
        self.assertNotIn("A" * 11, text)
        self.assertIn("stdout:\n" + "A" * 50 + "B" * 50 + "\n", result_text(result(stdout="A" * 50 + "B" * 50), max_chars=None))


class ToolDefinitionTest(unittest.TestCase):
    def test_shapes_an_sdk_takes(self) -> None:
        self.assertEqual(set(RUN_PYTHON_TOOL), {"name", "description", "input_schema"})
        self.assertEqual(RUN_PYTHON_TOOL_OPENAI["type"], "function")
        self.assertEqual(set(RUN_PYTHON_TOOL_OPENAI["function"]), {"name", "description", "parameters", "strict"})
        for tool in (RUN_PYTHON_TOOL, RUN_PYTHON_TOOL_OPENAI["function"]):
            self.assertEqual(tool["name"], "run_python")
            json.dumps(tool)  # sent to the model's API as JSON

    def test_schema_matches_the_api(self) -> None:
        s = RUN_PYTHON_PARAMETERS
        self.assertEqual((s["type"], s["required"], s["additionalProperties"]), ("object", ["code"], False))
        self.assertEqual(set(s["properties"]), {"code", "timeout_s", "files", "outputs"})
        self.assertEqual(s["properties"]["outputs"]["items"], {"type": "string"})
        self.assertEqual((s["properties"]["timeout_s"]["minimum"], s["properties"]["timeout_s"]["maximum"]), (1, 60))
        item = s["properties"]["files"]["items"]
        self.assertEqual(set(item["properties"]), {"path", "content", "encoding"})
        self.assertEqual(item["properties"]["encoding"]["enum"], ["utf-8", "base64"])

    def test_openai_tool_is_strict(self) -> None:
        # Strict mode takes a schema only when every object lists all its
        # properties as required, allows no others, and bounds nothing in
        # keywords; an optional property is nullable instead.
        self.assertIs(RUN_PYTHON_TOOL_OPENAI["function"]["strict"], True)
        s = RUN_PYTHON_TOOL_OPENAI["function"]["parameters"]
        self.assertIs(s, RUN_PYTHON_PARAMETERS_STRICT)

        def check(schema: dict, where: str) -> None:
            self.assertNotIn("minimum", schema, where)
            self.assertNotIn("maximum", schema, where)
            if "object" in schema["type"]:
                self.assertEqual(schema["required"], list(schema["properties"]), where)
                self.assertIs(schema["additionalProperties"], False, where)
                for k, v in schema["properties"].items():
                    check(v, f"{where}.{k}")
            if "array" in schema["type"]:
                check(schema["items"], f"{where}[]")

        check(s, "parameters")
        self.assertEqual(s["properties"]["code"]["type"], "string")
        self.assertEqual(s["properties"]["timeout_s"]["type"], ["integer", "null"])
        self.assertIn("From 1 to 60", s["properties"]["timeout_s"]["description"])
        self.assertEqual(s["properties"]["outputs"]["type"], ["array", "null"])
        enc = s["properties"]["files"]["items"]["properties"]["encoding"]
        self.assertEqual((enc["type"], enc["enum"]), (["string", "null"], ["utf-8", "base64", None]))
        # The Anthropic tool's schema is left as it was.
        self.assertEqual(RUN_PYTHON_PARAMETERS["required"], ["code"])
        json.dumps(RUN_PYTHON_TOOL_OPENAI)


if __name__ == "__main__":
    unittest.main()
