"""Query parameters and JSON bodies, parsed by the spec's conventions.

Every failure is an ``InvalidParameter`` whose message names the parameter or field at fault.
The pure parsers (``parse_bool``, ``parse_filters``, ``parse_json_body``) take plain values so
they are unit-tested without a server; the ``q*`` helpers read the current request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from quart import request

from svc.errors import InvalidParameter
from svc.wire import jsondoc

M = TypeVar("M", bound=BaseModel)

TRUE_VALUES = ("1", "True", "true")
FALSE_VALUES = ("0", "False", "false")

Filters = dict[str, list[str]]


def parse_bool(name: str, raw: str | None, default: bool = False) -> bool:
    """1/True/true and 0/False/false; absent or empty means the default."""
    if raw is None or raw == "":
        return default
    if raw in TRUE_VALUES:
        return True
    if raw in FALSE_VALUES:
        return False
    raise InvalidParameter(f"invalid boolean value {raw!r} for query parameter {name!r}: "
                           "use 1, True, true, 0, False or false") from None


def parse_int(name: str, raw: str | None, default: int | None = None) -> int | None:
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidParameter(
            f"invalid integer value {raw!r} for query parameter {name!r}") from None


def parse_filters(raw: str | None, allowed: Iterable[str] | None = None) -> Filters:
    """The ``filters`` JSON: a map of string to list of strings.

    The map-of-bools form ``{"key": {"value": true}}`` (what the docker CLI sends to 1.22+
    daemons) is accepted too; entries set to false are left out.
    """
    if raw is None or raw.strip() == "":
        return {}
    try:
        data = jsondoc.loads(raw)
    except jsondoc.JSONError as exc:
        raise InvalidParameter(f"invalid filters parameter: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidParameter("invalid filters parameter: expected a JSON object mapping "
                               "each filter to a list of strings") from None
    out: Filters = {}
    for key, value in data.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = list(value)
        elif isinstance(value, dict) and all(isinstance(v, bool) for v in value.values()):
            out[key] = [k for k, v in value.items() if v]
        else:
            raise InvalidParameter(f"invalid filters parameter: the value of {key!r} must be a "
                                   "list of strings") from None
    if allowed is not None:
        allowed = set(allowed)
        for key in out:
            if key not in allowed:
                raise InvalidParameter(f"Invalid filter '{key}'") from None
    return out


def parse_json_body(model: type[M], raw: bytes, content_type: str | None, *,
                    required: bool = True) -> M | None:
    """A JSON body into ``model``; unknown fields are ignored by the wire models.

    An empty body is None when not ``required`` (dockerd accepts an empty or chunked empty
    body on start, for one).
    """
    if not raw.strip():
        if required:
            raise InvalidParameter("a JSON request body is required") from None
        return None
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime != "application/json":
        shown = content_type or "none"
        raise InvalidParameter(
            f"Content-Type specified ({shown}) must be 'application/json'") from None
    try:
        data = jsondoc.loads(raw)
    except jsondoc.JSONError as exc:
        raise InvalidParameter(f"invalid JSON body: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidParameter(describe_validation_error(exc)) from None
    except RecursionError:
        raise InvalidParameter("invalid JSON body: nested too deeply") from None


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "invalid request body: " + "; ".join(parts)


# -- helpers bound to the current request --------------------------------------------------

def qbool(name: str, default: bool = False) -> bool:
    return parse_bool(name, request.args.get(name), default)


def qint(name: str, default: int | None = None) -> int | None:
    return parse_int(name, request.args.get(name), default)


def qstr(name: str, default: str | None = None) -> str | None:
    return request.args.get(name, default)


def qfilters(allowed: Iterable[str] | None = None) -> Filters:
    return parse_filters(request.args.get("filters"), allowed)


async def json_body(model: type[M], *, required: bool = True) -> M | None:
    raw = await request.get_data(as_text=False)
    assert isinstance(raw, bytes)
    return parse_json_body(model, raw, request.headers.get("Content-Type"), required=required)
