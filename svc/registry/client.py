"""A client of one registry: endpoint choice, authenticated requests, errors, login.

``RegistryClient`` holds the ``httpx.AsyncClient`` of the endpoint that answered the
``/v2/`` ping and the :class:`~svc.registry.auth.Authenticator` of its credentials. Every
request names the token scopes it needs; a 401 refreshes the token (or learns the challenge)
and the request is sent once more. Use it as ``async with RegistryClient(domain) as c:``.

Every call runs under the caller's trio cancel scope and under the config's timeouts (connect
10 s, 30 s without progress on a read or write), so nothing waits for ever. A cancelled call
closes its connection (a half-read response cannot go back to the pool) and leaves the client
usable.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import trio

from svc.lazy import lazy_module
from svc.registry.auth import Authenticator
from svc.registry.errors import RegistryError, Unauthorized, Unreachable, from_response
from svc.registry.transport import (
    Endpoint,
    RegistryConfig,
    describe,
    endpoints,
    make_http,
    read_body,
)
from svc.wire.authconfig import ANONYMOUS, AuthConfig

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_module("httpx")

# A request body: bytes, or a factory of async byte streams (called again for a retry).
Body = bytes | Callable[[], AsyncIterable[bytes]] | None

ERROR_BODY_MAX = 64 * 1024
SMALL_BODY_MAX = 4 * 1024 * 1024  # distribution refuses manifests over 4 MiB too


@dataclass(frozen=True)
class Answer:
    """A complete, small response: status, headers, body and the final URL."""

    status: int
    headers: httpx.Headers
    body: bytes
    url: httpx.URL


class RegistryClient:
    """Talks to one registry (``domain`` as in a reference: ``docker.io``, ``host:5000``).

    Args:
        domain: the registry.
        config: the daemon's registry settings.
        credentials: from ``X-Registry-Auth`` or a login; anonymous by default.
        push: the client will write (Docker Hub's mirrors are skipped).
        endpoint: the one endpoint to use (a pull going through Hub's mirrors in turn);
            by default the first of :func:`endpoints` that answers the ping.
    """

    def __init__(self, domain: str, *, config: RegistryConfig | None = None,
                 credentials: AuthConfig = ANONYMOUS, push: bool = False,
                 endpoint: Endpoint | None = None) -> None:
        self.domain = domain
        self.pinned = endpoint
        self.config = config or RegistryConfig()
        self.push = push
        self._token_http = httpx.AsyncClient(timeout=self.config.timeout(), trust_env=False,
                                             headers={"User-Agent": self.config.user_agent})
        self.auth = Authenticator(credentials, self._token_http)
        self._endpoint: Endpoint | None = None
        self._http: httpx.AsyncClient | None = None
        self._ping_lock = trio.Lock()

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection, also in a cancelled scope (closing sends nothing over
        HTTP/1.1, so the shield cannot hold the caller up)."""
        with trio.CancelScope(shield=True):
            if self._http is not None:
                await self._http.aclose()
            await self._token_http.aclose()

    @property
    def endpoint(self) -> Endpoint | None:
        """The endpoint the ping chose, None before the first request."""
        return self._endpoint

    async def ping(self) -> Endpoint:
        """Find the endpoint that speaks the v2 API (``GET /v2/`` answered 200 or 401) and
        learn its challenge; done once, before the first request.

        Raises:
            Unreachable: no endpoint answered (each one's failure is in the message).
        """
        async with self._ping_lock:  # concurrent first requests ping once
            return await self._ping()

    async def _ping(self) -> Endpoint:
        if self._endpoint is not None:
            return self._endpoint
        failures = []
        candidates = [self.pinned] if self.pinned is not None \
            else await endpoints(self.domain, self.config, push=self.push)
        for endpoint in candidates:
            http = await make_http(endpoint, self.config)
            try:
                async with http.stream("GET", endpoint.url + "/v2/") as response:
                    body = await read_body(response, ERROR_BODY_MAX, "ping")
            except (httpx.TransportError, RegistryError) as exc:
                await http.aclose()
                text = describe(exc) if isinstance(exc, httpx.TransportError) else str(exc)
                failures.append(f"{endpoint.url}/v2/: {text}")
                continue
            except BaseException:
                await http.aclose()
                raise
            if response.status_code in (200, 401):
                if response.status_code == 401:
                    self.auth.learn(response)
                self._endpoint, self._http = endpoint, http
                return endpoint
            await http.aclose()
            err = from_response(response.status_code, body, what="ping")
            failures.append(f"{endpoint.url}/v2/: {err}")
        raise Unreachable(f"registry {self.domain} is not reachable: " + "; ".join(failures))

    def url(self, path: str) -> str:
        """An absolute URL: ``path`` (``/v2/...``) on the endpoint, or ``path`` if absolute."""
        if path.startswith(("http://", "https://")):
            return path
        assert self._endpoint is not None, "ping() first"
        return self._endpoint.url + path

    @asynccontextmanager
    async def stream(self, method: str, path: str, *, scopes: tuple[str, ...],
                     ok: tuple[int, ...] = (200,), headers: dict[str, str] | None = None,
                     params: Any = None, content: Body = None,
                     follow_redirects: bool = False, what: str = "", auth: bool = True
                     ) -> AsyncIterator[httpx.Response]:
        """Send a request and yield the response with its body still unread.

        A status outside ``ok`` raises the registry's error (``NotFound``,
        ``Unauthorized``...). Transport failures, before or while the body is read inside
        the ``async with``, raise :class:`Unreachable`. ``auth=False`` sends no credentials
        (a request to another service, such as Docker Hub's search index).
        """
        await self.ping()
        assert self._http is not None
        response = await self._send(method, self.url(path), scopes if auth else None, headers,
                                    params, content, follow_redirects)
        try:
            if response.status_code not in ok:
                body = await read_body(response, ERROR_BODY_MAX, what or path) \
                    if method != "HEAD" else b""
                raise from_response(response.status_code, body, what=what or path)
            yield response
        except httpx.RequestError as exc:
            raise Unreachable(f"{method} {self.url(path)}: {describe(exc)}") from exc
        finally:
            await response.aclose()

    async def request(self, method: str, path: str, *, scopes: tuple[str, ...],
                      ok: tuple[int, ...] = (200,), headers: dict[str, str] | None = None,
                      params: Any = None, content: Body = None, limit: int = SMALL_BODY_MAX,
                      follow_redirects: bool = False, what: str = "",
                      auth: bool = True) -> Answer:
        """Send a request and read its (small) answer whole; errors as :meth:`stream`."""
        async with self.stream(method, path, scopes=scopes, ok=ok, headers=headers,
                               params=params, content=content, auth=auth,
                               follow_redirects=follow_redirects, what=what) as response:
            body = b"" if method == "HEAD" else await read_body(response, limit, what or path)
            return Answer(response.status_code, response.headers, body, response.url)

    async def _send(self, method: str, url: str, scopes: tuple[str, ...] | None,
                    headers: dict[str, str] | None, params: Any, content: Body,
                    follow_redirects: bool) -> httpx.Response:
        assert self._http is not None
        for attempt in (0, 1):
            merged = dict(headers or {})
            authorization = None if scopes is None else \
                await self.auth.authorization(scopes, refresh=attempt > 0)
            if authorization is not None:
                merged["Authorization"] = authorization
            body = content() if callable(content) else content
            request = self._http.build_request(method, url, headers=merged, params=params,
                                               content=body)
            try:
                response = await self._http.send(request, stream=True,
                                                 follow_redirects=follow_redirects)
            except httpx.TransportError as exc:
                raise Unreachable(f"{method} {url}: {describe(exc)}") from exc
            if response.status_code != 401 or attempt > 0 or scopes is None \
                    or not self.auth.learn(response):
                return response
            await response.aclose()
        raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class LoginResult:
    """A successful login; ``identity_token`` is the refresh token a token server gave
    (clients store it instead of the password), ``""`` when it gave none."""

    identity_token: str = ""


async def login(domain: str, credentials: AuthConfig,
                config: RegistryConfig | None = None) -> LoginResult:
    """Check ``credentials`` against ``domain``: ``GET /v2/`` with them (Basic, or a token
    fetched without scope), as ``docker login`` has the engine do.

    A registry that asks for no authentication accepts any login, as with the engines.

    Raises:
        Unauthorized: refused; the message is the registry's (or token server's) reason.
        Unreachable: no answer.
    """
    async with RegistryClient(domain, config=config, credentials=credentials) as client:
        await client.ping()
        if not client.auth.challenges:
            return LoginResult()
        if await client.auth.authorization((), offline=True) is None:
            raise Unauthorized(f"unauthorized: {domain} needs a username and password",
                               status=401, code="UNAUTHORIZED")
        await client.request("GET", "/v2/", scopes=(), what="login")
        return LoginResult(client.auth.refresh_token)
