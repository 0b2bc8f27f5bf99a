"""The cluster settings from the daemon's flags: ``--cluster-store``, ``--cluster-advertise``
and ``--cluster-store-opt``, checked and resolved.

``etcd://host:port[,host:port...][/prefix]`` names the members of one etcd cluster and the
key prefix under which every svc daemon of that cluster keeps its records (``svc`` when none
is given). The advertise address is ``<ip|interface>:<port>``: an interface is resolved to its
address when the daemon starts. The options are dockerd's: ``kv.cacertfile``,
``kv.certfile`` and ``kv.keyfile`` for TLS to etcd, and ``discovery.heartbeat`` and
``discovery.ttl`` (seconds, or a Go duration such as ``1500ms`` or ``1m``).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from svc.errors import InvalidParameter

DEFAULT_PREFIX = "svc"
DEFAULT_HEARTBEAT = 20.0  # dockerd's defaults
DEFAULT_TTL = 60.0
KNOWN_OPTS = ("kv.cacertfile", "kv.certfile", "kv.keyfile", "discovery.heartbeat",
              "discovery.ttl")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ClusterConfigError(InvalidParameter):
    """A cluster flag that cannot be used as given."""


@dataclass(frozen=True)
class StoreURL:
    scheme: str
    endpoints: tuple[str, ...]
    prefix: str

    def __str__(self) -> str:
        return f"{self.scheme}://{','.join(self.endpoints)}/{self.prefix}"


def parse_store_url(text: str) -> StoreURL:
    """``etcd://h:p[,h:p...][/prefix]``; a ClusterConfigError naming what is wrong."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ClusterConfigError(f"invalid --cluster-store {text!r}: expected "
                                 "etcd://host:port[,host:port...][/prefix]")
    if scheme != "etcd":
        raise ClusterConfigError(f"unsupported cluster store {scheme!r} in {text!r}: svc "
                                 "keeps its cluster state in etcd (etcd://host:port)")
    hosts, _, prefix = rest.partition("/")
    endpoints = tuple(h.strip() for h in hosts.split(",") if h.strip())
    if not endpoints:
        raise ClusterConfigError(f"invalid --cluster-store {text!r}: no etcd address")
    for e in endpoints:
        _check_host_port(e, f"--cluster-store {text!r}")
    prefix = prefix.strip("/") or DEFAULT_PREFIX
    if any(not part or part in (".", "..") for part in prefix.split("/")):
        raise ClusterConfigError(f"invalid --cluster-store {text!r}: bad key prefix")
    return StoreURL(scheme, endpoints, prefix)


def _check_host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterConfigError(f"invalid {what}: {text!r} is not host:port")
    host = host.removeprefix("[").removesuffix("]")
    if not re.fullmatch(r"[A-Za-z0-9.\-:]+", host):
        raise ClusterConfigError(f"invalid {what}: {host!r} is not a host name or address")
    return host, int(port)


def parse_duration(text: str, what: str) -> float:
    """Seconds from ``20`` (dockerd's integer seconds) or a Go duration (``1m30s``)."""
    text = text.strip()
    if text.isdigit():
        return float(text)
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ClusterConfigError(f"invalid --cluster-store-opt {what}={text!r}: expected "
                                 "seconds or a duration such as 20s")
    return total


@dataclass(frozen=True)
class ClusterOptions:
    cacert: str = ""
    cert: str = ""
    key: str = ""
    heartbeat: float = DEFAULT_HEARTBEAT
    ttl: float = DEFAULT_TTL

    def tls(self) -> ssl.SSLContext | None:
        """The TLS context to reach etcd with, or None for plain HTTP."""
        if not (self.cacert or self.cert or self.key):
            return None
        try:
            ctx = ssl.create_default_context(cafile=self.cacert or None)
            if self.cert:
                ctx.load_cert_chain(self.cert, self.key or None)
        except (OSError, ssl.SSLError) as exc:
            raise ClusterConfigError(f"cannot use the cluster store's TLS files: {exc}") \
                from None
        return ctx


def parse_options(opts: Mapping[str, str]) -> ClusterOptions:
    unknown = sorted(set(opts) - set(KNOWN_OPTS))
    if unknown:
        raise ClusterConfigError(f"unknown --cluster-store-opt {unknown[0]!r} (known: "
                                 f"{', '.join(KNOWN_OPTS)})")
    heartbeat = parse_duration(opts["discovery.heartbeat"], "discovery.heartbeat") \
        if "discovery.heartbeat" in opts else DEFAULT_HEARTBEAT
    ttl = parse_duration(opts["discovery.ttl"], "discovery.ttl") \
        if "discovery.ttl" in opts else DEFAULT_TTL
    if heartbeat <= 0 or ttl <= heartbeat:
        raise ClusterConfigError("--cluster-store-opt: discovery.ttl must be longer than "
                                 f"discovery.heartbeat (ttl {ttl:g}s, heartbeat "
                                 f"{heartbeat:g}s)")
    if bool(opts.get("kv.certfile")) != bool(opts.get("kv.keyfile")):
        raise ClusterConfigError("--cluster-store-opt: kv.certfile and kv.keyfile go "
                                 "together")
    return ClusterOptions(opts.get("kv.cacertfile", ""), opts.get("kv.certfile", ""),
                          opts.get("kv.keyfile", ""), heartbeat, ttl)


def resolve_advertise(text: str, lookup: Callable[[str], str | None]) -> str:
    """``ip:port`` from ``<ip|interface>:<port>``; ``lookup`` finds an interface's address."""
    host, port = _check_host_port(text, f"--cluster-advertise {text!r}")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        found = lookup(host)
        if found is None:
            raise ClusterConfigError(f"invalid --cluster-advertise {text!r}: no interface "
                                     f"{host!r} with an address") from None
        address = ipaddress.ip_address(found)
    if address.is_unspecified:
        raise ClusterConfigError(f"invalid --cluster-advertise {text!r}: the address must "
                                 "be one other hosts can reach")
    if address.version == 6:
        raise ClusterConfigError(f"invalid --cluster-advertise {text!r}: svc's overlay "
                                 "tunnels run over IPv4; give an IPv4 address or interface")
    return f"{address}:{port}"
