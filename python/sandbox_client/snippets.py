"""run_python: the tool a model calls to run code, and what it reads back."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .client import Client, FilesArg
from .errors import SandboxAuthError, SandboxRequestError
from .images import MAX_IMAGE_BYTES, MAX_IMAGES, TOOL_FORMATS, image_block, images_of
from .outputs import save_files
from .results import Result


def run_python(
    code: str,
    files: Optional[FilesArg] = None,
    timeout_s: Optional[int] = None,
    *,
    outputs: Optional[Sequence[str]] = None,
    client: Optional[Client] = None,
    on_output: Optional[Callable[[str, str], None]] = None,
) -> Result:
    """Run Python code in a fresh, one-use sandbox and return its Result.

    Args:
        code: the Python source to run.
        files: input files written into the working directory first: a
            mapping of path to str (text) or bytes, e.g.
            ``{"in.csv": "a,b\\n", "blob.bin": b"\\x00\\xff"}``, or the API's
            list of ``{"path", "content", "encoding"}``.
        timeout_s: the run's deadline in whole seconds (1 to 60; the service's
            default is 20).
        outputs: files to bring back after the run, as patterns relative to
            the working directory: ``["*.png", "out/**"]`` (``*`` within one
            directory, dot files included; ``**`` any number of them). They
            come back in ``Result.files`` (at most 100 files and 10 MiB in
            all; see OutputFile), also after a timeout; ``save_files``
            writes them to disk.
        client: the Client to use; by default one for ``SANDBOX_URL``.
        on_output: called as the snippet writes, ``on_output(stream, text)``
            with stream ``"stdout"`` or ``"stderr"`` and the new text, on
            this thread, before run_python returns. Concatenated, a
            stream's texts are the Result's ``stdout`` (``stderr``),
            truncation marker and timeout line included. An exception it
            raises ends the request (and with it the run) and is raised.

    A snippet that fails is still a Result (see ``exit_code``,
    ``timed_out``, ``oom_killed``).

    Raises:
        SandboxUnavailable: no sandbox could be used (no SANDBOX_URL, an
            unreadable token file, refused, timed out, 5xx, a malformed
            answer, 503 past the retry budget); SandboxQuotaExceeded, one of
            them, when this caller is over its quota (429). The code did not
            run in this process, and never does.
        SandboxRequestError: the service refused the request (4xx), e.g. a
            file path or an output pattern outside the working directory, or
            a body over 1 MiB (413, refused before it is sent);
            SandboxAuthError, one of them, when it refused this caller
            (401, 403).
        TypeError: an argument of the wrong type; nothing was sent.
    """
    c = client if client is not None else Client()
    return c.execute(code, files=files, timeout_s=timeout_s, outputs=outputs, on_output=on_output)


RUN_PYTHON_DESCRIPTION = (
    "Run Python 3 code in a fresh, isolated sandbox and get back its stdout, stderr and exit code. "
    "Use it to compute, parse or transform data exactly instead of guessing. "
    "numpy, pandas and matplotlib are installed; matplotlib has no screen, so save charts with savefig. "
    "Each call starts from a clean slate: nothing (variables, files, installed state) survives between calls, "
    "so include everything the code needs in one call. There is no network access. "
    "Print what you want to see: stdout and stderr come back to you. "
    "To hand files to the user (a chart, a result table), write them in the working directory and name them "
    "in outputs, e.g. [\"chart.png\", \"out/*.csv\"]: they are returned to the user, and you are told their names and "
    "sizes; you are shown short text files, and images (PNG, JPEG, GIF, WebP: a chart you saved) as images."
)

# The JSON Schema of run_python's arguments, as a model fills them in.
RUN_PYTHON_PARAMETERS: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "The Python 3 source code to run."},
        "timeout_s": {
            "type": "integer",
            "minimum": 1,
            "maximum": 60,
            "description": "Deadline in seconds; the run and every process it started are killed at it. Default 20.",
        },
        "outputs": {
            "type": "array",
            "description": (
                "Files to return after the run: patterns relative to the working directory, such as chart.png, "
                "*.png or out/** (** is any number of directories). At most 100 files and 10 MiB in all."
            ),
            "items": {"type": "string"},
        },
        "files": {
            "type": "array",
            "description": "Input files written into the working directory before the code runs.",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Relative path inside the working directory."},
                    "content": {"type": "string", "description": "The file's content: text, or base64 with encoding base64."},
                    "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
                },
                "required": ["path", "content"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}

# run_python as an Anthropic Messages API tool: tools=[RUN_PYTHON_TOOL].
RUN_PYTHON_TOOL: Dict[str, Any] = {
    "name": "run_python",
    "description": RUN_PYTHON_DESCRIPTION,
    "input_schema": RUN_PYTHON_PARAMETERS,
}



def _strict(schema: Dict[str, Any], optional: bool = False) -> Dict[str, Any]:
    """schema as OpenAI's strict mode takes it: every property required, an
    optional one nullable instead, no bounds keywords (said in words)."""
    s = {k: v for k, v in schema.items() if k not in ("minimum", "maximum")}
    if "minimum" in schema:
        s["description"] = f"{s['description']} From {schema['minimum']} to {schema['maximum']}."
    if schema.get("type") == "object":
        s["properties"] = {k: _strict(v, k not in schema.get("required", ())) for k, v in schema["properties"].items()}
        s["required"] = list(schema["properties"])
    if schema.get("type") == "array":
        s["items"] = _strict(schema["items"])
    if optional:
        s["type"] = [s["type"], "null"]
        if "enum" in s:
            s["enum"] = [*s["enum"], None]
    return s


# RUN_PYTHON_PARAMETERS for OpenAI's strict mode: the model's arguments then
# always match it; it writes null for what it leaves out.
RUN_PYTHON_PARAMETERS_STRICT: Dict[str, Any] = _strict(RUN_PYTHON_PARAMETERS)

# run_python as an OpenAI Chat Completions tool, in strict mode:
# tools=[RUN_PYTHON_TOOL_OPENAI].
RUN_PYTHON_TOOL_OPENAI: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run_python",
        "description": RUN_PYTHON_DESCRIPTION,
        "parameters": RUN_PYTHON_PARAMETERS_STRICT,
        "strict": True,
    },
}

# How much of each stream result_text keeps by default: the sandbox keeps up
# to 1 MiB of each, which is far more than a model should read in one turn.
DEFAULT_MAX_CHARS = 20_000

# The largest text output file whose content result_text shows the model;
# larger ones, and binary ones, are named with their size only.
SHOWN_FILE_CHARS = 2_000


def result_text(
    result: Result,
    max_chars: Optional[int] = DEFAULT_MAX_CHARS,
    *,
    saved_to: Optional[str] = None,
    images: Optional[Mapping[str, bool]] = None,
) -> str:
    """The text a model should read back for a run: what went wrong said
    plainly first, then the exit code, stdout and stderr, then the output
    files (their names and sizes; the text of short text files).

    Args:
        result: the run.
        max_chars: keep at most this many characters of each stream (its
            head and tail, with a marker saying how much was cut); None keeps
            everything.
        saved_to: where the files were saved, to say so.
        images: the paths of the images among the files, each True when the
            model is shown it beside the text, False when it is not (over
            the bounds), to say so.
    """
    notes = []
    if result.timed_out:
        notes.append(
            "The code timed out: it was still running at its time limit, so it and every process it "
            "started were killed. Output below is what it printed before that."
        )
    if result.oom_killed:
        notes.append("The code ran out of memory and was killed.")
    for name, cut in (("stdout", result.stdout_truncated), ("stderr", result.stderr_truncated)):
        if cut:
            notes.append(
                f"The {name} was longer than the sandbox keeps: its middle was dropped where marked, "
                "only the beginning and end are shown."
            )
    lines = notes + [f"exit code: {result.exit_code}"]
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if not text:
            lines.append(f"{name}: (empty)")
            continue
        if max_chars is not None and len(text) > max_chars:
            head = max_chars // 2
            tail = max_chars - head
            text = f"{text[:head]}\n[... {len(text) - max_chars} characters cut here to keep this short ...]\n{text[-tail:]}"
        lines.append(f"{name}:\n{text.rstrip(chr(10))}")
    lines.extend(_files_text(result, saved_to, images or {}))
    return "\n".join(lines)


def _files_text(result: Result, saved_to: Optional[str], images: Mapping[str, bool]) -> List[str]:
    if not result.files:
        return []
    where = f" (saved under {saved_to})" if saved_to else ""
    lines = [f"files{where}:"]
    for f in result.files:
        if f.skipped:
            lines.append(f"- {f.path}: not returned ({f.skipped})")
        elif f.omitted:
            lines.append(f"- {f.path}: {f.size} bytes, not returned: over the limit of 100 files and 10 MiB in all")
        elif f.path in images:
            seen = "shown to you after this text" if images[f.path] else f"not shown to you: over {MAX_IMAGES} images or {MAX_IMAGE_BYTES} bytes"
            lines.append(f"- {f.path}: {f.size} bytes, returned; an image, {seen}")
        elif f.encoding == "utf-8" and f.content is not None and len(f.content) <= SHOWN_FILE_CHARS:
            lines.append(f"- {f.path}: {f.size} bytes, returned; its text:\n{f.content.rstrip(chr(10))}")
        else:
            lines.append(f"- {f.path}: {f.size} bytes, returned")
    if result.files_incomplete:
        lines.append("Some matching files were not returned: over the limits.")
    return lines


def handle_run_python(
    arguments: Union[str, Mapping[str, Any]],
    *,
    client: Optional[Client] = None,
    max_chars: Optional[int] = DEFAULT_MAX_CHARS,
    save_dir: Optional[str] = None,
    tool_format: Optional[str] = None,
) -> Union[str, List[Dict[str, Any]]]:
    """Run a model's run_python tool call and return what to send back: the
    text, or, when images came back among the outputs, content blocks (the
    text, then each image) in ``tool_format``.

    ``arguments`` is the call's input as the SDK gives it: a dict (Anthropic's
    ``tool_use.input``) or a JSON string (OpenAI's
    ``tool_call.function.arguments``).

    ``tool_format`` is "anthropic" (the default for a dict): the blocks are a
    tool_result's ``content``, image blocks beside the text. Or "openai" (the
    default for a JSON string): a text part and ``image_url`` parts, the
    content of a Chat Completions user message, since a tool message takes
    text only: send the first part's text as the tool message and the list
    as a user message after it. At most MAX_IMAGES images of at most
    MAX_IMAGE_BYTES each are shown; the text names the others.

    Files the model named in ``outputs`` are written under ``save_dir``
    when it is given (see save_files), and the text names them.

    Mistakes in the call (bad arguments, or a request the service refuses
    with a 4xx) come back as text starting with ``error:``, so the model can
    correct itself. SandboxUnavailable (and SandboxQuotaExceeded, a kind of
    it) and SandboxAuthError are raised, not returned: the agent must stop
    or report them, not let the model work around a missing sandbox or an
    identity it cannot change.
    """
    try:
        args = _parse_arguments(arguments)
        code = args["code"]
        timeout_s = args.get("timeout_s")
        files = args.get("files")
        outputs = args.get("outputs")
        if tool_format is None:
            tool_format = "openai" if isinstance(arguments, str) else "anthropic"
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"tool_format {tool_format!r}: want one of {TOOL_FORMATS}")
        c = client if client is not None else Client()
        result = c.execute(code, files=files, timeout_s=timeout_s, outputs=outputs)
    except (ValueError, TypeError) as e:
        return f"error: the run_python call was not valid, nothing ran: {e}"
    except SandboxAuthError:
        raise
    except SandboxRequestError as e:
        return f"error: the sandbox refused the call, nothing ran: {e.message}"
    saved_to = None
    if save_dir is not None and result.files:
        save_files(result, save_dir)
        saved_to = save_dir
    shown, left = images_of(result)
    images = {f.path: True for f, _ in shown}
    images.update({f.path: False for f in left})
    text = result_text(result, max_chars=max_chars, saved_to=saved_to, images=images)
    if not shown:
        return text
    return [{"type": "text", "text": text}] + [image_block(f, mt, tool_format) for f, mt in shown]


def _parse_arguments(arguments: Union[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as e:
            raise ValueError(f"arguments are not JSON: {e}") from None
    if not isinstance(arguments, Mapping):
        raise TypeError("arguments must be an object with code")
    # Strict mode (RUN_PYTHON_TOOL_OPENAI) writes null for what is left out.
    arguments = {k: v for k, v in arguments.items() if v is not None}
    if isinstance(arguments.get("files"), list):
        arguments["files"] = [
            {k: v for k, v in f.items() if v is not None} if isinstance(f, Mapping) else f for f in arguments["files"]
        ]
    unknown = set(arguments) - set(RUN_PYTHON_PARAMETERS["properties"])
    if unknown:
        raise ValueError(f"unknown argument(s) {sorted(unknown)}: want code, timeout_s, files, outputs")
    if not isinstance(arguments.get("code"), str):
        raise TypeError("code is required and must be a string")
    return arguments
