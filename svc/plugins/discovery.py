"""Finding a plugin by name, as the engines of the 1.10/1.11 generation found one.

A plugin is a process that serves HTTP on a unix socket or a TCP address. Its name leads to
its address, in this order:

1. a unix socket ``<dir>/<name>.sock`` or ``<dir>/<name>/<name>.sock`` in each socket
   directory (svc's ``/run/svc/plugins``, then the engines' ``/run/docker/plugins``);
2. a file ``<dir>/<name>.spec`` or ``<name>.json`` (each also under ``<dir>/<name>/``) in each
   spec directory (``/etc/svc/plugins``, ``/usr/lib/svc/plugins``, ``/etc/docker/plugins``,
   ``/usr/lib/docker/plugins``). A ``.spec`` file holds one URL (``unix:///path``,
   ``tcp://host:port``, ``http(s)://...``); a ``.json`` file holds ``{"Addr": ...,
   "TLSConfig": {"CAFile", "CertFile", "KeyFile", "InsecureSkipVerify"}}``.

The directories are settings (``--plugin-dir`` replaces both lists), so a test or a second
daemon keeps to its own. Reading a spec file is blocking and small: callers run it in a
thread.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from svc.errors import InvalidParameter, NotFound

SOCKET_DIRS = (Path("/run/svc/plugins"), Path("/run/docker/plugins"))
SPEC_DIRS = (Path("/etc/svc/plugins"), Path("/usr/lib/svc/plugins"),
             Path("/etc/docker/plugins"), Path("/usr/lib/docker/plugins"))
SCHEMES = ("unix", "tcp", "http", "https")
# a plugin's name is a file name: no separators, nothing hidden
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
NAME_MAX = 250  # a file name's 255 bytes less the suffix: a longer name names no file


class PluginNotFound(NotFound):
    """No socket and no spec file has that name (the engines' words)."""

    def __init__(self, name: str) -> None:
        super().__init__("plugin not found")
        self.name = name


class BadSpec(InvalidParameter):
    """A spec file that names no usable address."""


@dataclass(frozen=True)
class TLSOptions:
    """A ``.json`` spec's ``TLSConfig``. Without a CA the engines skipped verification."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class PluginSpec:
    name: str
    addr: str  # unix:///path, tcp://host:port, http://..., https://...
    tls: TLSOptions | None = None
    source: str = ""  # the socket or file it was found at

    @property
    def scheme(self) -> str:
        return urlsplit(self.addr).scheme


@dataclass(frozen=True)
class Discovery:
    socket_dirs: Sequence[Path] = SOCKET_DIRS
    spec_dirs: Sequence[Path] = SPEC_DIRS

    def lookup(self, name: str) -> PluginSpec:
        """The plugin called ``name``: its socket first, then its spec file (blocking).

        Raises:
            PluginNotFound: nothing has that name.
            BadSpec: its spec file names no usable address.
        """
        if len(name) > NAME_MAX or not NAME_RE.fullmatch(name):
            raise PluginNotFound(name)
        for d in self.socket_dirs:
            for p in _paths(d, name, ".sock"):
                if _is_socket(p):
                    return PluginSpec(name, "unix://" + str(p), source=str(p))
        for d in self.spec_dirs:
            for ext in (".spec", ".json"):
                for p in _paths(d, name, ext):
                    if _is_file(p):
                        return read_spec(name, p)
        raise PluginNotFound(name)

    def scan(self) -> list[str]:
        """Every name a socket or a spec file gives, each once, in lookup order (blocking)."""
        names: dict[str, None] = {}
        for d in self.socket_dirs:
            for p in _walk(d):
                if _is_socket(p) and p.suffix == ".sock":
                    names.setdefault(p.stem)
        for d in self.spec_dirs:
            for p in _walk(d):
                if p.suffix in (".spec", ".json") and p.is_file():
                    names.setdefault(p.stem)
        return [n for n in names if NAME_RE.fullmatch(n)]


def read_spec(name: str, path: Path) -> PluginSpec:
    """A ``.spec`` (one URL) or ``.json`` file, checked so that a bad one is reported by
    its path rather than failing at the first call."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadSpec(f"plugin {name}: cannot read {path}: {exc.strerror}") from None
    tls: TLSOptions | None = None
    if path.suffix == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadSpec(f"plugin {name}: {path} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise BadSpec(f"plugin {name}: {path} must hold a JSON object")
        addr = str(doc.get("Addr") or "")
        t = doc.get("TLSConfig") or {}
        if not isinstance(t, dict):
            raise BadSpec(f"plugin {name}: TLSConfig in {path} must be an object")
        tls = TLSOptions(ca_file=str(t.get("CAFile") or ""),
                         cert_file=str(t.get("CertFile") or ""),
                         key_file=str(t.get("KeyFile") or ""),
                         insecure_skip_verify=bool(t.get("InsecureSkipVerify")))
    else:
        addr = text.strip()
    check_addr(name, addr, path)
    return PluginSpec(name, addr, tls, source=str(path))


def check_addr(name: str, addr: str, where: Path | str) -> None:
    parts = urlsplit(addr)
    if not parts.scheme:
        raise BadSpec(f"plugin {name}: {where}: Unknown protocol in {addr!r}")
    if parts.scheme not in SCHEMES:
        raise BadSpec(f"plugin {name}: {where}: unsupported protocol {parts.scheme!r} "
                      f"(unix, tcp, http or https)")
    if parts.scheme == "unix" and not (parts.path or parts.netloc):
        raise BadSpec(f"plugin {name}: {where}: no socket path in {addr!r}")
    if parts.scheme != "unix" and not parts.netloc:
        raise BadSpec(f"plugin {name}: {where}: no host in {addr!r}")


def _paths(base: Path, name: str, ext: str) -> tuple[Path, Path]:
    return base / (name + ext), base / name / (name + ext)


def _is_socket(p: Path) -> bool:
    try:
        return stat.S_ISSOCK(p.stat().st_mode)
    except OSError:
        return False


def _is_file(p: Path) -> bool:
    try:
        return stat.S_ISREG(p.stat().st_mode)
    except OSError:  # (not only a missing file: a directory it may not read, say)
        return False


def _walk(d: Path) -> list[Path]:
    out: list[Path] = []
    for top, dirs, files in os.walk(d):
        dirs.sort()
        out += [Path(top) / f for f in sorted(files)]
    return out
