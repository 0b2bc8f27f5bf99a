"""Several hosts on one machine: network namespaces linked by an underlay bridge the test
makes, etcd on that underlay, one svcd per host.

Layout (``tag`` is random per cluster, so runs never meet)::

    netns svu<tag>         the underlay: bridge ``ul0`` with 10.250.0.100/24, and etcd
    netns svh<tag><i>      host i: ``eth0`` (10.250.0.<i+1>/24), one end of a veth whose
                           other end (``svv<tag><i>``) is a port of ``ul0``

The addresses exist only inside those namespaces. ``cut(i)``/``heal(i)`` take host i's
underlay port down and up (a partition of that host). ``close()`` stops the daemons and etcd
and deletes the namespaces (and with them every link, address and rule in them), also after
a failed test.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tests.support.daemon import Daemon, import_busybox
from tests.support.etcdd import EtcdServer

SUBNET = "10.250.0"
STORE_IP = f"{SUBNET}.100"
ADVERTISE_PORT = 7946


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def in_ns(ns: str, *argv: str, check: bool = True,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], check=check,
                          capture_output=True, text=True, timeout=timeout)


@dataclass
class Host:
    index: int
    netns: str
    address: str
    port: str  # the underlay bridge's port (in the underlay namespace)
    daemon: Daemon | None = None

    @property
    def advertise(self) -> str:
        return f"{self.address}:{ADVERTISE_PORT}"

    @property
    def d(self) -> Daemon:
        assert self.daemon is not None
        return self.daemon


@dataclass
class Cluster:
    size: int
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: list[Host] = field(default_factory=list)
    etcd: EtcdServer | None = None
    before: set[str] = field(default_factory=set)

    @property
    def underlay(self) -> str:
        return f"svu{self.tag}"

    @property
    def store_url(self) -> str:
        return f"etcd://{STORE_IP}:2379"

    def make(self) -> Cluster:
        """The namespaces, the underlay and etcd (no daemons yet)."""
        self.before = set(_named_netns())
        ip("netns", "add", self.underlay)
        ul = ["-n", self.underlay]
        ip(*ul, "link", "set", "lo", "up")
        ip(*ul, "link", "add", "ul0", "type", "bridge")
        ip(*ul, "addr", "add", f"{STORE_IP}/24", "dev", "ul0")
        ip(*ul, "link", "set", "ul0", "up")
        for i in range(self.size):
            host = Host(i, f"svh{self.tag}{i}", f"{SUBNET}.{i + 1}", f"svv{self.tag}{i}")
            ip("netns", "add", host.netns)
            hn = ["-n", host.netns]
            ip(*hn, "link", "set", "lo", "up")
            ip(*ul, "link", "add", host.port, "type", "veth", "peer", "name", "eth0",
               "netns", host.netns)
            ip(*ul, "link", "set", host.port, "master", "ul0", "up")
            ip(*hn, "addr", "add", f"{host.address}/24", "dev", "eth0")
            ip(*hn, "link", "set", "eth0", "up")
            self.hosts.append(host)
        self.etcd = EtcdServer(STORE_IP, netns=self.underlay).start()
        return self

    def daemon_args(self, extra: Sequence[str] = (), *, heartbeat: int = 1,
                    ttl: int = 3) -> list[str]:
        return ["--cluster-store", self.store_url,
                "--cluster-store-opt", f"discovery.heartbeat={heartbeat}",
                "--cluster-store-opt", f"discovery.ttl={ttl}", *extra]

    def start(self, i: int, extra: Sequence[str] = (), *, wait: bool = True,
              advertise: bool = True, **kw: int) -> Daemon:
        """Start (or start again, on the same root) host ``i``'s daemon."""
        host = self.hosts[i]
        args = self.daemon_args(extra, **kw)
        if advertise:
            args += ["--cluster-advertise", f"eth0:{ADVERTISE_PORT}"]
        if host.daemon is None:
            host.daemon = Daemon(args, netns=host.netns)
        else:
            host.daemon.args = args
        return host.daemon.start(wait=wait)

    def busybox(self, i: int) -> None:
        """``busybox:latest`` imported into host ``i``'s daemon through the API."""
        import_busybox(self.hosts[i].d)

    def cut(self, i: int) -> None:
        ip("-n", self.underlay, "link", "set", self.hosts[i].port, "down")

    def heal(self, i: int) -> None:
        ip("-n", self.underlay, "link", "set", self.hosts[i].port, "up")

    def close(self) -> None:
        for host in self.hosts:
            if host.daemon is not None:
                with contextlib.suppress(Exception):
                    host.daemon.cleanup()
        if self.etcd is not None:
            self.etcd.stop()
        for host in self.hosts:
            ip("netns", "del", host.netns, check=False)
        ip("netns", "del", self.underlay, check=False)
        for left in set(_named_netns()) - self.before:  # overlay sandboxes of the daemons
            if left.startswith("svo-"):
                ip("netns", "del", left, check=False)


def _named_netns() -> list[str]:
    try:
        return os.listdir("/run/netns")
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def cluster(size: int) -> Iterator[Cluster]:
    c = Cluster(size)
    try:
        yield c.make()
    finally:
        c.close()
