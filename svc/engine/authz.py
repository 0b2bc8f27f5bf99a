"""Authorization plugins (``--authorization-plugin``): every API request, and its answer, put
to each configured plugin in turn, as the engines' ``pkg/authorization`` did (v1.11, with the
user of the TLS client certificate that v1.12 added).

``AuthZPlugin.AuthZReq`` is asked before a request is served, with the document of Go's
``authorization.Request``: ``User`` (the client certificate's Subject CommonName),
``UserAuthNMethod`` (``"TLS"`` when there is a certificate), ``RequestMethod``,
``RequestUri`` (as the client sent it: version prefix and query), ``RequestBody`` (bytes, so
base64 in JSON) and ``RequestHeaders`` (one value per name, Go's canonical names, without
``Authorization``, ``X-Registry-Auth`` and ``X-Registry-Config``); empty fields are left out
(``omitempty``). ``AuthZPlugin.AuthZRes`` is asked after, with ``ResponseStatusCode``,
``ResponseHeaders`` and ``ResponseBody`` added. The plugins are asked in the order given (a name
given twice is asked once) and the first that does not allow decides: the next ones are not
asked.

A body goes to the plugins only where the engines sent one (``sends_body``): its
``Content-Type`` is exactly ``application/json``, the path is not ``/auth``, and it is shorter
than 1 MiB; the API edge reads it (a chunked one too, up to that size) and hands it over.

Fails closed. A plugin that cannot be found, is unreachable, does not answer within the plugin
timeout (``--plugin-timeout``, one bound for its activation and its answer), answers something
that is not an authorization answer, or answers an ``Err``, denies the request: the error names
the plugin (``AuthorizationFailed``). An unreachable plugin is not waited for while it might be
starting (the engines retried for 30 s, holding every request that long).
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from svc.errors import Forbidden, SvcError, SystemError_
from svc.plugins.manager import PluginManager

log = logging.getLogger("svc.authz")

KIND = "authz"  # what an authorization plugin's Plugin.Activate lists in Implements
AUTHZ_REQ = "AuthZPlugin.AuthZReq"
AUTHZ_RES = "AuthZPlugin.AuthZRes"
MAX_BODY = 1 << 20  # the engines' maxBodySize: a body of this size or more is not sent
JSON = "application/json"
HIDDEN_HEADERS = frozenset({"authorization", "x-registry-auth", "x-registry-config"})
# Go's server keeps these out of a request's header map (``r.Host``, ``r.TransferEncoding``)
NOT_IN_HEADER_MAP = frozenset({"host", "transfer-encoding"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class AuthorizationDenied(Forbidden):
    """A plugin did not allow the request (or its answer): 403 with the engines' words."""

    def __init__(self, plugin: str, msg: str) -> None:
        super().__init__(f"authorization denied by plugin {plugin}: {msg}")
        self.plugin = plugin


class AuthorizationFailed(SystemError_):
    """A plugin could not decide (gone, silent, garbled, or its ``Err``): the request is
    denied all the same (500, as the engines answered a plugin's failure)."""

    def __init__(self, plugin: str, why: str) -> None:
        super().__init__(f"plugin {plugin} failed with error: {why}")
        self.plugin = plugin


def sends_body(uri: str, content_type: str | None) -> bool:
    """Whether a body (request or response) with this type goes to the plugins: the engines'
    ``sendBody`` (never ``/auth``'s credentials; only ``application/json``, exactly)."""
    return content_type == JSON and not uri.endswith("/auth")


def canonical_key(name: str) -> str:
    """Go's ``CanonicalMIMEHeaderKey``: ``x-registry-auth`` -> ``X-Registry-Auth``; a name
    that is not a token is left as it is."""
    if not _TOKEN.fullmatch(name):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def flatten_headers(pairs: Iterable[tuple[str, str]], *, request: bool = True) -> dict[str, str]:
    """Headers as the engines flattened them: one value per canonical name (the last), and
    no credentials (``Authorization``, ``X-Registry-Auth``, ``X-Registry-Config``)."""
    out: dict[str, str] = {}
    for name, value in pairs:
        low = name.lower()
        if low in HIDDEN_HEADERS or (request and low in NOT_IN_HEADER_MAP):
            continue
        out[canonical_key(name)] = value
    return out


