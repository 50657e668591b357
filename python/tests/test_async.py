"""Streamed output and the asyncio client: against the real service
(`sandbox serve --backend local`), and against stubs for each way a streamed
answer can fail, which must fail closed as the synchronous client does."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import sys
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from sandbox_client import (
    AsyncClient,
    Client,
    OutputEvent,
    Result,
    SandboxAuthError,
    SandboxQuotaExceeded,
    SandboxRequestError,
    SandboxUnavailable,
    run_python,
)

from .servers import RawServer, Reply, SandboxServe, Stub, hang, json_reply, refused_port

serve: Optional[SandboxServe] = None


def setUpModule() -> None:
    global serve
    serve = SandboxServe()


def tearDownModule() -> None:
    if serve is not None:
        serve.stop()


PRINT_SLEEP_PRINT = "import sys, time\nprint('one', flush=True)\nprint('e', file=sys.stderr, flush=True)\ntime.sleep(1)\nprint('two')\n"


def processes_with(marker: str) -> List[int]:
    """The processes whose command line holds marker (the tests run as
    root beside serve, so they see the runs' processes)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if marker.encode() in (p / "cmdline").read_bytes():
                pids.append(int(p.name))
        except OSError:
            pass
    return pids


def wait_gone(test: unittest.TestCase, marker: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while processes_with(marker):
        if time.monotonic() > deadline:
            test.fail(f"{within}s after the client went away, the run's processes {processes_with(marker)} live on")
        time.sleep(0.05)


async def wait_gone_async(test: unittest.TestCase, marker: str, within: float = 10.0) -> None:
    """wait_gone on the event loop, before it ends: asyncio.run waits for
    its worker threads, and so for a run that was not ended, to its timeout."""
    deadline = time.monotonic() + within
    while processes_with(marker):
        if time.monotonic() > deadline:
            test.fail(f"{within}s after the task was cancelled, the run's processes {processes_with(marker)} live on")
        await asyncio.sleep(0.05)


def child_code(marker: str) -> str:
    """A snippet that starts a child marked with marker, says so, and waits."""
    return (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'])\n"
        "print('started', flush=True)\ntime.sleep(300)\n"
    )


class StreamTest(unittest.TestCase):
    """Against the real service."""

    def setUp(self) -> None:
        assert serve is not None
        self.url = serve.url

    def test_sync_on_output_comes_as_printed(self) -> None:
        got: List[Tuple[float, str, str]] = []
        r = run_python(PRINT_SLEEP_PRINT, client=Client(self.url), on_output=lambda s, t: got.append((time.monotonic(), s, t)))
        ended = time.monotonic()
        self.assertEqual((r.stdout, r.stderr), ("one\ntwo\n", "e\n"))
        self.assertTrue(got)
        self.assertGreater(ended - got[0][0], 0.8, "the first output came no sooner than the result")
        self.assertEqual("".join(t for _, s, t in got if s == "stdout"), r.stdout)
        self.assertEqual("".join(t for _, s, t in got if s == "stderr"), r.stderr)

    def test_stream_python_yields_output_then_the_result(self) -> None:
        async def main() -> Tuple[List[Any], List[float]]:
            items, times = [], []
            async for item in AsyncClient(self.url).stream_python(PRINT_SLEEP_PRINT):
                items.append(item)
                times.append(time.monotonic())
            return items, times

        items, times = asyncio.run(main())
        result = items[-1]
        self.assertIsInstance(result, Result)
        events = items[:-1]
        self.assertTrue(events and all(isinstance(e, OutputEvent) for e in events), items)
        self.assertGreater(times[-1] - times[0], 0.8)
        self.assertEqual("".join(e.text for e in events if e.stream == "stdout"), result.stdout)
        self.assertEqual(result.stdout, "one\ntwo\n")

    def test_async_run_python_and_its_on_output(self) -> None:
        async def main() -> Tuple[Result, Result, List[str]]:
            c = AsyncClient(self.url)
            plain = await c.run_python("import sys\nprint(6*7)\nsys.exit(3)")
            seen: List[str] = []

            async def on_output(stream: str, text: str) -> None:
                await asyncio.sleep(0)
                seen.append(stream)
                seen.append(text)

            streamed = await c.run_python("print(6*7)", on_output=on_output)
            return plain, streamed, seen

        plain, streamed, seen = asyncio.run(main())
        self.assertEqual((plain.stdout, plain.exit_code), ("42\n", 3))
        self.assertEqual((streamed.stdout, streamed.exit_code), ("42\n", 0))
        self.assertEqual(set(seen[0::2]), {"stdout"})
        self.assertEqual("".join(seen[1::2]), "42\n")

    def test_tasks_run_at_once(self) -> None:
        # Three runs of a second each, on one event loop: together well
        # under three seconds, so the loop is never blocked.
        async def main() -> List[Result]:
            c = AsyncClient(self.url)
            return await asyncio.gather(*(c.run_python("import time; time.sleep(1); print('ok')") for _ in range(3)))

        start = time.monotonic()
        results = asyncio.run(main())
        self.assertEqual([r.stdout for r in results], ["ok\n"] * 3)
        self.assertLess(time.monotonic() - start, 2.9)

    def test_cancelling_the_task_ends_the_run(self) -> None:
        marker = f"sandbox-async-cancel-{time.time_ns()}"

        async def main() -> None:
            started = asyncio.Event()

            def on_output(stream: str, text: str) -> None:
                if text.startswith("started"):
                    started.set()

            task = asyncio.ensure_future(AsyncClient(self.url).run_python(child_code(marker), timeout_s=60, on_output=on_output))
            await asyncio.wait_for(started.wait(), 20)
            deadline = time.monotonic() + 5
            while not processes_with(marker):
                self.assertLess(time.monotonic(), deadline, "the snippet's child is not running: the test would prove nothing")
                await asyncio.sleep(0.05)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await wait_gone_async(self, marker)

        asyncio.run(main())

    def test_cancelling_a_plain_run_ends_it(self) -> None:
        marker = f"sandbox-async-plain-{time.time_ns()}"

        async def main() -> None:
            task = asyncio.ensure_future(AsyncClient(self.url).run_python(child_code(marker), timeout_s=60))
            deadline = time.monotonic() + 20
            while not processes_with(marker):
                self.assertLess(time.monotonic(), deadline, "the snippet's child never ran")
                await asyncio.sleep(0.05)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await wait_gone_async(self, marker)

        asyncio.run(main())

    def test_leaving_the_stream_early_ends_the_run(self) -> None:
        marker = f"sandbox-async-break-{time.time_ns()}"

        async def main() -> None:
            gen = AsyncClient(self.url).stream_python(child_code(marker), timeout_s=60)
            async for item in gen:
                self.assertIsInstance(item, OutputEvent)
                break
            await gen.aclose()
            await wait_gone_async(self, marker)

        asyncio.run(main())

    def test_a_callback_that_raises_ends_the_run(self) -> None:
        marker = f"sandbox-sync-raise-{time.time_ns()}"

        def on_output(stream: str, text: str) -> None:
            raise KeyError("the agent's own bug")

        with self.assertRaises(KeyError):
            run_python(child_code(marker), timeout_s=60, client=Client(self.url), on_output=on_output)
        wait_gone(self, marker)


# A streamed answer of events: (name, data) pairs.
def sse(*events: Tuple[str, str]) -> Callable[[str, bytes, int], Reply]:
    body = "".join(f"event: {n}\ndata: {d}\n\n" for n, d in events).encode()
    return lambda path, b, n: (200, {"Content-Type": "text/event-stream", "X-Request-Id": "req-9"}, body)


RESULT = json.dumps({"sandbox_id": "s-1", "stdout": "a", "stderr": "", "exit_code": 0, "duration_ms": 5,
                     "stdout_truncated": False, "stderr_truncated": False, "timed_out": False, "oom_killed": False})


class AsyncFailClosedTest(unittest.TestCase):
    """Each failure raises the synchronous client's exception, through
    run_python with on_output, AsyncClient.run_python (with and without
    on_output) and AsyncClient.stream_python."""

    def entry_points(self, url: str, streamed: bool = False) -> Dict[str, Callable[[], object]]:
        """The ways to run a snippet; with streamed, only those that ask
        for events (a stub that sends events unasked is no service)."""
        client = functools.partial(Client, url, overhead_s=0.3, retry_budget_s=1.5)
        aclient = functools.partial(AsyncClient, url, overhead_s=0.3, retry_budget_s=1.5)

        async def drain() -> object:
            last = None
            async for item in aclient().stream_python("x", timeout_s=1):
                last = item
            return last

        calls: Dict[str, Callable[[], object]] = {
            "run_python(on_output)": lambda: run_python("x", timeout_s=1, client=client(), on_output=lambda s, t: None),
            "AsyncClient.run_python(on_output)": lambda: asyncio.run(
                aclient().run_python("x", timeout_s=1, on_output=lambda s, t: None)
            ),
            "AsyncClient.stream_python": lambda: asyncio.run(drain()),
        }
        if not streamed:
            calls["AsyncClient.run_python"] = lambda: asyncio.run(aclient().run_python("x", timeout_s=1))
        return calls

    def assert_raises_everywhere(
        self, url: str, exc: type, text: str, status: Optional[int] = None, streamed: bool = False
    ) -> None:
        for name, call in self.entry_points(url, streamed).items():
            with self.subTest(name):
                with self.assertRaises(exc) as cm:
                    call()
                self.assertIn(text, str(cm.exception))
                if status is not None:
                    self.assertEqual(getattr(cm.exception, "status", None), status)

    def stub(self, reply: Callable[[str, bytes, int], Reply]) -> Stub:
        s = Stub(reply)
        self.addCleanup(s.stop)
        return s

    def test_streamed_result(self) -> None:
        srv = self.stub(sse(("stdout", '"a"'), ("progress", "{}"), ("result", RESULT)))
        for name, call in self.entry_points(srv.url, streamed=True).items():
            with self.subTest(name):
                r = call()
                self.assertIsInstance(r, Result)
                self.assertEqual(r.stdout, "a")  # type: ignore[attr-defined]

    def test_the_client_asks_for_events_only_when_streaming(self) -> None:
        srv = self.stub(lambda p, b, n: json_reply(200, json.loads(RESULT)))
        got: List[str] = []
        r = run_python("x", client=Client(srv.url), on_output=lambda s, t: got.append(s + ":" + t))
        # A service that does not stream: the output, whole, at the end.
        self.assertEqual((r.stdout, got), ("a", ["stdout:a"]))
        Client(srv.url).execute("x")

    def test_connection_refused(self) -> None:
        sock, url = refused_port()
        self.addCleanup(sock.close)
        self.assert_raises_everywhere(url, SandboxUnavailable, "connection refused")

    def test_no_answer_in_time(self) -> None:
        srv = RawServer(hang)
        self.addCleanup(srv.stop)
        self.assert_raises_everywhere(srv.url, SandboxUnavailable, "no answer within 1.3s")

    def test_events_that_never_end(self) -> None:
        def trickle(conn: socket.socket, stopped: threading.Event) -> None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            end = time.monotonic() + 4
            while not stopped.wait(0.05) and time.monotonic() < end:
                conn.sendall(b'event: stdout\ndata: "."\n\n')
            conn.close()

        srv = RawServer(trickle)
        self.addCleanup(srv.stop)
        start = time.monotonic()
        self.assert_raises_everywhere(srv.url, SandboxUnavailable, "no answer within 1.3s", streamed=True)
        self.assertLess(time.monotonic() - start, 3 * 4)

    def test_error_event_after_the_run_began(self) -> None:
        srv = self.stub(sse(("stdout", '"a"'), ("error", '{"error":"sandbox pod p died during the run: Evicted","status":502}')))
        self.assert_raises_everywhere(srv.url, SandboxUnavailable, "HTTP 502 after the run began: sandbox pod p died", 502, streamed=True)

    def test_error_event_that_is_not_one(self) -> None:
        srv = self.stub(sse(("error", '"nope"')))
        self.assert_raises_everywhere(srv.url, SandboxUnavailable, "malformed answer", streamed=True)

    def test_stream_ends_before_its_result(self) -> None:
        srv = self.stub(sse(("stdout", '"a"')))
        self.assert_raises_everywhere(srv.url, SandboxUnavailable, "ended before its result", streamed=True)

    def test_output_event_that_is_not_a_string(self) -> None:
        srv = self.stub(sse(("stdout", "{}"), ("result", RESULT)))
        self.assert_raises_everywhere(srv.url, SandboxUnavailable, "malformed answer", streamed=True)

    def test_result_that_is_not_one(self) -> None:
        srv = self.stub(sse(("result", '{"stdout": 1}')))
        self.assert_raises_everywhere(srv.url, SandboxUnavailable, "malformed answer", streamed=True)

    def test_refusals_before_the_run(self) -> None:
        cases = [
            (400, {"error": "timeout_s 99 out of range"}, {}, SandboxRequestError, "timeout_s 99"),
            (401, {"error": "token expired"}, {}, SandboxAuthError, "token expired"),
            (429, {"error": "over quota"}, {"Retry-After": "3"}, SandboxQuotaExceeded, "over quota"),
            (500, {"error": "boom"}, {}, SandboxUnavailable, "HTTP 500: boom"),
            (503, {"error": "busy"}, {}, SandboxUnavailable, "HTTP 503: busy"),
        ]
        for status, body, headers, exc, text in cases:
            with self.subTest(status):
                srv = self.stub(lambda p, b, n, s=status, o=body, h=headers: json_reply(s, o, h))
                self.assert_raises_everywhere(srv.url, exc, text)

    def test_503_with_retry_after_is_retried(self) -> None:
        def reply(path: str, body: bytes, n: int) -> Reply:
            if n % 2 == 1:
                return json_reply(503, {"error": "no warm sandbox"}, {"Retry-After": "0"})
            return sse(("stdout", '"a"'), ("result", RESULT))(path, body, n)

        srv = self.stub(reply)
        for name, call in self.entry_points(srv.url, streamed=True).items():
            with self.subTest(name):
                self.assertEqual(call().stdout, "a")  # type: ignore[attr-defined]

    def test_call(self) -> None:
        ok = {"sandbox_id": "t-1", "result": {"echo": 1}, "stdout": "", "stderr": "", "exit_code": 0, "duration_ms": 5,
              "timed_out": False, "oom_killed": False}
        srv = self.stub(lambda p, b, n: json_reply(200, ok) if p == "/v1/call" else json_reply(404, {"error": "no"}))
        r = asyncio.run(AsyncClient(srv.url).call("tools.x:f", [1], image="img:1"))
        self.assertEqual(r.value(), {"echo": 1})
        bad = self.stub(lambda p, b, n: json_reply(403, {"error": "system:serviceaccount:agents:a may not call img:1"}))
        with self.assertRaises(SandboxAuthError):
            asyncio.run(AsyncClient(bad.url).call("tools.x:f", image="img:1"))


if __name__ == "__main__":
    unittest.main()
