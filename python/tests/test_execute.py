"""run_python against the real service: `sandbox serve --backend local`."""

from __future__ import annotations

import base64
import json
import os
import tempfile
import unittest
import urllib.request
from typing import Any, Dict, Optional, Union
from unittest import mock

from sandbox_client import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES,
    Client,
    SandboxRequestError,
    handle_run_python,
    result_text,
    run_python,
    save_files,
)

from . import sample_tools
from .servers import SandboxServe

serve: Optional[SandboxServe] = None


def setUpModule() -> None:
    global serve
    serve = SandboxServe()


def tearDownModule() -> None:
    if serve is not None:
        serve.stop()


class RunPythonTest(unittest.TestCase):
    def setUp(self) -> None:
        assert serve is not None
        env = mock.patch.dict(os.environ, {"SANDBOX_URL": serve.url})
        env.start()
        self.addCleanup(env.stop)

    def test_stdout_stderr_exit_code_and_files(self) -> None:
        r = run_python(
            "import sys\n"
            "print(open('in.csv').read().upper(), end='')\n"
            "print(open('blob.bin', 'rb').read().hex())\n"
            "print('to stderr', file=sys.stderr)\n"
            "sys.exit(3)\n",
            files={"in.csv": "a,b\n", "blob.bin": b"\x00\xff\n"},
        )
        self.assertEqual(r.stdout, "A,B\n00ff0a\n")
        self.assertEqual(r.stderr, "to stderr\n")
        self.assertEqual(r.exit_code, 3)
        self.assertFalse(r.ok)
        self.assertFalse(r.timed_out or r.oom_killed or r.stdout_truncated or r.stderr_truncated)
        self.assertTrue(r.sandbox_id)

    def test_files_in_the_api_form(self) -> None:
        r = run_python("print(open('d/x').read())", files=[{"path": "d/x", "content": "aGk=", "encoding": "base64"}])
        self.assertEqual((r.stdout, r.exit_code), ("hi\n", 0))
        self.assertTrue(r.ok)

    def test_outputs_and_usage(self) -> None:
        r = run_python(
            "import os\n"
            "os.makedirs('out')\n"
            "open('out/r.csv', 'w').write('a,b\\n1,2\\n')\n"
            "open('chart.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(100))\n"
            "os.symlink('/etc/passwd', 'out/leak.csv')\n",
            outputs=["*.png", "out/*"],
        )
        self.assertTrue(r.ok, r)
        self.assertEqual([f.path for f in r.files], ["chart.png", "out/leak.csv", "out/r.csv"])
        png, leak, csv = r.files
        self.assertEqual((png.encoding, png.size, png.data()[:4]), ("base64", 108, b"\x89PNG"))
        self.assertEqual((csv.text(), csv.encoding), ("a,b\n1,2\n", "utf-8"))
        self.assertEqual((leak.skipped, leak.returned), ("symlink", False))
        with self.assertRaises(ValueError):
            leak.data()
        self.assertFalse(r.files_incomplete)
        assert r.usage is not None
        self.assertGreater(r.usage.cpu_ms, 0)
        self.assertGreater(r.usage.max_rss_kib, 1000)
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(save_files(r, d), ["chart.png", "out/r.csv"])
            with open(os.path.join(d, "out", "r.csv")) as f:
                self.assertEqual(f.read(), "a,b\n1,2\n")
            self.assertFalse(os.path.lexists(os.path.join(d, "out", "leak.csv")))

    def test_outputs_after_a_timeout(self) -> None:
        r = run_python("open('part.txt', 'w').write('so far')\nwhile True: pass", timeout_s=1, outputs=["*.txt"])
        self.assertTrue(r.timed_out)
        self.assertEqual([(f.path, f.text()) for f in r.files], [("part.txt", "so far")])

    def test_every_run_is_a_new_sandbox(self) -> None:
        ids = {run_python("pass").sandbox_id for _ in range(2)}
        self.assertEqual(len(ids), 2)

    def test_timeout_is_said_plainly(self) -> None:
        r = run_python("print('started', flush=True)\nwhile True: pass", timeout_s=1)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.exit_code, -1)
        text = result_text(r)
        self.assertIn("timed out", text.splitlines()[0])
        self.assertIn("exit code: -1", text)
        self.assertIn("stdout:\nstarted", text)

    def test_truncated_output_is_said_plainly(self) -> None:
        # 3 MiB against the service's 1 MiB per stream.
        r = run_python("import sys; sys.stdout.write('x' * (3 << 20))", timeout_s=30)
        self.assertTrue(r.stdout_truncated)
        text = result_text(r, max_chars=1000)
        self.assertIn("The stdout was longer than the sandbox keeps", text)
        self.assertLess(len(text), 2000)

    def test_bad_request_is_the_callers_error(self) -> None:
        with self.assertRaises(SandboxRequestError) as cm:
            run_python("print(1)", timeout_s=61)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("timeout_s", cm.exception.message)
        with self.assertRaises(SandboxRequestError) as cm:
            run_python("print(1)", files={"../escape": "x"})
        self.assertIn("..", cm.exception.message)
        with self.assertRaises(SandboxRequestError) as cm:
            run_python("print(1)", outputs=["../*"])
        self.assertIn("outputs[0]", cm.exception.message)

    def test_timeout_out_of_range_is_the_callers_error(self) -> None:
        for t in (-100, -45, -44, 0, 61, 10**20):
            with self.subTest(t):
                with self.assertRaises(SandboxRequestError) as cm:
                    run_python("print(1)", timeout_s=t)
                self.assertEqual(cm.exception.status, 400)
                self.assertIn("timeout_s", cm.exception.message)

    def test_body_at_the_limit_runs_and_one_byte_more_is_the_callers_error(self) -> None:
        # The service's limit, serve's --max-body default: the client and the
        # service must agree on which side of it a body is.
        limit = 1 << 20
        pad = len(json.dumps({"code": ""}, separators=(",", ":")))
        self.assertEqual(run_python("#" * (limit - pad)).exit_code, 0)
        with self.assertRaises(SandboxRequestError) as cm:
            run_python("#" * (limit - pad + 1))
        self.assertEqual(cm.exception.status, 413)

    def test_wrong_argument_types_raise_before_sending(self) -> None:
        with self.assertRaises(TypeError):
            run_python(b"print(1)")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            run_python("print(1)", timeout_s=1.5)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            run_python("print(1)", files={"a": 1})  # type: ignore[dict-item]
        with self.assertRaises(TypeError):
            run_python("print(1)", outputs="*.png")
        with self.assertRaises(TypeError):
            run_python("print(1)", outputs=[1])  # type: ignore[list-item]

    def test_explicit_client_ignores_the_environment(self) -> None:
        assert serve is not None
        with mock.patch.dict(os.environ, {"SANDBOX_URL": "http://127.0.0.1:1"}):
            r = run_python("print(7)", client=Client(serve.url))
        self.assertEqual(r.stdout, "7\n")


