"""Checking that a tool's arguments are JSON before anything is sent."""

from __future__ import annotations

import math
from typing import Any


def check_json(value: Any, where: str) -> None:
    """Raise TypeError naming the first part of value that JSON cannot carry
    as it is.

    json.dumps alone is not enough: it turns the keys 1 and True into the
    strings "1" and "true", and writes NaN, which is not JSON, so the tool
    would get other arguments than the caller passed, or none at all.
    Tuples are accepted and arrive as lists.
    """
    _check(value, where, 0)


# Deeper than this is almost surely a cycle or a mistake, and json.dumps
# would hit Python's recursion limit on it anyway.
_MAX_DEPTH = 100


def _check(v: Any, where: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise TypeError(f"{where}: nested more than {_MAX_DEPTH} levels deep (a cycle?)")
    if v is None or isinstance(v, (str, bool, int)):
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise TypeError(f"{where}: {v!r} is not JSON (no NaN or infinity)")
        return
    if isinstance(v, (list, tuple)):
        for i, item in enumerate(v):
            _check(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(v, dict):
        for k, item in v.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: key {k!r} ({type(k).__name__}) is not a str; JSON object keys are strings")
            _check(item, f"{where}[{k!r}]", depth + 1)
        return
    raise TypeError(
        f"{where}: a value of type {type(v).__name__} is not JSON-serialisable; "
        "pass str, int, float, bool, None, list or dict"
    )
