"""Listening sockets and the hypercorn configuration svc serves with.

Sockets are made here rather than by hypercorn so that svc controls what dockerd users expect:
the unix socket's mode (0660) and group, refusing to steal a live daemon's socket while
replacing a stale one, TLS only on TCP, and plain TCP only when asked for.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import socket
import ssl
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from hypercorn.config import Config as HyperConfig
from hypercorn.config import Sockets

from svc.config import DaemonConfig

log = logging.getLogger("svc.server")

SOCKET_MODE = 0o660
GRACEFUL_TIMEOUT = 5.0
# Idle connections are never cut by the server (docker-java pools break when they are).
NO_LIMIT = 2**62


class ServerSetupError(Exception):
    pass


@dataclass
class Listeners:
    secure: list[socket.socket] = field(default_factory=list)
    insecure: list[socket.socket] = field(default_factory=list)
    unix_paths: list[Path] = field(default_factory=list)

    def sockets(self) -> Sockets:
        return Sockets(self.secure, self.insecure, [])

    def close(self) -> None:
        for s in self.secure + self.insecure:
            with contextlib.suppress(OSError):
                s.close()
        for path in self.unix_paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


@dataclass(frozen=True)
class HostSpec:
    scheme: str  # "unix" or "tcp"
    path: Path | None = None
    host: str = ""
    port: int = 0


def parse_host(value: str, *, tls: bool) -> HostSpec:
    """``unix:///path`` or ``tcp://HOST:PORT`` (dockerd's -H forms)."""
    if value.startswith("unix://"):
        path = value[len("unix://"):]
        if not path.startswith("/"):
            raise ServerSetupError(f"invalid host {value!r}: the unix socket path must be absolute")
        return HostSpec("unix", path=Path(path))
    if value.startswith("tcp://"):
        parts = urlsplit(value)
        try:
            port = parts.port
        except ValueError:
            raise ServerSetupError(f"invalid host {value!r}: bad port") from None
        host = parts.hostname or "0.0.0.0"
        return HostSpec("tcp", host=host, port=port or (2376 if tls else 2375))
    raise ServerSetupError(f"invalid host {value!r}: use unix:///path or tcp://HOST:PORT")


def _bind_unix(path: Path, group: str) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise ServerSetupError(f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            log.info("replacing stale socket %s", path)
            path.unlink()
        else:
            raise ServerSetupError(f"{path} is in use by a running daemon")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # never world-accessible, not even between bind and chmod
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, SOCKET_MODE)
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        gid = 0
        log.debug("group %r does not exist; %s stays root:root", group, path)
    try:
        os.chown(path, 0 if os.geteuid() == 0 else -1, gid)
    except PermissionError:
        log.warning("cannot give %s to group %r (not root)", path, group)
    return sock


def _bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServerSetupError(f"cannot listen on tcp://{host}:{port}: {exc.strerror}") from None
    return sock


def validate_hosts(config: DaemonConfig) -> list[HostSpec]:
    """Check every -H before anything is touched: syntax, and TLS or an explicit --tls=false."""
    specs = []
    for value in config.hosts:
        spec = parse_host(value, tls=config.tls_enabled)
        if spec.scheme == "tcp" and not config.tls_enabled and config.tls is not False:
            raise ServerSetupError(
                f"refusing to listen on {value} without TLS: pass --tlsverify (with "
                "--tlscacert, --tlscert, --tlskey) or --tls=false to accept unauthenticated "
                "plain TCP")
        specs.append(spec)
    if not specs:
        raise ServerSetupError("no host to listen on: give at least one -H")
    return specs


def open_listeners(config: DaemonConfig) -> Listeners:
    """Bind every -H address. On failure nothing stays bound."""
    out = Listeners()
    try:
        for spec in validate_hosts(config):
            if spec.scheme == "unix":
                assert spec.path is not None
                sock = _bind_unix(spec.path, config.group)
                out.unix_paths.append(spec.path)
                out.insecure.append(sock)
            elif config.tls_enabled:
                out.secure.append(_bind_tcp(spec.host, spec.port))
            else:
                log.warning(
                    "!!! Binding to tcp://%s:%d WITHOUT TLS: anyone who can reach this port has "
                    "root on this machine. Use --tlsverify with client certificates instead. !!!",
                    spec.host, spec.port)
                out.insecure.append(_bind_tcp(spec.host, spec.port))
        for sock in out.secure + out.insecure:
            sock.setblocking(False)
            sock.listen(1024)
    except BaseException:
        out.close()
        raise
    return out


def check_tls_files(config: DaemonConfig) -> None:
    if not config.tls_enabled:
        return
    needed = [("--tlscert", config.tlscert), ("--tlskey", config.tlskey)]
    if config.tlsverify:
        needed.append(("--tlscacert", config.tlscacert))
    for flag, path in needed:
        if not path.is_file():
            raise ServerSetupError(f"{flag}: cannot read {path}")


class _Config(HyperConfig):
    """hypercorn's configuration, with the headers every response gets (``Date``) made once a
    second instead of once per response."""

    _second = -1
    _headers: list[tuple[bytes, bytes]] = []

    def response_headers(self, protocol: str) -> list[tuple[bytes, bytes]]:
        now = int(time.time())
        if now != self._second:
            self._headers = super().response_headers(protocol)
            self._second = now
        return list(self._headers)


def hypercorn_config(config: DaemonConfig) -> HyperConfig:
    hc = _Config()
    hc.keep_alive_timeout = NO_LIMIT
    hc.keep_alive_max_requests = NO_LIMIT
    hc.read_timeout = None
    hc.graceful_timeout = GRACEFUL_TIMEOUT
    hc.h11_max_incomplete_size = 1024 * 1024  # large X-Registry-Auth/-Config headers
    hc.include_server_header = False
    hc.alpn_protocols = ["http/1.1"]  # hijacking is HTTP/1.1 only
    hc.errorlog = logging.getLogger("svc.http")
    debug = config.effective_log_level == "debug"
    hc.accesslog = logging.getLogger("svc.access") if debug else None
    if config.tls_enabled:
        hc.certfile = str(config.tlscert)
        hc.keyfile = str(config.tlskey)
        if config.tlsverify:
            hc.ca_certs = str(config.tlscacert)
            hc.verify_mode = ssl.CERT_REQUIRED
    return hc
