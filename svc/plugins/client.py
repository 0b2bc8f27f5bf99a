"""One plugin's HTTP client: ``POST /<Method>`` with a JSON body, a JSON answer back.

What the engines sent, byte for byte where a plugin could notice: the method as the path,
``Accept: application/vnd.docker.plugins.v1.2+json``, the arguments as JSON (an empty body for
``Plugin.Activate``), and an answer other than 200 read as ``{"Err": "..."}`` or, failing that,
as text. ``tcp://`` and ``http://`` addresses are plain HTTP; ``https://`` uses the spec's TLS
settings (without a CA, the engines did not verify the plugin's certificate).

Where the engines were weak this client is bounded: every call has a deadline (a plugin that
hangs costs its caller that long, and nobody else anything), an answer is read up to
``MAX_ANSWER`` bytes, and a caller's cancellation (the client of the daemon went away) closes
the connection at once. A cancelled call leaves nothing behind but that closed connection.
"""

from __future__ import annotations

import json
import ssl
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from svc.errors import Conflict, InvalidParameter, NotFound, SystemError_
from svc.plugins.discovery import PluginSpec, TLSOptions

MIMETYPE = "application/vnd.docker.plugins.v1.2+json"
CALL_TIMEOUT = 30.0  # the engines' defaultTimeOut, here a bound on each call
MAX_ANSWER = 16 << 20


class PluginUnreachable(SystemError_):
    """Nothing answers at the plugin's address (not started, gone, refused)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"plugin {name} is unreachable: {why}")
        self.name = name


class PluginTimeout(SystemError_):
    """The plugin took the connection but did not answer in time."""

    def __init__(self, name: str, method: str, seconds: float) -> None:
        super().__init__(f"{method}: plugin {name} did not answer within {seconds:g}s")
        self.name, self.method = name, method


class PluginBadAnswer(SystemError_):
    """The plugin answered 200 with something that is not the JSON object expected."""


class PluginCallError(SystemError_):
    """The plugin answered with an error: ``"<Method>: <its message>"``, as the engines put
    it. Subclasses carry the status a user should see (``remote_error`` picks one)."""

    def __init__(self, method: str, status: int, err: str) -> None:
        super().__init__(f"{method}: {err}")
        self.method, self.status, self.err = method, status, err


class PluginGone(PluginCallError):
    """The connection broke during the call: the plugin died (or closed it) mid-call. It
    may have acted on the call, so the call is not made again."""


class PluginCallNotFound(PluginCallError, NotFound):
    pass


class PluginCallConflict(PluginCallError, Conflict):
    pass


class PluginCallInvalid(PluginCallError, InvalidParameter):
    pass


def remote_error(method: str, status: int, err: str) -> PluginCallError:
    """The kind of a plugin's error, read from its words as dockerd 1.11 read every error's
    ("not found" is a 404, "in use" or "conflict" a 409, "bad parameter" or "invalid" a 400);
    anything else is the plugin's failure: a 500 with its message."""
    low = err.lower()
    if "not found" in low or "no such" in low:
        return PluginCallNotFound(method, status, err)
    if "in use" in low or "conflict" in low or "already exists" in low:
        return PluginCallConflict(method, status, err)
    if "bad parameter" in low or "invalid" in low:
        return PluginCallInvalid(method, status, err)
    return PluginCallError(method, status, err)


def tls_context(tls: TLSOptions | None) -> ssl.SSLContext:
    """The client side of an ``https://`` plugin, from a ``.json`` spec's TLSConfig."""
    ctx = ssl.create_default_context()
    tls = tls or TLSOptions()
    if tls.ca_file:
        ctx.load_verify_locations(tls.ca_file)
    if tls.insecure_skip_verify or not tls.ca_file:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file or None)
    return ctx


class PluginClient:
    """Calls to one plugin over one pooled connection set; ``aclose`` ends them."""

    def __init__(self, spec: PluginSpec, *, timeout: float = CALL_TIMEOUT) -> None:
        self.spec = spec
        self.timeout = timeout
        parts = urlsplit(spec.addr)
        if parts.scheme == "unix":
            transport = httpx.AsyncHTTPTransport(uds=parts.path or parts.netloc, retries=0)
            self.base = "http://plugin"
        elif parts.scheme == "https":
            transport = httpx.AsyncHTTPTransport(verify=tls_context(spec.tls), retries=0)
            self.base = f"https://{parts.netloc}"
        else:
            transport = httpx.AsyncHTTPTransport(retries=0)
            self.base = f"http://{parts.netloc}"
        self.http = httpx.AsyncClient(transport=transport, trust_env=False, timeout=None)

    async def call(self, method: str, args: Any = None, *,
                   timeout: float | None = None) -> dict[str, Any]:
        """``method``'s answer as a JSON object (``{}`` for an empty 200).

        Raises:
            PluginUnreachable: the connection could not be made (safe to try again: the
                plugin never saw the call).
            PluginTimeout: no whole answer within the deadline.
            PluginGone: the connection broke after the call was sent.
            PluginCallError: the plugin answered with an error.
            PluginBadAnswer: a 200 that is not a JSON object.
        """
        body = b"" if args is None else json.dumps(args).encode() + b"\n"
        seconds = self.timeout if timeout is None else timeout
        with trio.move_on_after(seconds) as scope:
            try:
                status, raw = await self._post(method, body)
            except httpx.ConnectError as exc:
                raise PluginUnreachable(self.spec.name, _why(exc)) from None
            except httpx.TransportError as exc:
                raise PluginGone(method, 0, f"plugin {self.spec.name} went away during "
                                 f"the call: {_why(exc)}") from None
        if scope.cancelled_caught:
            raise PluginTimeout(self.spec.name, method, seconds)
        if status != 200:
            raise remote_error(method, status, _err_text(raw))
        if not raw.strip():
            return {}
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise PluginBadAnswer(f"{method}: plugin {self.spec.name} answered with "
                                  f"something that is not JSON: {_snippet(raw)}") from None
        if not isinstance(doc, dict):
            raise PluginBadAnswer(f"{method}: plugin {self.spec.name} answered "
                                  f"{_snippet(raw)}, not a JSON object")
        return doc

    async def _post(self, method: str, body: bytes) -> tuple[int, bytes]:
        headers = {"Accept": MIMETYPE}
        async with self.http.stream("POST", f"{self.base}/{method}", content=body,
                                    headers=headers) as resp:
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER:
                    raise PluginBadAnswer(f"{method}: plugin {self.spec.name} answered "
                                          f"more than {MAX_ANSWER >> 20} MiB")
                chunks.append(chunk)
            return resp.status_code, b"".join(chunks)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.http.aclose()


def _err_text(raw: bytes) -> str:
    """A refusal's message: the ``Err`` of a JSON body, else the body as text."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict) and doc.get("Err"):
        return str(doc["Err"])
    return raw.decode("utf-8", "replace").strip() or "(no message)"


def _snippet(raw: bytes) -> str:
    text = raw[:80].decode("utf-8", "replace")
    return repr(text + ("..." if len(raw) > 80 else ""))


def _why(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
