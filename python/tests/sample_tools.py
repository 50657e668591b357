"""Tool functions for the @sandboxed tests, importable as tests.sample_tools
(a sandbox pod would import them the same way)."""

from __future__ import annotations

from typing import Any, List, Tuple

from sandbox_client import sandboxed

# Every run in this process appends here. The fail-closed tests assert it
# stays empty: a failure must never turn into running the tool locally.
CALLS: List[Tuple[str, Any]] = []


@sandboxed
def add(a: int, b: int) -> int:
    """Add two numbers."""
    CALLS.append(("add", (a, b)))
    return a + b


@sandboxed(image="registry.example/agents/weather:1.2", timeout_s=5, env={"UNITS": "metric"})
def forecast(city: str, days: int = 1) -> dict:
    """A tool with its own image, timeout and env."""
    CALLS.append(("forecast", (city, days)))
    return {"city": city, "days": days}


class Calc:
    """Tools grouped in a class, as staticmethods."""

    @staticmethod
    @sandboxed
    def mul(a: int, b: int) -> int:
        CALLS.append(("mul", (a, b)))
        return a * b


@sandboxed(timeout_s=1)
def echo(x: Any) -> dict:
    """A tool with a 1 s deadline, so that the tests of a hung service are quick."""
    CALLS.append(("echo", x))
    return {"echo": x}


@sandboxed
def collect(*args: Any, **kwargs: Any) -> None:
    """Takes anything, for the tests of what can be sent."""
    CALLS.append(("collect", (args, kwargs)))