# A PNG's signature and a few bytes: the sandbox hands back bytes, and only
# the signature makes it an image to show.
PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
WRITE_PNGS = "for n in range({n}):\n    open(f'c{{n}}.png', 'wb').write({png!r} + bytes({pad}))\n"


class ImagesTest(unittest.TestCase):
    """Charts the model sees: images among the outputs as content blocks."""

    def setUp(self) -> None:
        assert serve is not None
        self.client = Client(serve.url)

    def test_anthropic_image_blocks(self) -> None:
        code = WRITE_PNGS.format(n=1, png=PNG, pad=0) + "open('t.txt', 'w').write('hi')\n"
        blocks = handle_run_python({"code": code, "outputs": ["*"]}, client=self.client)
        self.assertIsInstance(blocks, list)
        self.assertEqual(blocks[0]["type"], "text")
        self.assertIn("- c0.png: 32 bytes, returned; an image, shown to you after this text", blocks[0]["text"])
        self.assertIn("- t.txt: 2 bytes, returned; its text:\nhi", blocks[0]["text"])
        self.assertEqual(blocks[1:], [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}}])

    def test_openai_image_parts(self) -> None:
        args = json.dumps({"code": WRITE_PNGS.format(n=1, png=PNG, pad=0), "outputs": ["*.png"]})
        blocks = handle_run_python(args, client=self.client)
        self.assertEqual(blocks[1:], [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}])
        self.assertEqual(handle_run_python(args, client=self.client, tool_format="anthropic")[1]["type"], "image")

    def test_images_are_bounded(self) -> None:
        many = handle_run_python({"code": WRITE_PNGS.format(n=MAX_IMAGES + 2, png=PNG, pad=0), "outputs": ["*.png"]},
                                 client=self.client)
        self.assertEqual(len(many), 1 + MAX_IMAGES)
        self.assertEqual(many[0]["text"].count("an image, not shown to you"), 2)
        big = handle_run_python({"code": WRITE_PNGS.format(n=1, png=PNG, pad=MAX_IMAGE_BYTES), "outputs": ["*.png"]},
                                client=self.client)
        self.assertIsInstance(big, str)
        self.assertIn("an image, not shown to you", big)

    def test_no_image_is_still_text(self) -> None:
        text = handle_run_python({"code": "open('b.bin', 'wb').write(bytes(3))", "outputs": ["*"]}, client=self.client)
        self.assertIsInstance(text, str)
        self.assertIn("- b.bin: 3 bytes, returned", text)


