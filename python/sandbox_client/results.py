"""The answers of the service, parsed strictly.

An answer that lacks a field, or has one of the wrong type, is refused as
malformed rather than filled in with a default: a result made up on this
side would be passed off as what the sandbox said. Fields the service adds
later are ignored, so a newer service still works with this client.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Type

from .errors import RemoteToolError, ToolCallFailed


class MalformedAnswer(ValueError):
    """An answer that is not what the API promises (internal: the client
    turns it into SandboxUnavailable)."""


@dataclass(frozen=True)
class Usage:
    """What a run's processes used, as the kernel counted it.

    Attributes:
        cpu_ms: user and system CPU time of all its processes.
        max_rss_kib: peak resident memory of its largest process.
        processes: processes and threads it started; 0 where the service
            cannot count them (its local backend).
    """

    cpu_ms: int
    max_rss_kib: int
    processes: int

    @classmethod
    def from_json(cls, obj: Any) -> Usage:
        o = _object(obj, "usage")
        return cls(**{name: _field(o, name, int, "usage.") for name in ("cpu_ms", "max_rss_kib", "processes")})


@dataclass(frozen=True)
class OutputFile:
    """A file of the sandbox's working directory that matched ``outputs``.

    Either it came back (``data()`` gives its bytes, ``text()`` its text),
    or it was ``omitted`` (over the service's bounds: 100 files, 10 MiB in
    all; ``size`` says how big it is), or ``skipped`` (not a regular file of
    the run's, such as a symlink or a FIFO, never read: the reason).

    Attributes:
        path: relative to the working directory, "/"-separated; never
            absolute and never with a ".." component (an answer with one is
            refused as malformed).
        size: its size in bytes (0 when skipped).
        content: as sent: the text, or base64 when ``encoding`` is "base64";
            None when omitted or skipped.
        encoding: "utf-8" or "base64"; None when omitted or skipped.
        omitted: it matched, but the bounds had no room for it.
        skipped: why a match was not read ("symlink", "fifo", ...), or None.
    """

    path: str
    size: int
    content: Optional[str] = None
    encoding: Optional[str] = None
    omitted: bool = False
    skipped: Optional[str] = None

    @property
    def returned(self) -> bool:
        """True when the file's content came back."""
        return self.content is not None

    def data(self) -> bytes:
        """The file's bytes; ValueError when it did not come back."""
        if self.content is None:
            why = f"omitted ({self.size} bytes, over the bounds)" if self.omitted else f"skipped ({self.skipped})"
            raise ValueError(f"{self.path}: {why}")
        if self.encoding == "base64":
            return base64.b64decode(self.content, validate=True)
        return self.content.encode("utf-8")

    def text(self, encoding: str = "utf-8") -> str:
        """The file's content as text."""
        return self.data().decode(encoding)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> OutputFile:
        o = _object(obj, where)
        p = _field(o, "path", str, where + ".")
        parts = p.split("/")
        if not p or p.startswith("/") or "\0" in p or any(c in ("", ".", "..") for c in parts):
            raise MalformedAnswer(f"{where}.path {p!r} is not a path inside the working directory")
        omitted = o.get("omitted", False) is True
        skipped = o.get("skipped")
        if skipped is not None and not isinstance(skipped, str):
            raise MalformedAnswer(f'field "{where}.skipped" is not a string')
        size = _field(o, "size", int, where + ".") if "size" in o or not skipped else 0
        if omitted or skipped:
            return cls(path=p, size=size, omitted=omitted, skipped=skipped)
        content = _field(o, "content", str, where + ".")
        encoding = _field(o, "encoding", str, where + ".")
        if encoding not in ("utf-8", "base64"):
            raise MalformedAnswer(f"{where}.encoding {encoding!r}: want utf-8 or base64")
        f = cls(path=p, size=size, content=content, encoding=encoding)
        try:
            f.data()
        except (binascii.Error, ValueError) as e:
            raise MalformedAnswer(f"{where}: content is not valid {encoding}: {e}") from None
        return f


@dataclass(frozen=True)
class Result:
    """The result of one snippet run by ``POST /v1/execute``.

    A snippet that failed is still a Result: look at ``exit_code``,
    ``timed_out`` and ``oom_killed``.

    Attributes:
        sandbox_id: the sandbox that ran it; different for every run.
        stdout: what the snippet printed, at most 1 MiB kept (head and tail).
        stderr: its standard error, bounded the same way. After a timeout it
            ends with ``timed out after <N>s``.
        exit_code: the process's exit code; -1 after a timeout, 137 after an
            out-of-memory kill.
        duration_ms: how long the run took.
        stdout_truncated: stdout was over the limit and its middle dropped.
        stderr_truncated: the same for stderr.
        timed_out: the run hit its deadline and every process of it was killed.
        oom_killed: the run was killed for using too much memory.
        files: the files that matched ``outputs``, in a stable order (empty
            when none did or none were asked for); also after a timeout or
            an out-of-memory kill.
        files_incomplete: some matching file did not come back with its
            content (see OutputFile.omitted).
        usage: CPU and memory the run used; None from a service too old to
            say.
        request_id: the service's name for the request in its log (also its
            ``X-Request-Id``); None from a service that does not say.
    """

    sandbox_id: str
    stdout: str
    stderr: str
    exit_code: int
    duration_ms: int
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    oom_killed: bool
    files: Tuple[OutputFile, ...] = ()
    files_incomplete: bool = False
    usage: Optional[Usage] = None
    request_id: Optional[str] = None

    @property
    def ok(self) -> bool:
        """True when the snippet ran to the end and exited 0."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    @classmethod
    def from_json(cls, obj: Any) -> Result:
        """Parse the JSON object of a 200 answer; MalformedAnswer if it is not one."""
        o = _object(obj)
        fields: Dict[str, Any] = {name: _field(o, name, typ) for name, typ in _RESULT_FIELDS.items()}
        files = o.get("files")
        if files is not None:
            if not isinstance(files, list):
                raise MalformedAnswer(f'field "files" is a JSON {_json_type(files)}, want array')
            fields["files"] = tuple(OutputFile.from_json(f, f"files[{i}]") for i, f in enumerate(files))
        if "files_incomplete" in o:
            fields["files_incomplete"] = _field(o, "files_incomplete", bool)
        if o.get("usage") is not None:
            fields["usage"] = Usage.from_json(o["usage"])
        _request_id(o, fields)
        return cls(**fields)


_RESULT_FIELDS: Dict[str, Type[Any]] = {
    "sandbox_id": str,
    "stdout": str,
    "stderr": str,
    "exit_code": int,
    "duration_ms": int,
    "stdout_truncated": bool,
    "stderr_truncated": bool,
    "timed_out": bool,
    "oom_killed": bool,
}


@dataclass(frozen=True)
class RemoteError:
    """What a tool function raised, as the sandbox reported it."""

    type: str
    message: str
    traceback: str


@dataclass(frozen=True)
class CallResult:
    """The answer of one ``POST /v1/call``: a tool function run in a
    one-use pod of the agent's image.

    ``value()`` gives the function's return value or raises what it means
    that there is none.

    Attributes:
        sandbox_id: the pod that ran it.
        result: the function's return value, decoded from JSON (None when
            it raised or did not finish).
        stdout, stderr: what the function printed (bounded as for snippets).
        exit_code, duration_ms, timed_out, oom_killed: as for Result.
        error: set when the function raised.
        stdout_truncated, stderr_truncated: as for Result; False when the
            service does not say.
        request_id: as for Result.
    """

    sandbox_id: str
    result: Any
    stdout: str
    stderr: str
    exit_code: int
    duration_ms: int
    timed_out: bool
    oom_killed: bool
    error: Optional[RemoteError] = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    request_id: Optional[str] = None

    def value(self) -> Any:
        """Return the function's value.

        Raises:
            RemoteToolError: the function raised.
            ToolCallFailed: it timed out, ran out of memory, or exited
                without a result.
        """
        if self.error is not None:
            raise RemoteToolError(self.error.type, self.error.message, self.error.traceback, self)
        if self.timed_out:
            raise ToolCallFailed(f"tool call timed out in sandbox {self.sandbox_id}; it was killed", self)
        if self.oom_killed:
            raise ToolCallFailed(f"tool call ran out of memory in sandbox {self.sandbox_id}; it was killed", self)
        if self.exit_code != 0:
            raise ToolCallFailed(
                f"tool call exited with code {self.exit_code} in sandbox {self.sandbox_id} "
                f"without a result; stderr: {_tail(self.stderr)}",
                self,
            )
        return self.result

    @classmethod
    def from_json(cls, obj: Any) -> CallResult:
        """Parse the JSON object of a 200 answer; MalformedAnswer if it is not one."""
        o = _object(obj)
        fields: Dict[str, Any] = {name: _field(o, name, typ) for name, typ in _CALL_FIELDS.items()}
        for name in ("stdout_truncated", "stderr_truncated"):
            if name in o:
                fields[name] = _field(o, name, bool)
        err = o.get("error")
        if err is not None:
            e = _object(err, "error")
            tb = e.get("traceback", "")
            if not isinstance(tb, str):
                raise MalformedAnswer('field "error.traceback" is not a string')
            fields["error"] = RemoteError(_field(e, "type", str, "error."), _field(e, "message", str, "error."), tb)
        finished = err is None and not fields["timed_out"] and not fields["oom_killed"] and fields["exit_code"] == 0
        if finished and "result" not in o:
            # A run that ended well must say what it returned: a missing
            # value is not the same as a function returning None.
            raise MalformedAnswer('field "result" is missing from a call that finished')
        fields["result"] = o.get("result")
        _request_id(o, fields)
        return cls(**fields)


_CALL_FIELDS: Dict[str, Type[Any]] = {
    "sandbox_id": str,
    "stdout": str,
    "stderr": str,
    "exit_code": int,
    "duration_ms": int,
    "timed_out": bool,
    "oom_killed": bool,
}


def _request_id(o: Mapping[str, Any], fields: Dict[str, Any]) -> None:
    if o.get("request_id") is not None:
        fields["request_id"] = _field(o, "request_id", str)


def _object(obj: Any, where: str = "the answer") -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise MalformedAnswer(f"{where} is a JSON {_json_type(obj)}, not an object")
    return obj


def _field(o: Mapping[str, Any], name: str, typ: Type[Any], prefix: str = "") -> Any:
    if name not in o:
        raise MalformedAnswer(f'field "{prefix}{name}" is missing')
    v = o[name]
    # bool is an int in Python; JSON keeps them apart, and so do we.
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        raise MalformedAnswer(f'field "{prefix}{name}" is a JSON {_json_type(v)}, want {_JSON_NAMES[typ]}')
    return v


_JSON_NAMES: Dict[Type[Any], str] = {str: "string", int: "integer", bool: "boolean"}


def _json_type(v: Any) -> str:
    types: Tuple[Tuple[Type[Any], str], ...] = (
        (bool, "boolean"), (int, "number"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"),
    )
    if v is None:
        return "null"
    for t, name in types:
        if isinstance(v, t):
            return name
    return type(v).__name__


def _tail(s: str, n: int = 300) -> str:
    s = s.strip()
    if not s:
        return "(empty)"
    return s if len(s) <= n else "…" + s[-n:]
