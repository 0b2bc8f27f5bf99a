"""Published ports: HostConfig.PortBindings and PublishAllPorts checked and turned into the
proxy's bindings, and the shapes inspect and the list show them in."""

from __future__ import annotations

import ipaddress
from typing import Any

from svc.engine.networks.remote_api import port_options
from svc.errors import InvalidParameter
from svc.models.containers import ContainerConfig, HostConfigBody, PortBinding
from svc.network.proxy import Binding


def parse_port(spec: str) -> tuple[int, str]:
    """``80/tcp`` (or ``80``) -> (80, "tcp")."""
    port, _, proto = str(spec).partition("/")
    proto = proto or "tcp"
    if proto not in ("tcp", "udp") or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidParameter(f"invalid port specification: {spec!r}: a port 1-65535 and "
                               "tcp or udp (80/tcp)")
    return int(port), proto


def valid_port(spec: str) -> bool:
    try:
        parse_port(spec)
    except InvalidParameter:
        return False
    return True


def _host_range(text: str, key: str) -> tuple[int, int]:
    if not text:
        return 0, 0
    low, _, high = text.partition("-")
    try:
        lo, hi = int(low), int(high or low)
    except ValueError:
        raise InvalidParameter(f"invalid host port {text!r} for {key}: a port or a range "
                               "(8000-8010)") from None
    if not 0 < lo <= hi < 65536:
        raise InvalidParameter(f"invalid host port {text!r} for {key}: 1-65535")
    return lo, hi


def bindings(host_config: HostConfigBody, config: ContainerConfig) -> list[Binding]:
    """What to publish, checked (400 naming the entry): each PortBindings entry, and with
    PublishAllPorts every exposed port not bound otherwise (on any free host port)."""
    out: list[Binding] = []
    bound: set[tuple[int, str]] = set()
    for key, entries in (host_config.PortBindings or {}).items():
        port, proto = parse_port(key)
        bound.add((port, proto))
        for entry in entries or [PortBinding()]:
            host_ip = entry.HostIp
            if host_ip:
                try:
                    ipaddress.ip_address(host_ip)
                except ValueError:
                    raise InvalidParameter(f"invalid host IP {host_ip!r} for {key}") from None
            out.append(Binding(proto, host_ip, _host_range(entry.HostPort, key), port))
    if host_config.PublishAllPorts:
        for key in sorted(config.ExposedPorts or {}):
            port, proto = parse_port(key)
            if (port, proto) not in bound:
                out.append(Binding(proto, "", (0, 0), port))
    return out


def exposed(host_config: HostConfigBody, config: ContainerConfig) -> list[tuple[int, str]]:
    """Every port the container exposes or publishes, sorted. Both were checked at create; a
    key that does not parse (a record of an older svc) is left out, never fails a list."""
    keys = [*(config.ExposedPorts or {}), *(host_config.PortBindings or {})]
    return sorted({parse_port(k) for k in keys if valid_port(k)})


def port_map(host_config: HostConfigBody, config: ContainerConfig,
             published: list[Binding] | None) -> dict[str, Any]:
    """NetworkSettings.Ports: ``"80/tcp": [{"HostIp", "HostPort"}]``, or null if it is only
    exposed (or the container does not run)."""
    out: dict[str, Any] = {f"{p}/{proto}": None for p, proto in exposed(host_config, config)}
    for b in published or []:
        entry = {"HostIp": b.host_ip or "0.0.0.0", "HostPort": str(b.host_port)}
        out.setdefault(f"{b.port}/{b.proto}", None)
        out[f"{b.port}/{b.proto}"] = [*(out[f"{b.port}/{b.proto}"] or []), entry]
    return out


def plugin_options(host_config: HostConfigBody, config: ContainerConfig) -> dict[str, Any]:
    """The ports as a network plugin is told of them (libnetwork's generic options): every
    exposed port, and every published one with its host port or range (0: any)."""
    published = [(b.proto, b.host_ip, b.port, b.host_range[0], b.host_range[1])
                 for b in bindings(host_config, config)]
    return port_options(exposed(host_config, config), published)
