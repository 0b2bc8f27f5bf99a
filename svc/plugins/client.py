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

import trio

from svc.errors import Conflict, InvalidParameter, NotFound, SystemError_
from svc.plugins.discovery import PluginSpec, TLSOptions
from svc.plugins.http1 import Broken, ConnectFailed, Pool, Target, TooLarge

MIMETYPE = "application/vnd.docker.plugins.v1.2+json"
CALL_TIMEOUT = 30.0  # the engines' defaultTimeOut, here a bound on each call
MAX_ANSWER = 16 << 20
# what the engines sent (Go added its User-Agent and Accept-Encoding; no plugin reads them)
HEADERS = [("Accept", MIMETYPE)]


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
    """Calls to one plugin over a small pool of kept-alive connections; ``aclose`` ends
    them."""

    def __init__(self, spec: PluginSpec, *, timeout: float = CALL_TIMEOUT) -> None:
        self.spec = spec
        self.timeout = timeout
        parts = urlsplit(spec.addr)
        if parts.scheme == "unix":
            target = Target(unix=parts.path or parts.netloc)
        else:
            target = Target(host=parts.hostname or "", port=parts.port or
                            (443 if parts.scheme == "https" else 80),
                            tls=tls_context(spec.tls) if parts.scheme == "https" else None)
        self.pool = Pool(target)

    async def call(self, method: str, args: Any = None, *,
                   timeout: float | None = None) -> dict[str, Any]:
        """``method``'s answer as a JSON object (``{}`` for an empty 200).

        Raises:
            PluginUnreachable: the connection could not be made (safe to try again: the
                plugin never saw the call).
            PluginTimeout: no whole answer within the deadline.
            PluginGone: the connection broke after the call was sent.
            PluginCallError: the plugin answered with an error.
            PluginBadAnswer: a 200 that is not a JSON object, or an answer too large.
        """
        body = b"" if args is None else json.dumps(args).encode() + b"\n"
        seconds = self.timeout if timeout is None else timeout
        with trio.move_on_after(seconds) as scope:
            try:
                status, raw = await self.pool.post(f"/{method}", body, HEADERS, MAX_ANSWER)
            except ConnectFailed as exc:
                raise PluginUnreachable(self.spec.name, str(exc)) from None
            except Broken as exc:
                raise PluginGone(method, 0, f"plugin {self.spec.name} went away during "
                                 f"the call: {exc}") from None
            except TooLarge:
                raise PluginBadAnswer(f"{method}: plugin {self.spec.name} answered more "
                                      f"than {MAX_ANSWER >> 20} MiB") from None
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

    async def aclose(self) -> None:
        await self.pool.aclose()


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


