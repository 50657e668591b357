"""AsyncClient: the client for asyncio agents.

Each request runs the synchronous client's exchange (the same transport, the
same retries, the same exceptions) in a worker thread, so that the event
loop is never blocked and the fail-closed behaviour is the synchronous
client's to the letter. Output comes back to the loop as it arrives.
Cancelling the awaiting task closes the request's connection, which ends the
run in the sandbox.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Optional, Sequence, Union

from ._transport import Abort
from .client import Client, FilesArg
from .results import CallResult, Result


@dataclass(frozen=True)
class OutputEvent:
    """A piece of a snippet's output, as it was written.

    Attributes:
        stream: ``"stdout"`` or ``"stderr"``.
        text: the new text. Concatenated, a stream's texts are the Result's
            ``stdout`` (``stderr``), truncation marker and timeout line
            included.
    """

    stream: str
    text: str


# An on_output callback of AsyncClient.run_python: a function, or a
# coroutine function, of the stream and the new text.
AsyncOnOutput = Callable[[str, str], Union[None, Awaitable[None]]]

_DONE = object()


class AsyncClient:
    """A client of the sandbox service for asyncio, with the arguments of
    Client (``url``, ``retry_budget_s``, ``overhead_s``, ``max_body``,
    ``token_file``) and its exceptions. Safe to share between tasks.

    Raises:
        SandboxUnavailable: no URL, or one that is not http(s)://host[:port].
    """

    def __init__(self, url: Optional[str] = None, **kwargs: Any) -> None:
        self._client = Client(url, **kwargs)

    @property
    def client(self) -> Client:
        """The synchronous Client underneath, with the same settings."""
        return self._client

    async def run_python(
        self,
        code: str,
        files: Optional[FilesArg] = None,
        timeout_s: Optional[int] = None,
        *,
        outputs: Optional[Sequence[str]] = None,
        on_output: Optional[AsyncOnOutput] = None,
    ) -> Result:
        """Run Python code in a fresh sandbox and return its Result: the
        synchronous ``run_python``'s arguments, exceptions and result.

        on_output, when given, is called on the event loop as the snippet
        writes, with the stream and the new text; a coroutine function is
        awaited, and the answer is not read meanwhile. An exception it
        raises ends the request, and the run, and is raised.
        """
        if on_output is None:
            return await self._in_thread(
                functools.partial(self._client.execute, code, files=files, timeout_s=timeout_s, outputs=outputs)
            )
        gen = self.stream_python(code, files, timeout_s, outputs=outputs)
        try:
            async for item in gen:
                if isinstance(item, Result):
                    return item
                ret = on_output(item.stream, item.text)
                if inspect.isawaitable(ret):
                    await ret
        finally:
            await gen.aclose()
        raise AssertionError("stream_python ended without a result")  # pragma: no cover

    async def stream_python(
        self,
        code: str,
        files: Optional[FilesArg] = None,
        timeout_s: Optional[int] = None,
        *,
        outputs: Optional[Sequence[str]] = None,
    ) -> AsyncIterator[Union[OutputEvent, Result]]:
        """Run Python code in a fresh sandbox, yielding its output as it
        comes (OutputEvent) and then its Result, the last item::

            async for item in client.stream_python(code):
                if isinstance(item, OutputEvent):
                    print(item.text, end="")
                else:
                    result = item

        Raises the synchronous client's exceptions, where the iteration
        stands when it fails (an error after the run began: after some
        output). Leaving the loop early, or cancelling the task, closes the
        connection, which ends the run.
        """
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[object]" = asyncio.Queue()
        abort = Abort()

        def on_output(stream: str, text: str) -> None:
            # From the worker thread; the loop runs these in order, and
            # before the future's own completion, scheduled after them.
            loop.call_soon_threadsafe(queue.put_nowait, OutputEvent(stream, text))

        fut = loop.run_in_executor(
            None,
            functools.partial(
                self._client.execute,
                code,
                files=files,
                timeout_s=timeout_s,
                outputs=outputs,
                on_output=on_output,
                abort=abort,
            ),
        )
        fut.add_done_callback(lambda _: queue.put_nowait(_DONE))
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                yield item  # type: ignore[misc]
            yield fut.result()
        finally:
            if not fut.done():
                abort.abort()

    async def call(
        self,
        function: str,
        args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        *,
        image: str,
        timeout_s: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> CallResult:
        """Run a tool function in a one-use pod of ``image``: Client.call's
        arguments, exceptions and result."""
        return await self._in_thread(
            functools.partial(
                self._client.call, function, args, kwargs, image=image, timeout_s=timeout_s, env=env
            )
        )

    async def _in_thread(self, fn: Callable[..., Any]) -> Any:
        """Run fn(abort=...) in a worker thread; cancelled, abort it."""
        abort = Abort()
        fut = asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, abort=abort))
        try:
            return await fut
        except asyncio.CancelledError:
            abort.abort()
            raise
