"""The files svc writes for each container and bind-mounts over /etc: hostname, hosts,
resolv.conf (as moby's ``buildHostnameFile``, ``etchosts.Build`` and ``resolvconf``)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import TYPE_CHECKING

from svc.errors import InvalidParameter
from svc.storage.atomic import atomic_write

if TYPE_CHECKING:
    from svc.engine.containers.container import Container

HOST_RESOLV = Path("/etc/resolv.conf")
DEFAULT_DNS = ("8.8.8.8", "8.8.4.4")
_HOSTS_HEAD = ("127.0.0.1\tlocalhost\n"
               "::1\tlocalhost ip6-localhost ip6-loopback\n"
               "fe00::0\tip6-localnet\n"
               "ff00::0\tip6-mcastprefix\n"
               "ff02::1\tip6-allnodes\n"
               "ff02::2\tip6-allrouters\n")
_LOCAL_NS = re.compile(r"^\s*nameserver\s+(127\.[0-9.]+|::1)\s*$", re.M)


def check_extra_hosts(entries: list[str]) -> list[tuple[str, str]]:
    """``host:ip`` entries (the IP may be IPv6, so split at the first colon)."""
    out = []
    for entry in entries:
        host, sep, ip = entry.partition(":")
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise InvalidParameter(f"invalid IP address in add-host: {ip!r} "
                                   f"(ExtraHosts entry {entry!r})") from None
        if not sep or not host:
            raise InvalidParameter(f"bad format for add-host: {entry!r}")
        out.append((host, ip))
    return out


def check_dns(servers: list[str]) -> None:
    for s in servers:
        try:
            ipaddress.ip_address(s)
        except ValueError:
            raise InvalidParameter(f"{s} is not an ip address (Dns)") from None


def hostname_file(hostname: str) -> bytes:
    """/etc/hostname holds the host name alone; the domain goes into /etc/hosts."""
    return f"{hostname}\n".encode()


def hosts_file(hostname: str, domainname: str, ip: str | None,
               extra: list[tuple[str, str]], host_mode: bool) -> bytes:
    """The container's /etc/hosts; with the host's network, the host's own file plus extras."""
    if host_mode:
        try:
            base = Path("/etc/hosts").read_text(errors="replace")
        except OSError:
            base = _HOSTS_HEAD
    else:
        base = _HOSTS_HEAD
    lines = [base if base.endswith("\n") else base + "\n"]
    lines += [f"{addr}\t{host}\n" for host, addr in extra]
    if ip and not host_mode:
        names = f"{hostname}.{domainname} {hostname}" if domainname else hostname
        lines.append(f"{ip}\t{names}\n")
    return "".join(lines).encode()


def resolv_conf(dns: list[str], search: list[str], options: list[str], *,
                host_mode: bool, source: Path = HOST_RESOLV) -> bytes:
    """The host's resolv.conf, loopback servers removed (they mean nothing in another network
    namespace; Google's are used if none remain), with Dns/DnsSearch/DnsOptions replacing
    the corresponding lines."""
    try:
        text = source.read_text(errors="replace")
    except OSError:
        text = ""
    if not host_mode:
        text = _LOCAL_NS.sub("", text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if dns:
        lines = [ln for ln in lines if not ln.strip().startswith("nameserver")]
        lines += [f"nameserver {s}" for s in dns]
    elif not host_mode and not any(ln.strip().startswith("nameserver") for ln in lines):
        lines += [f"nameserver {s}" for s in DEFAULT_DNS]
    if search:
        lines = [ln for ln in lines if not ln.strip().startswith(("search", "domain"))]
        lines.append("search " + " ".join(d for d in search if d != "."))
    if options:
        lines = [ln for ln in lines if not ln.strip().startswith("options")]
        lines.append("options " + " ".join(options))
    return ("\n".join(lines) + "\n").encode()


def embedded_resolv_conf(search: list[str], options: list[str],
                         source: Path = HOST_RESOLV) -> bytes:
    """resolv.conf for a container on a user network: the embedded server (127.0.0.11), the
    host's (or DnsSearch's) search domains, ``ndots:0`` and DnsOptions, as dockerd writes."""
    try:
        text = source.read_text(errors="replace")
    except OSError:
        text = ""
    host_search = [ln.strip() for ln in text.splitlines()
                   if ln.strip().startswith(("search", "domain"))]
    lines = ["nameserver 127.0.0.11"]
    if search:
        lines.append("search " + " ".join(d for d in search if d != "."))
    else:
        lines += host_search
    lines.append("options " + " ".join(["ndots:0", *options]))
    return ("\n".join(lines) + "\n").encode()


def write(path: Path, data: bytes) -> None:
    """Rewritten at every start, so not fsynced."""
    atomic_write(path, data, mode=0o644, durable=False)


def write_etc(c: Container, address: str | None, link_hosts: list[tuple[str, str]], *,
              embedded_dns: bool, upstream: list[str]) -> None:
    """Blocking: the container's hostname, hosts and resolv.conf files (bound over /etc's):
    with the embedded DNS server (user networks) resolv.conf names the daemon, else the
    Dns servers or the host's ``upstream``."""
    cfg, hc = c.config, c.host_config
    host_mode = hc.NetworkMode == "host"
    extra = check_extra_hosts(list(hc.ExtraHosts or [])) + link_hosts
    hostname = cfg.Hostname or c.short_id
    domain = cfg.Domainname
    write(c.hostname_path, hostname_file(hostname))
    write(c.hosts_path, hosts_file(hostname, domain, address, extra, host_mode))
    if embedded_dns:  # the daemon answers there, forwarding to the Dns servers
        write(c.resolv_conf_path, embedded_resolv_conf(
            list(hc.DnsSearch or []), list(hc.DnsOptions or [])))
    else:
        write(c.resolv_conf_path, resolv_conf(
            list(hc.Dns or []) or upstream,
            list(hc.DnsSearch or []), list(hc.DnsOptions or []),
            host_mode=host_mode))
