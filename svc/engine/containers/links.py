"""Legacy links on the default bridge (``--link name:alias``): the linked container's address
in /etc/hosts and dockerd's environment variables, and the extra names a linked container is
listed under (``/linker/alias``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from svc.engine.containers.container import Container
    from svc.engine.networks.service import NetworkService

from svc.engine.networks import ports
from svc.errors import Conflict, InvalidParameter


def parse_link(entry: str) -> tuple[str, str]:
    """``name[:alias]`` -> (name, alias)."""
    name, _, alias = entry.partition(":")
    name, alias = name.lstrip("/"), (alias or name).lstrip("/")
    if not name or not alias or "/" in alias:
        raise InvalidParameter(f"invalid link {entry!r}: use <container>[:<alias>]")
    return name, alias


def hosts_entry(alias: str, name: str, cid: str, ip: str) -> tuple[str, str]:
    """The /etc/hosts line (names, address) for a link, as an ExtraHosts entry."""
    names = [alias, cid[:12]] + ([name] if name != alias else [])
    return " ".join(names), ip


def environment(alias: str, linker: str, linked_env: list[str], ports: list[tuple[int, str]],
                ip: str) -> list[str]:
    """dockerd's link variables: ``ALIAS_NAME``, ``ALIAS_PORT...`` for each exposed port (the
    lowest as ``ALIAS_PORT``), and ``ALIAS_ENV_X`` for the linked container's Env."""
    prefix = alias.upper().replace("-", "_")
    env = [f"{prefix}_NAME=/{linker.lstrip('/')}/{alias}"]
    for i, (port, proto) in enumerate(sorted(ports)):
        url = f"{proto}://{ip}:{port}"
        if i == 0:
            env.append(f"{prefix}_PORT={url}")
        key = f"{prefix}_PORT_{port}_{proto.upper()}"
        env += [f"{key}={url}", f"{key}_ADDR={ip}", f"{key}_PORT={port}",
                f"{key}_PROTO={proto}"]
    for item in linked_env:
        key, sep, value = item.partition("=")
        if sep and key not in ("HOME", "PATH"):
            env.append(f"{prefix}_ENV_{key}={value}")
    return env


def link_names(containers: list[Container]) -> dict[str, list[str]]:
    """Container id -> the ``/linker/alias`` names that links give it (for the list)."""
    by_name = {c.name.lstrip("/"): c.id for c in containers}
    out: dict[str, list[str]] = {}
    for c in containers:
        for entry in c.host_config.Links or []:
            try:
                name, alias = parse_link(entry)
            except InvalidParameter:
                continue
            target = by_name.get(name)
            if target is not None:
                out.setdefault(target, []).append(f"{c.name}/{alias}")
    return out


def resolve_links(c: Container, resolve: Callable[[str], Container],
                  networks: NetworkService) -> tuple[list[tuple[str, str]], list[str]]:
    """/etc/hosts entries and variables of ``c``'s links; each linked container must run
    on the default bridge (409 otherwise, with dockerd's words)."""
    hosts: list[tuple[str, str]] = []
    env: list[str] = []
    for entry in c.host_config.Links or []:
        name, alias = parse_link(entry)
        other = resolve(name)
        found = [info for net, info in networks.of_container(other.id)
                 if net.builtin and net.name == "bridge"]
        if other.live is None or not found:
            raise Conflict(f"Cannot link to a non running container: {other.name} AS "
                           f"{c.name}/{alias}")
        ip = found[0].endpoint.address
        hosts.append(hosts_entry(alias, other.bare_name, other.id, ip))
        env += environment(alias, c.name, list(other.config.Env or []),
                           ports.exposed(other.host_config, other.config), ip)
    return hosts, env
