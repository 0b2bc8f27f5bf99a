"""Registry authentication: ``WWW-Authenticate`` challenges, bearer tokens and their cache.

A registry says how to authenticate in the challenge of its 401 answers (first seen on the
``/v2/`` ping): ``Basic realm="..."`` (send the credentials on every request) or
``Bearer realm="https://auth/token",service="reg",scope="repository:foo:pull"`` (get a token
from the realm for the scopes a request needs, then send it). Tokens are cached per
``(realm, service, scopes)`` until shortly before their ``expires_in`` runs out, and a 401 on a
request throws the cached one away (the client asks again, once).

Credentials come from :class:`svc.wire.authconfig.AuthConfig`: ``registrytoken`` is a bearer
token used as it is; ``identitytoken`` (a refresh token from an earlier login) is exchanged
through the OAuth2 ``refresh_token`` grant (POST); otherwise the token is asked for with GET,
with Basic credentials when there are any.

Cancellation: a token fetch cancelled half-way caches nothing; the next request fetches again.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from svc.lazy import lazy_module
from svc.registry.errors import RegistryError, Unauthorized, Unreachable, from_response
from svc.registry.transport import describe, read_body
from svc.wire.authconfig import AuthConfig

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_module("httpx")

DEFAULT_EXPIRES_IN = 60
CLIENT_ID = "svc"
_TOKEN_BODY_MAX = 1 << 20
_TOKEN68 = re.compile(r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*')
_PARAM = re.compile(r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s,]*)\s*')


@dataclass(frozen=True)
class Challenge:
    """One challenge: ``scheme`` in lower case (``basic``, ``bearer``) and its parameters
    (names in lower case: ``realm``, ``service``, ``scope``, ``error``...)."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)


def parse_challenges(values: list[str]) -> list[Challenge]:
    """Parse ``WWW-Authenticate`` header values (several challenges may share one value).

    Unparseable parts are skipped: a registry's odd header costs the auth, not the request.
    """
    found: list[Challenge] = []
    for value in values:
        pos = 0
        current: Challenge | None = None
        while pos < len(value):
            param = _PARAM.match(value, pos)
            if param and current is not None:
                raw = param.group(3)
                text = re.sub(r"\\(.)", r"\1", raw) if raw is not None else param.group(2)
                current.params[param.group(1).lower()] = text
                pos = param.end()
            else:
                scheme = _TOKEN68.match(value, pos)
                if scheme is None:
                    break
                current = Challenge(scheme.group(1).lower())
                found.append(current)
                pos = scheme.end()
            if pos < len(value) and value[pos] == ",":
                pos += 1
    return found


def repository_scope(name: str, *actions: str) -> str:
    """``repository:<name>:pull,push`` (actions in the order given)."""
    return f"repository:{name}:{','.join(actions)}"


CATALOG_SCOPE = "registry:catalog:*"


@dataclass
class _Token:
    value: str
    expires: float


class Authenticator:
    """The auth state of one registry client: its challenges, credentials and token cache."""

    def __init__(self, credentials: AuthConfig, http: httpx.AsyncClient) -> None:
        self.credentials = credentials
        self.challenges: list[Challenge] = []
        self.refresh_token = ""
        self._http = http
        self._tokens: dict[tuple[str, str, tuple[str, ...]], _Token] = {}
        self._lock = trio.Lock()

    def learn(self, response: httpx.Response) -> bool:
        """Take the challenges of a 401 answer; True when they say how to authenticate."""
        challenges = parse_challenges(response.headers.get_list("www-authenticate"))
        if challenges:
            self.challenges = challenges
        return any(c.scheme in ("basic", "bearer") for c in challenges)

    def _challenge(self, scheme: str) -> Challenge | None:
        return next((c for c in self.challenges if c.scheme == scheme), None)

    async def authorization(self, scopes: tuple[str, ...], *, refresh: bool = False,
                            offline: bool = False) -> str | None:
        """The ``Authorization`` value for a request needing ``scopes``, None for none.

        Args:
            refresh: drop a cached token first (the registry refused it).
            offline: ask for a refresh token too (login).

        Raises:
            Unauthorized: the token server refused the credentials.
            RegistryError: the token server failed or answered nonsense.
        """
        bearer = self._challenge("bearer")
        if bearer is not None and bearer.params.get("realm"):
            if self.credentials.registrytoken:
                return f"Bearer {self.credentials.registrytoken}"
            return f"Bearer {await self._token(bearer, scopes, refresh, offline)}"
        if self._challenge("basic") is not None:
            pair = self.credentials.basic_credentials()
            if pair is not None:
                raw = f"{pair[0]}:{pair[1]}".encode()
                return "Basic " + base64.b64encode(raw).decode("ascii")
        return None

    async def _token(self, challenge: Challenge, scopes: tuple[str, ...], refresh: bool,
                     offline: bool) -> str:
        realm, service = challenge.params["realm"], challenge.params.get("service", "")
        key = (realm, service, tuple(sorted(set(scopes))))
        async with self._lock:
            cached = self._tokens.get(key)
            if cached is not None and not refresh and trio.current_time() < cached.expires:
                return cached.value
            self._tokens.pop(key, None)
            doc = await self._fetch(realm, service, key[2], offline)
            token = doc.get("token") or doc.get("access_token")
            if not isinstance(token, str) or not token:
                raise RegistryError(f"token server {realm} sent no token")
            lifetime = doc.get("expires_in")
            if not isinstance(lifetime, int | float) or isinstance(lifetime, bool) \
                    or lifetime <= 0:
                lifetime = DEFAULT_EXPIRES_IN
            margin = min(5.0, lifetime / 10)
            self._tokens[key] = _Token(token, trio.current_time() + lifetime - margin)
            refresh_token = doc.get("refresh_token")
            if isinstance(refresh_token, str) and refresh_token:
                self.refresh_token = refresh_token
            return token

    async def _fetch(self, realm: str, service: str, scopes: tuple[str, ...],
                     offline: bool) -> dict[str, Any]:
        identity = self.credentials.identitytoken
        if identity:
            form = {"grant_type": "refresh_token", "refresh_token": identity,
                    "client_id": CLIENT_ID, "service": service, "scope": " ".join(scopes)}
            if offline:
                form["access_type"] = "offline"
            response = await self._send("POST", realm, data=form)
            if response[0] not in (404, 405):
                return self._token_doc(realm, response)
        params: list[tuple[str, str]] = [("service", service)] if service else []
        params += [("scope", s) for s in scopes]
        headers = {}
        pair = self.credentials.basic_credentials()
        if pair is not None:
            params.append(("account", pair[0]))
            raw = f"{pair[0]}:{pair[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
            if offline:
                params += [("offline_token", "true"), ("client_id", CLIENT_ID)]
        response = await self._send("GET", realm, params=params, headers=headers)
        return self._token_doc(realm, response)

    async def _send(self, method: str, url: str, **kw: Any) -> tuple[int, bytes]:
        try:
            async with self._http.stream(method, url, **kw) as response:
                body = await read_body(response, _TOKEN_BODY_MAX, f"token server {url}")
                return response.status_code, body
        except httpx.TransportError as exc:
            raise Unreachable(f"token server {url}: {describe(exc)}") from exc

    @staticmethod
    def _token_doc(realm: str, answer: tuple[int, bytes]) -> dict[str, Any]:
        status, body = answer
        if status != 200:
            err = from_response(status, body, what=f"token server {realm}")
            if status in (400, 401, 403):
                raise Unauthorized(str(err), status=err.status, code=err.code,
                                   detail=err.detail)
            raise err
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise RegistryError(f"token server {realm} answered no JSON object")
        return doc
