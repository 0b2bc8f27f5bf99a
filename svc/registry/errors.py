"""What can go wrong talking to a registry, as error kinds the engine can pass on or translate.

Each class is also one of ``svc.errors``' kinds (so an engine that lets one through gets a
sensible status), and carries what the registry said: the HTTP status and the first entry of
the Registry API's error body (``{"errors": [{"code", "message", "detail"}]}``). ``str()`` reads
like distribution's own errors, ``"<code in lower case>: <message>"`` (``manifest unknown:
manifest unknown``), which is what docker printed for them.
"""

from __future__ import annotations

import json
from typing import Any

from svc import errors


class RegistryError(errors.SystemError_):
    """The registry answered with an error, or with something that is not the protocol.

    Attributes:
        status: the HTTP status (0 when there was no answer).
        code: the registry's error code (``MANIFEST_UNKNOWN``), ``""`` when it gave none.
        detail: the registry's ``message`` (or the best text available).
    """

    def __init__(self, message: str, *, status: int = 0, code: str = "",
                 detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail or message


class Unauthorized(RegistryError, errors.Unauthorized):
    """Authentication failed or is required (HTTP 401, or a token server's refusal)."""


class Denied(RegistryError, errors.Forbidden):
    """The credentials are valid but do not allow this (HTTP 403, ``DENIED``)."""


class NotFound(RegistryError, errors.NotFound):
    """No such repository, manifest, tag or blob (``NAME_UNKNOWN``, ``MANIFEST_UNKNOWN``...)."""


class DigestMismatch(RegistryError):
    """Content did not hash to the digest that names it: the bytes were refused."""


class InvalidManifest(RegistryError):
    """A manifest that cannot be parsed, or that names no image for this platform."""


class Unreachable(RegistryError, errors.Unavailable):
    """No answer: connection refused, DNS, TLS handshake, or a timeout."""


def from_response(status: int, body: bytes, *, what: str = "") -> RegistryError:
    """The error for a failed response: the kind by status, the text from the body.

    Args:
        status: the HTTP status.
        body: the (start of the) response body; the Registry API's JSON error list if any.
        what: what was asked for, used when the body says nothing (``manifest latest``).
    """
    code, message = _first_error(body)
    if not message:
        message = what + " " if what else ""
        message += f"(HTTP status {status})"
    text = f"{code.lower().replace('_', ' ')}: {message}" if code else message
    kind: type[RegistryError]
    if status == 401:
        kind = Unauthorized
    elif status == 403:
        kind = Denied
    elif status == 404:
        kind = NotFound
    else:
        kind = RegistryError
    return kind(text, status=status, code=code, detail=message)


def _first_error(body: bytes) -> tuple[str, str]:
    """``(code, message)`` of the first entry of an error body; token servers' ``details`` or
    ``error`` fields too; empty strings when the body holds none of them."""
    try:
        doc: Any = json.loads(body[:65536])
    except (ValueError, UnicodeDecodeError):
        return "", ""
    if not isinstance(doc, dict):
        return "", ""
    items = doc.get("errors")
    if isinstance(items, list) and items and isinstance(items[0], dict):
        code = items[0].get("code")
        message = items[0].get("message")
        return (code if isinstance(code, str) else "",
                message if isinstance(message, str) else "")
    for key in ("details", "error_description", "error", "message"):
        value = doc.get(key)
        if isinstance(value, str) and value:
            return "", value
    return "", ""
