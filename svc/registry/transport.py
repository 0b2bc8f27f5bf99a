"""Where a registry is and how to reach it: endpoints, TLS, timeouts.

The rules are the engines': HTTPS by default, verified against the system CA store plus the
registry's own directory ``<certs_dir>/certs.d/<host[:port]>/`` (``*.crt`` are extra CAs,
``*.cert``/``*.key`` pairs client certificates). A registry is *insecure* when it is on a
loopback address (``localhost``, 127.0.0.0/8, ::1) or named by ``insecure_registries`` (a
``host[:port]`` or a CIDR its address falls in): then HTTPS is tried without verification and
plain HTTP after it. Docker Hub (``docker.io``) is served at ``registry-1.docker.io``; for
pulls the ``registry_mirrors`` come first.

Nothing here sends a request: :func:`endpoints` lists the candidates, the client pings them.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from svc.lazy import lazy_module
from svc.registry.errors import RegistryError

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_module("httpx")

HUB_DOMAIN = "docker.io"
HUB_ENDPOINT = "https://registry-1.docker.io"
HUB_INDEX = "https://index.docker.io"
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


@dataclass(frozen=True)
class RegistryConfig:
    """The daemon's registry settings (one per daemon; the engine builds it from its config).

    Attributes:
        certs_dir: the directory holding ``certs.d/``; None to use the system CAs alone.
        insecure_registries: ``host[:port]`` entries or CIDRs allowed without verified TLS.
        registry_mirrors: base URLs (``https://mirror.example``) tried before Docker Hub.
        connect_timeout / read_timeout: seconds for each connect and for each read or write
            (a stalled transfer fails after ``read_timeout`` without data, however long it
            is).
        user_agent: the ``User-Agent`` header sent to registries and token servers.
    """

    certs_dir: Path | None = None
    insecure_registries: tuple[str, ...] = ()
    registry_mirrors: tuple[str, ...] = ()
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    user_agent: str = "svc"

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect_timeout, read=self.read_timeout,
                             write=self.read_timeout, pool=self.connect_timeout)


@dataclass(frozen=True)
class Endpoint:
    """One base URL to try for a registry (``https://host:port``, no trailing slash)."""

    url: str
    verify_tls: bool = True
    mirror: bool = False
    host: str = field(default="", compare=False)


def split_host(domain: str) -> tuple[str, int | None]:
    """``("127.0.0.1", 5000)`` from ``127.0.0.1:5000``; ``("::1", None)`` from ``[::1]``."""
    if domain.startswith("["):
        host, _, rest = domain[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = domain.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return domain, None


async def is_insecure(domain: str, config: RegistryConfig) -> bool:
    """True for a loopback registry or one that ``insecure_registries`` names.

    A hostname is resolved (through trio, cancellable) only to match CIDR entries; when it
    does not resolve, it is simply not in any of them.
    """
    host, _ = split_host(domain)
    if domain in config.insecure_registries or host in config.insecure_registries:
        return True
    if host.lower() in _LOOPBACK_NAMES:
        return True
    networks = []
    for entry in config.insecure_registries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue
    addresses = await _addresses(host, resolve=bool(networks))
    if any(a.is_loopback for a in addresses):
        return True
    return any(a in n for a in addresses for n in networks if a.version == n.version)


async def _addresses(host: str, *, resolve: bool) -> list[ipaddress.IPv4Address
                                                          | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    if not resolve:
        return []
    try:
        with trio.move_on_after(5):
            infos = await trio.socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            return [ipaddress.ip_address(str(i[4][0]).split("%", 1)[0]) for i in infos]
    except OSError:
        pass
    return []


async def endpoints(domain: str, config: RegistryConfig, *, push: bool = False) -> list[Endpoint]:
    """The base URLs to try for ``domain``, in order (mirrors only for pulls from Hub)."""
    if domain == HUB_DOMAIN:
        found = [] if push else [Endpoint(m.rstrip("/"), mirror=True, host=_url_host(m))
                                 for m in config.registry_mirrors]
        return [*found, Endpoint(HUB_ENDPOINT, host="registry-1.docker.io")]
    if await is_insecure(domain, config):
        return [Endpoint(f"https://{domain}", verify_tls=False, host=domain),
                Endpoint(f"http://{domain}", verify_tls=False, host=domain)]
    return [Endpoint(f"https://{domain}", host=domain)]


def _url_host(url: str) -> str:
    return httpx.URL(url).netloc.decode("ascii")


def tls_context(host: str, config: RegistryConfig, *, verify: bool = True) -> ssl.SSLContext:
    """The TLS settings for ``host`` (``host:port`` as written in ``certs.d``).

    Blocking (reads a few small files): call it from a worker thread.

    Raises:
        RegistryError: a ``*.cert`` without its ``*.key`` (or the reverse), or unreadable
            certificate files.
    """
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if config.certs_dir is None:
        return ctx
    directory = config.certs_dir / "certs.d" / host
    if not directory.is_dir():
        return ctx
    try:
        for ca in sorted(directory.glob("*.crt")):
            if verify:
                ctx.load_verify_locations(cafile=str(ca))
        certs = {p.stem for p in directory.glob("*.cert")}
        keys = {p.stem for p in directory.glob("*.key")}
        for stem in sorted(certs ^ keys):
            have = "certificate" if stem in certs else "key"
            raise RegistryError(f"missing {'key' if have == 'certificate' else 'certificate'}"
                                f" for client {have} {directory / stem}")
        for stem in sorted(certs):
            ctx.load_cert_chain(str(directory / f"{stem}.cert"), str(directory / f"{stem}.key"))
    except (OSError, ssl.SSLError) as exc:
        raise RegistryError(f"cannot load TLS files from {directory}: {exc}") from exc
    return ctx


async def make_http(endpoint: Endpoint, config: RegistryConfig) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for one endpoint: its TLS settings, bounded timeouts, no
    automatic redirects (callers choose: blobs follow them, nothing else does)."""
    verify: ssl.SSLContext | bool = False
    if endpoint.url.startswith("https://"):
        verify = await trio.to_thread.run_sync(
            lambda: tls_context(endpoint.host, config, verify=endpoint.verify_tls))
    return httpx.AsyncClient(verify=verify, timeout=config.timeout(), trust_env=False,
                             headers={"User-Agent": config.user_agent})


async def read_body(response: httpx.Response, limit: int, what: str) -> bytes:
    """The whole body of a streamed response, refusing more than ``limit`` bytes (a manifest,
    an error, a token: small documents a broken or hostile server could make endless)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise RegistryError(f"{what}: answer larger than {limit} bytes")
    return bytes(body)


def describe(exc: httpx.RequestError) -> str:
    """A transport error as one line. httpx's own text is often empty (timeouts, TLS
    failures wrapped by anyio): the first cause with something to say is used."""
    text = ""
    cause: BaseException | None = exc
    while cause is not None and not text:
        text = str(cause)
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout ({type(exc).__name__}){': ' + text if text else ''}"
    return text or type(exc).__name__
