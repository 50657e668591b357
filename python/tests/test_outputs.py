"""Output files: parsed strictly, written to disk without leaving the directory."""

from __future__ import annotations

import os
import tempfile
import unittest
from typing import Any, Dict

from sandbox_client import OutputFile, Result, result_text, save_files
from sandbox_client.results import MalformedAnswer


def answer(**extra: Any) -> Dict[str, Any]:
    base: Dict[str, Any] = dict(
        sandbox_id="s", stdout="", stderr="", exit_code=0, duration_ms=1,
        stdout_truncated=False, stderr_truncated=False, timed_out=False, oom_killed=False,
    )
    base.update(extra)
    return base


def text_file(path: str, content: str) -> Dict[str, Any]:
    return {"path": path, "size": len(content.encode()), "content": content, "encoding": "utf-8"}


class ParseTest(unittest.TestCase):
    def test_files_usage_and_their_absence(self) -> None:
        r = Result.from_json(answer(
            files=[
                text_file("a.csv", "x\n"),
                {"path": "b.png", "size": 2, "content": "AP8=", "encoding": "base64"},
                {"path": "big", "size": 1 << 30, "omitted": True},
                {"path": "leak", "skipped": "symlink"},
            ],
            files_incomplete=True,
            usage={"cpu_ms": 5, "max_rss_kib": 9000, "processes": 1},
        ))
        self.assertEqual([f.path for f in r.files], ["a.csv", "b.png", "big", "leak"])
        self.assertEqual(r.files[1].data(), b"\x00\xff")
        self.assertEqual((r.files[2].omitted, r.files[2].size, r.files[2].returned), (True, 1 << 30, False))
        self.assertEqual(r.files[3].skipped, "symlink")
        self.assertTrue(r.files_incomplete)
        self.assertEqual(r.usage and r.usage.max_rss_kib, 9000)
        old = Result.from_json(answer())
        self.assertEqual((old.files, old.files_incomplete, old.usage), ((), False, None))

    def test_malformed_files_are_refused(self) -> None:
        for name, files in {
            "not a list": {"path": "a"},
            "path leaving": [text_file("../x", "")],
            "absolute path": [text_file("/etc/x", "")],
            "dot component": [text_file("a/./b", "")],
            "empty path": [text_file("", "")],
            "bad encoding": [{"path": "a", "size": 1, "content": "x", "encoding": "rot13"}],
            "bad base64": [{"path": "a", "size": 1, "content": "!!", "encoding": "base64"}],
            "no content": [{"path": "a", "size": 1, "encoding": "utf-8"}],
            "size not a number": [{"path": "a", "size": "1", "content": "x", "encoding": "utf-8"}],
        }.items():
            with self.subTest(name), self.assertRaises(MalformedAnswer):
                Result.from_json(answer(files=files))
        with self.assertRaises(MalformedAnswer):
            Result.from_json(answer(usage={"cpu_ms": "5", "max_rss_kib": 1, "processes": 1}))


class SaveFilesTest(unittest.TestCase):
    def test_never_outside_never_through_a_link(self) -> None:
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as outside:
            victim = os.path.join(outside, "victim")
            with open(victim, "w") as f:
                f.write("precious")
            os.symlink(victim, os.path.join(d, "link.txt"))
            os.symlink(outside, os.path.join(d, "sub"))
            os.link(victim, os.path.join(d, "hard.txt"))
            # The control: a naive write goes through the symlink.
            with tempfile.TemporaryDirectory() as ctl, tempfile.TemporaryDirectory() as ctl_out:
                target = os.path.join(ctl_out, "v")
                os.symlink(target, os.path.join(ctl, "link.txt"))
                with open(os.path.join(ctl, "link.txt"), "w") as f:
                    f.write("through")
                self.assertTrue(os.path.exists(target), "control: the naive write did not go through")

            saved = save_files([OutputFile("link.txt", 1, "a", "utf-8"), OutputFile("hard.txt", 1, "b", "utf-8")], d)
            self.assertEqual(saved, ["link.txt", "hard.txt"])
            with self.assertRaises(OSError):
                save_files([OutputFile("sub/victim", 1, "c", "utf-8")], d)
            with open(victim) as f:
                self.assertEqual(f.read(), "precious")
            self.assertFalse(os.path.islink(os.path.join(d, "link.txt")))
            with self.assertRaises(ValueError):
                save_files([OutputFile("../escape", 1, "x", "utf-8")], d)
            self.assertFalse(os.path.exists(os.path.join(os.path.dirname(d), "escape")))
            self.assertEqual(sorted(os.listdir(d)), ["hard.txt", "link.txt", "sub"])


class FilesTextTest(unittest.TestCase):
    def test_files_are_named_with_why(self) -> None:
        r = Result.from_json(answer(files=[
            text_file("r.csv", "a\n1\n"),
            {"path": "c.png", "size": 2, "content": "AP8=", "encoding": "base64"},
            {"path": "big.csv", "size": 20 << 20, "omitted": True},
            {"path": "leak", "skipped": "symlink"},
        ], files_incomplete=True))
        text = result_text(r)
        self.assertIn(
            "files:\n- r.csv: 4 bytes, returned; its text:\na\n1\n- c.png: 2 bytes, returned\n"
            "- big.csv: 20971520 bytes, not returned: over the limit of 100 files and 10 MiB in all\n"
            "- leak: not returned (symlink)\nSome matching files were not returned", text)


if __name__ == "__main__":
    unittest.main()