def _bytes(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")  # as Go's encoding/json writes []byte


@dataclass(frozen=True)
class AuthzRequest:
    """One API request as the plugins see it. ``user`` is None without a client certificate
    (not TLS, or none sent): then neither ``User`` nor ``UserAuthNMethod`` is sent."""

    method: str
    uri: str
    headers: dict[str, str]
    body: bytes | None = None
    user: str | None = None

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.user:
            doc["User"] = self.user
        if self.user is not None:
            doc["UserAuthNMethod"] = "TLS"
        doc["RequestMethod"] = self.method
        doc["RequestUri"] = self.uri
        if self.body:
            doc["RequestBody"] = _bytes(self.body)
        if self.headers:
            doc["RequestHeaders"] = self.headers
        return doc


@dataclass(frozen=True)
class AuthzResponse:
    """The answer to an ``AuthzRequest``: ``body`` only where ``sends_body`` says so."""

    status: int
    headers: dict[str, str]
    body: bytes | None = None

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.status:
            doc["ResponseStatusCode"] = self.status
        if self.body:
            doc["ResponseBody"] = _bytes(self.body)
        if self.headers:
            doc["ResponseHeaders"] = self.headers
        return doc


class Authorizer:
    """The configured authorization plugins, asked in order (``names``, each once)."""

    def __init__(self, plugins: PluginManager, names: Sequence[str], timeout: float) -> None:
        self.plugins = plugins
        self.names = list(dict.fromkeys(names))
        self.timeout = timeout

    async def authorize_request(self, request: AuthzRequest) -> None:
        """Ask each plugin's ``AuthZReq`` in turn.

        Raises:
            AuthorizationDenied: a plugin did not allow it (the next ones were not asked).
            AuthorizationFailed: a plugin could not be asked or answered an error.

        Cancellation: a checkpoint; a plugin call under way is abandoned (its connection
        closed), and the request counts as not authorized.
        """
        await self._ask_all(AUTHZ_REQ, request.document())

    async def authorize_response(self, request: AuthzRequest, response: AuthzResponse) -> None:
        """Ask each plugin's ``AuthZRes`` about ``response`` to ``request``; raises as
        ``authorize_request`` does."""
        await self._ask_all(AUTHZ_RES, {**request.document(), **response.document()})

    async def _ask_all(self, method: str, doc: dict[str, Any]) -> None:
        for name in self.names:
            await self._ask(name, method, doc)

    async def _ask(self, name: str, method: str, doc: dict[str, Any]) -> None:
        """One plugin's verdict; its lookup, activation and answer together take at most
        the plugin timeout."""
        with trio.move_on_after(self.timeout) as deadline:
            try:
                plugin = await self.plugins.get(name, KIND, retry=False)
                answer = await plugin.call(method, doc, retry=False)
            except SvcError as exc:  # not found, unreachable, timed out, garbled, its Err
                raise AuthorizationFailed(name, str(exc)) from None
            except Exception as exc:  # a failure nobody foresaw still denies the request
                log.exception("authorization plugin %s: %s failed", name, method)
                raise AuthorizationFailed(name, f"{method}: {type(exc).__name__}: {exc}") \
                    from None
        if deadline.cancelled_caught:
            raise AuthorizationFailed(name, f"{method}: plugin {name} did not answer within "
                                            f"{self.timeout:g}s")
        verdict(name, method, answer)


def _field(answer: dict[str, Any], key: str) -> Any:
    """``answer``'s ``key`` as Go's encoding/json finds it: exact, else any case."""
    if key in answer:
        return answer[key]
    low = key.lower()
    return next((v for k, v in answer.items() if k.lower() == low), None)


def verdict(name: str, method: str, answer: dict[str, Any]) -> None:
    """Raise unless plugin ``name``'s ``answer`` (``{Allow, Msg, Err}``) allows.

    ``Err`` is a failure even beside ``"Allow": true`` (the engines looked at ``Err`` only in
    a refusal's body; failing closed, svc looks at it always)."""
    allow, msg, err = (_field(answer, k) for k in ("Allow", "Msg", "Err"))
    if not isinstance(allow, bool | None) or not isinstance(msg, str | None) \
            or not isinstance(err, str | None):
        shown = json.dumps(answer)[:200]
        raise AuthorizationFailed(name, f"{method}: the answer {shown} is not an "
                                        "authorization answer (Allow must be a boolean, Msg "
                                        "and Err strings)")
    if err:
        raise AuthorizationFailed(name, f"{method}: {err}")
    if not allow:
        raise AuthorizationDenied(name, msg or "")