class HandleRunPythonTest(unittest.TestCase):
    """The model's side: a tool call in, the text to read back out."""

    def setUp(self) -> None:
        assert serve is not None
        self.client = Client(serve.url)

    def test_openai_style_json_arguments(self) -> None:
        text = handle_run_python(json.dumps({"code": "print(6*7)"}), client=self.client)
        self.assertEqual(text, "exit code: 0\nstdout:\n42\nstderr: (empty)")

    def test_anthropic_style_dict_with_files(self) -> None:
        text = handle_run_python(
            {"code": "print(open('n.txt').read().strip())", "timeout_s": 5, "files": [{"path": "n.txt", "content": "5"}]},
            client=self.client,
        )
        self.assertIn("stdout:\n5", text)

    def test_outputs_are_saved_and_named(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            text = handle_run_python(
                {"code": "open('a.txt', 'w').write('hello')\nopen('b.bin', 'wb').write(bytes(3))", "outputs": ["*"]},
                client=self.client,
                save_dir=d,
            )
            self.assertIn(f"files (saved under {d}):\n- a.txt: 5 bytes, returned; its text:\nhello\n- b.bin: 3 bytes, returned", text)
            with open(os.path.join(d, "b.bin"), "rb") as f:
                self.assertEqual(f.read(), bytes(3))

    def test_strict_mode_nulls_and_whole_float_timeouts(self) -> None:
        # What a model in OpenAI's strict mode sends: every argument, null
        # when unused, and numbers that may be floats.
        args = {"code": "print(open('n.txt').read())", "timeout_s": 10.0, "outputs": None,
                "files": [{"path": "n.txt", "content": "5", "encoding": None}]}
        text = handle_run_python(json.dumps(args), client=self.client)
        self.assertEqual(text, "exit code: 0\nstdout:\n5\nstderr: (empty)")
        self.assertEqual(run_python("print(1)", timeout_s=10.0, client=self.client).stdout, "1\n")
        self.assertTrue(handle_run_python({"code": "1", "timeout_s": 2.5}, client=self.client).startswith("error: "))

    def test_service_takes_a_whole_float_timeout(self) -> None:
        assert serve is not None
        req = urllib.request.Request(serve.url + "/v1/execute", data=b'{"code": "print(3)", "timeout_s": 10.0}',
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            self.assertEqual(json.load(resp)["stdout"], "3\n")

    def test_model_mistakes_come_back_as_text(self) -> None:
        cases: Dict[str, Union[str, Dict[str, Any]]] = {
            "not JSON": "{code:",
            "no code": {"timeout_s": 3},
            "unknown argument": {"code": "1", "cmd": "ls"},
            "refused by the service": {"code": "1", "files": [{"path": "/etc/x", "content": ""}]},
            "timeout out of range": {"code": "1", "timeout_s": 0},
            "output outside": {"code": "1", "outputs": ["/etc/*"]},
            "outputs not a list": {"code": "1", "outputs": "*.png"},
        }
        for name, args in cases.items():
            with self.subTest(name):
                text = handle_run_python(args, client=self.client)
                self.assertTrue(text.startswith("error: "), text)
                self.assertIn("nothing ran", text)

    def test_body_over_the_limit_comes_back_as_text(self) -> None:
        # The service answers 413 and closes while a large body is still
        # being sent; the model must read that as a mistake to correct, not
        # have the agent stop as if there were no sandbox.
        for size in (1048577, 2 << 20, 5 << 20):
            with self.subTest(size):
                text = handle_run_python(
                    {"code": "print(len(open('big.txt').read()))", "files": [{"path": "big.txt", "content": "x" * size}]},
                    client=self.client,
                )
                self.assertTrue(text.startswith("error: "), text)
                self.assertIn("nothing ran", text)
                self.assertIn("too large", text)

    def test_timeout_out_of_range_comes_back_as_text(self) -> None:
        cases: Dict[str, Union[str, Dict[str, Any]]] = {
            "-100": {"code": "print(1)", "timeout_s": -100},
            "-45": {"code": "print(1)", "timeout_s": -45},
            "10**20": {"code": "print(1)", "timeout_s": 10**20},
            "1e999 in JSON": '{"code": "print(1)", "timeout_s": 1e999}',
            "NaN in JSON": '{"code": "print(1)", "timeout_s": NaN}',
        }
        for name, args in cases.items():
            with self.subTest(name):
                text = handle_run_python(args, client=self.client)
                self.assertTrue(text.startswith("error: "), text)
                self.assertIn("timeout_s", text)
                self.assertIn("nothing ran", text)


class CallOnTheRealServiceTest(unittest.TestCase):
    """/v1/call is not built yet (it answers 404): a decorated tool raises
    the service's 4xx and does not run here."""

    def test_not_built_yet_is_a_request_error(self) -> None:
        assert serve is not None
        sample_tools.CALLS.clear()
        with mock.patch.dict(os.environ, {"SANDBOX_URL": serve.url, "AGENT_IMAGE": "agent:dev", "TOOL_SANDBOX": "true"}):
            with self.assertRaises(SandboxRequestError) as cm:
                sample_tools.add(1, 2)
        self.assertEqual(cm.exception.status, 404)
        self.assertEqual(sample_tools.CALLS, [])


if __name__ == "__main__":
    unittest.main()
