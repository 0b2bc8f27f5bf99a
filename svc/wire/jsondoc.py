"""JSON documents from untrusted input, decoded the way the reference engine's Go decoder
bounds them.

Python's ``json`` accepts what Go's ``encoding/json`` refuses, and fails in ways that are not
errors of the input: a 5,000-digit number raises a bare ``ValueError`` (CPython's integer
conversion limit), nesting 100,000 deep raises ``RecursionError``, ``NaN`` and ``Infinity``
are accepted (not JSON), and a 300-digit number would later overflow a C integer somewhere
in the daemon. ``loads`` refuses all of them with ``JSONError``, whose message says what is
wrong, so every caller answers a 400 (Go decodes numbers into at most 64 bits: anything
outside ``[-2**63, 2**64)`` is out of range for every field).

An object with a key repeated is a ``RepeatedKeys`` that keeps every key in document order:
Go's decoder takes the keys one by one (the last value of a field wins, and objects for a
struct merge), which a plain dict would lose (Python keeps the last value at the first
position).
"""

from __future__ import annotations

import json
from typing import Any

from svc.models.base import RepeatedKeys

INT_MIN, INT_MAX = -(2**63), 2**64 - 1


class JSONError(ValueError):
    """The document is not JSON the Engine API accepts; the message says why."""


def _int(text: str) -> int:
    if len(text) > 21:
        raise JSONError(f"number {text[:24]}... is out of range (at most 64 bits)")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise JSONError(f"number {text} is out of range (at most 64 bits)")
    return value


def _float(text: str) -> float:
    if len(text) > 400:
        raise JSONError(f"number {text[:24]}... is too long")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JSONError(f"number {text[:24]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise JSONError(f"{name} is not valid JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A plain dict, unless a key is repeated (see the module)."""
    obj = dict(pairs)
    return obj if len(obj) == len(pairs) else RepeatedKeys(pairs)


def loads(raw: str | bytes) -> Any:
    """Decode ``raw``.

    Raises:
        JSONError: not JSON, nested deeper than the interpreter's recursion allows (the C
            decoder stops cleanly at that depth), a number outside 64 bits, or
            ``NaN``/``Infinity``.
    """
    try:
        return json.loads(raw, parse_int=_int, parse_float=_float, parse_constant=_constant,
                          object_pairs_hook=_object)
    except JSONError:
        raise
    except json.JSONDecodeError as exc:
        raise JSONError(f"not valid JSON ({exc.msg} at line {exc.lineno} column "
                        f"{exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise JSONError(f"not valid UTF-8 ({exc.reason})") from None
    except RecursionError:
        raise JSONError("nested too deeply") from None
    except ValueError as exc:
        raise JSONError(f"not valid JSON ({exc})") from None
