"""Registry credentials as clients send them: ``X-Registry-Auth`` and ``X-Registry-Config``.

``X-Registry-Auth`` (pull, push, login-free image operations) is base64 of a JSON object with
the fields of docker's ``AuthConfig``: ``username``, ``password``, ``auth`` (base64 of
``user:pass``, what the CLI keeps in its config file), ``email``, ``serveraddress``,
``identitytoken`` (an OAuth refresh token a login returned) and ``registrytoken`` (a bearer
token to use as it is). The CLI encodes with base64url; SDKs have used the standard alphabet,
with or without padding, so both are accepted. Field names match case-insensitively, the way
Go's ``encoding/json`` fills a struct, and a repeated field keeps its last value.

A missing, empty or undecodable header is *anonymous*, never an error: the CLI sends ``e30=``
(``{}``) without credentials and docker-py sends nothing at all, and the engines of that
generation threw any header they could not read away. ``X-Registry-Config`` (build) is
base64url of a JSON object mapping a registry (``https://index.docker.io/v1/``,
``localhost:5000``) to such an object; entries that do not decode are skipped.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from svc.wire import jsondoc

# One header carries a few hundred bytes; refuse to decode anything absurd (still anonymous).
MAX_HEADER = 256 * 1024

_FIELDS = ("username", "password", "auth", "email", "serveraddress", "identitytoken",
           "registrytoken")
_B64_RE = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_HUB_HOSTS = ("index.docker.io", "registry-1.docker.io", "docker.io")


@dataclass(frozen=True)
class AuthConfig:
    """Credentials for one registry. Every field may be empty; all empty means anonymous.

    Secrets are left out of ``repr`` so that a logged config does not leak them.
    """

    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    auth: str = dataclasses.field(default="", repr=False)
    email: str = ""
    serveraddress: str = ""
    identitytoken: str = dataclasses.field(default="", repr=False)
    registrytoken: str = dataclasses.field(default="", repr=False)

    @property
    def is_anonymous(self) -> bool:
        """True when there is nothing to authenticate with."""
        return self.basic_credentials() is None and not (self.identitytoken
                                                         or self.registrytoken)

    def basic_credentials(self) -> tuple[str, str] | None:
        """``(user, password)``: the explicit fields, else those packed in ``auth``, else None.

        An ``auth`` value that is not base64 of ``user:pass`` counts as absent.
        """
        if self.username or self.password:
            return self.username, self.password
        if self.auth:
            raw = _b64decode(self.auth)
            if raw is not None:
                user, sep, password = raw.decode("utf-8", "replace").partition(":")
                if sep and user:
                    return user, password
        return None


ANONYMOUS = AuthConfig()


def decode_auth_header(value: str | None) -> AuthConfig:
    """Decode an ``X-Registry-Auth`` value; anything unreadable is :data:`ANONYMOUS`."""
    doc = _decode_json(value)
    if doc is None:
        return ANONYMOUS
    config = _auth_from_object(doc)
    return config if config is not None else ANONYMOUS


def decode_config_header(value: str | None) -> dict[str, AuthConfig]:
    """Decode an ``X-Registry-Config`` value: registry key -> credentials (``{}`` if unreadable).

    Keys are kept as the client wrote them; :func:`lookup` finds the entry for a registry.
    """
    doc = _decode_json(value)
    if not isinstance(doc, dict):
        return {}
    configs: dict[str, AuthConfig] = {}
    for key, entry in doc.items():
        config = _auth_from_object(entry)
        if config is not None:
            configs[key] = config
    return configs


def registry_key(key: str) -> str:
    """The registry a config key names: scheme and path dropped, Hub spellings as ``docker.io``.

    ``https://index.docker.io/v1/`` -> ``docker.io``; ``http://localhost:5000/`` ->
    ``localhost:5000`` (docker's ``ConvertToHostname``).
    """
    host = key
    for scheme in ("http://", "https://"):
        if host.startswith(scheme):
            host = host[len(scheme):]
            break
    host = host.split("/", 1)[0]
    return "docker.io" if host in _HUB_HOSTS else host


def lookup(configs: dict[str, AuthConfig], domain: str) -> AuthConfig:
    """The credentials ``configs`` holds for registry ``domain`` (a reference's domain, e.g.
    ``docker.io`` or ``127.0.0.1:5000``): an exact key first, then any key naming the same
    registry; :data:`ANONYMOUS` when none does."""
    if domain in configs:
        return configs[domain]
    want = registry_key(domain)
    for key, config in configs.items():
        if registry_key(key) == want:
            return config
    return ANONYMOUS


def encode_auth_header(config: AuthConfig) -> str:
    """base64url JSON of the non-empty fields, as the CLI writes the header (tests, clients)."""
    fields = {k: v for k, v in dataclasses.asdict(config).items() if v}
    raw = json.dumps(fields, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _decode_json(value: str | None) -> Any:
    """The JSON document inside a base64 header value, or None when there is none."""
    if not value or len(value) > MAX_HEADER:
        return None
    raw = _b64decode(value.strip())
    if raw is None:
        return None
    try:
        return jsondoc.loads(raw)
    except jsondoc.JSONError:
        return None


def _b64decode(value: str) -> bytes | None:
    """Decode base64 in either alphabet, padding optional; None when it is not base64."""
    if not _B64_RE.fullmatch(value):
        return None
    body = value.rstrip("=").replace("-", "+").replace("_", "/")
    if len(body) % 4 == 1:
        return None
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _auth_from_object(doc: Any) -> AuthConfig | None:
    """An AuthConfig from a decoded object, or None when Go's decoder would have failed.

    ``null`` decodes to the empty config, as it leaves Go's struct untouched. A known field
    holding anything but a string or null fails the whole object, as in Go.
    """
    if doc is None:
        return ANONYMOUS
    if not isinstance(doc, dict):
        return None
    values: dict[str, str] = {}
    for key, value in doc.items():
        name = key.lower()
        if name not in _FIELDS:
            continue
        if value is None:
            continue
        if not isinstance(value, str):
            return None
        values[name] = value
    return AuthConfig(**values)
