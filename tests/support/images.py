"""Test image builders, no internet: layer tars, a busybox rootfs, ``docker save`` tarballs.

Everything is built in memory with the stdlib and is deterministic (fixed mtimes, sorted
entries, gzip mtime 0), so diff ids and image ids are stable across runs. Also here: a pure
model of how docker applies layers (:func:`merged_tree`), used to state what a stack of
layers must look like once mounted, and crafted archives for the extractor's safety tests.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import random
import stat
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack

from svc.wire.reference import parse

FIXED_MTIME = 1_500_000_000  # 2017-07-14T02:40:00Z, for every entry we write
CREATED = "2017-07-14T02:40:00Z"
EPOCH = "1970-01-01T00:00:00Z"  # what docker >= 1.10 writes into non-top v1 layer json
BUSYBOX = os.environ.get("SVC_TEST_BUSYBOX", "/bin/busybox")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
WH_PREFIX = ".wh."
WH_OPAQUE = ".wh..wh..opq"
ESCAPE_TARGET = "/tmp/svc-escape-target"  # where absolute_symlink_parent points

Kind = Literal["file", "dir", "symlink", "hardlink", "fifo", "char", "block"]
Layout = Literal["manifest", "legacy", "both"]

_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
          "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "char": tarfile.CHRTYPE,
          "block": tarfile.BLKTYPE}
_DEFAULT_MODES = {"file": 0o644, "dir": 0o755, "symlink": 0o777, "hardlink": 0o644,
                  "fifo": 0o644, "char": 0o666, "block": 0o660}


class Attrs(TypedDict, total=False):
    """Optional attributes the entry helpers accept."""

    mode: int
    uid: int
    gid: int
    mtime: int
    xattrs: dict[str, bytes]


@dataclass(frozen=True)
class Entry:
    """One tar member of a crafted layer; build them with the helpers below."""

    path: str
    kind: Kind = "file"
    data: bytes = b""
    target: str = ""  # symlink/hardlink target
    mode: int | None = None  # None: the kind's usual mode
    uid: int = 0
    gid: int = 0
    mtime: int = FIXED_MTIME
    major: int = 0
    minor: int = 0
    xattrs: tuple[tuple[str, bytes], ...] = ()  # written as PAX SCHILY.xattr.<name>

    def tarinfo(self) -> tarfile.TarInfo:
        """The tar header for this entry (names are written as given, even unsafe ones)."""
        info = tarfile.TarInfo(self.path)
        info.type = _TYPES[self.kind]
        info.mode = self.mode if self.mode is not None else _DEFAULT_MODES[self.kind]
        info.uid, info.gid, info.mtime = self.uid, self.gid, self.mtime
        info.linkname = self.target
        info.devmajor, info.devminor = self.major, self.minor
        info.size = len(self.data) if self.kind == "file" else 0
        info.pax_headers = {f"SCHILY.xattr.{k}": v.decode("utf-8", "surrogateescape")
                            for k, v in self.xattrs}
        return info


def _entry(path: str, kind: Kind, attrs: Attrs, *, data: bytes = b"", target: str = "",
           major: int = 0, minor: int = 0) -> Entry:
    return Entry(path, kind, data, target, attrs.get("mode"), attrs.get("uid", 0),
                 attrs.get("gid", 0), attrs.get("mtime", FIXED_MTIME), major, minor,
                 tuple(sorted(attrs.get("xattrs", {}).items())))


def file(path: str, data: bytes = b"", **attrs: Unpack[Attrs]) -> Entry:
    """A regular file."""
    return _entry(path, "file", attrs, data=data)


def directory(path: str, **attrs: Unpack[Attrs]) -> Entry:
    """A directory."""
    return _entry(path, "dir", attrs)


def symlink(path: str, target: str, **attrs: Unpack[Attrs]) -> Entry:
    """A symbolic link to ``target`` (relative or absolute, stored verbatim)."""
    return _entry(path, "symlink", attrs, target=target)


def hardlink(path: str, target: str, **attrs: Unpack[Attrs]) -> Entry:
    """A hard link to ``target``, a path inside the same archive."""
    return _entry(path, "hardlink", attrs, target=target)


def fifo(path: str, **attrs: Unpack[Attrs]) -> Entry:
    """A named pipe."""
    return _entry(path, "fifo", attrs)


def char_device(path: str, major: int, minor: int, **attrs: Unpack[Attrs]) -> Entry:
    """A character device node."""
    return _entry(path, "char", attrs, major=major, minor=minor)


def block_device(path: str, major: int, minor: int, **attrs: Unpack[Attrs]) -> Entry:
    """A block device node."""
    return _entry(path, "block", attrs, major=major, minor=minor)


def whiteout(path: str) -> Entry:
    """The AUFS-style whiteout deleting ``path`` from the layers below (``dir/.wh.name``)."""
    parent, _, name = path.rpartition("/")
    return Entry(_join(parent, WH_PREFIX + name), "file", mode=0o600)


def opaque(dir_path: str) -> Entry:
    """The opaque marker hiding everything below ``dir_path`` in lower layers."""
    return Entry(_join(dir_path, WH_OPAQUE), "file", mode=0o755)


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """A PAX tar of ``entries``, in the order given (parents are not added)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            tar.addfile(e.tarinfo(), io.BytesIO(e.data) if e.kind == "file" else None)
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (mtime 0)."""
    return gzip.compress(data, mtime=0)


def uncompressed(layer: bytes) -> bytes:
    """``layer`` itself, or its gunzipped content when it is gzip."""
    return gzip.decompress(layer) if layer[:2] == b"\x1f\x8b" else layer


def sha256_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def diff_id(layer: bytes) -> str:
    """The layer's diff id: the digest of its uncompressed tar."""
    return sha256_digest(uncompressed(layer))


def chain_ids(diff_ids: list[str]) -> list[str]:
    """Docker's chain ids: ``C0 = D0``, ``Cn = sha256(C(n-1) + " " + Dn)``."""
    out: list[str] = []
    for d in diff_ids:
        out.append(sha256_digest(f"{out[-1]} {d}".encode()) if out else d)
    return out


# --- busybox rootfs -----------------------------------------------------------------------

PASSWD = """\
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
svcuser:x:1000:1000:svc test user:/home/svcuser:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
"""
# svcuser is also in staff, so `id` shows a supplementary group.
GROUP = """\
root:x:0:
daemon:x:1:
tty:x:5:
staff:x:50:svcuser
svcuser:x:1000:
nogroup:x:65534:
"""
REQUIRED_APPLETS = (
    "sh", "ls", "cat", "echo", "sleep", "true", "false", "env", "id", "ps", "top", "wget", "nc",
    "ip", "ping", "nslookup", "httpd", "stty", "head", "tail", "mkdir", "touch", "rm",
    "hostname", "grep", "sed", "awk", "date",
)


@functools.cache
def busybox_applets() -> tuple[str, ...]:
    """The applets ``busybox --list`` names (scripts/setup.sh installs busybox-static)."""
    out = subprocess.run([BUSYBOX, "--list"], check=True, capture_output=True, text=True)
    return tuple(sorted(set(out.stdout.split()) - {"busybox"}))


def _rootfs_dirs() -> list[Entry]:
    dirs = ["bin", "dev", "etc", "home", "usr", "usr/bin", "usr/sbin", "var", "var/www"]
    special = [directory("proc", mode=0o555), directory("sys", mode=0o555),
               directory("root", mode=0o700), directory("tmp", mode=0o1777),
               directory("var/tmp", mode=0o1777),
               directory("home/svcuser", uid=1000, gid=1000)]
    return [directory(d) for d in dirs] + special


@functools.cache
def busybox_rootfs_tar(links: Literal["hardlink", "symlink"] = "hardlink") -> bytes:
    """A minimal rootfs: the host's static ``/bin/busybox`` plus one link per applet in /bin.

    Hard links by default, as in docker's busybox image; ``links="symlink"`` writes relative
    ``bin/<applet> -> busybox`` instead. Cached per process; the diff id is stable as long as
    the host binary is the same.
    """
    entries = sorted(_rootfs_dirs(), key=lambda e: e.path.split("/"))
    # The file comes before its hard links: a link must name a member already extracted.
    entries.append(file("bin/busybox", Path(BUSYBOX).read_bytes(), mode=0o755))
    for name in busybox_applets():
        path = f"bin/{name}"
        entries.append(hardlink(path, "bin/busybox") if links == "hardlink"
                       else symlink(path, "busybox"))
    entries += [file("etc/group", GROUP.encode()), file("etc/passwd", PASSWD.encode())]
    return layer_tar(entries)


# --- docker save tarballs -----------------------------------------------------------------

# How docker marshals an empty ContainerConfig (the non-top layers of a >= 1.10 save).
EMPTY_CONTAINER_CONFIG: dict[str, Any] = {
    "Hostname": "", "Domainname": "", "User": "", "AttachStdin": False, "AttachStdout": False,
    "AttachStderr": False, "Tty": False, "OpenStdin": False, "StdinOnce": False, "Env": None,
    "Cmd": None, "Image": "", "Volumes": None, "WorkingDir": "", "Entrypoint": None,
    "OnBuild": None, "Labels": None,
}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class SaveImage:
    """One image of a :func:`docker_save_tar` tarball.

    ``layers`` are layer tars (plain or gzip); ``gzip_layers`` stores the plain ones gzipped
    as ``layer.tar``, as docker load accepts. ``config`` is the image's container config
    (``Cmd``, ``Env``, ...); ``extra`` adds top-level keys to the image config (``author``).
    ``history`` defaults to one ``ADD`` entry per layer.
    """

    layers: list[bytes]
    repo_tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=lambda: {"Env": [PATH_ENV], "Cmd": ["sh"]})
    created: str = CREATED
    history: list[dict[str, Any]] | None = None
    gzip_layers: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def diff_ids(self) -> list[str]:
        """The config's ``rootfs.diff_ids``: digests of the uncompressed layer tars."""
        return [diff_id(layer) for layer in self.layers]

    def history_entries(self) -> list[dict[str, Any]]:
        """The config's ``history``."""
        if self.history is not None:
            return self.history
        return [{"created": self.created,
                 "created_by": f"/bin/sh -c #(nop) ADD file:{d[7:19]} in / "}
                for d in self.diff_ids()]

    def config_json(self) -> bytes:
        """The image config blob; its digest is the image id."""
        doc = {"architecture": "amd64", "os": "linux", "config": self.config,
               "container_config": {"Cmd": self._cmd(-1)}, "created": self.created,
               "docker_version": "1.11.2", "history": self.history_entries(),
               "rootfs": {"type": "layers", "diff_ids": self.diff_ids()}, **self.extra}
        return _dumps(doc)

    def image_id(self) -> str:
        """``sha256:<hex>`` of :meth:`config_json`."""
        return sha256_digest(self.config_json())

    def repo_tag_strings(self) -> list[str]:
        """``repo_tags`` in docker's familiar ``name:tag`` form."""
        return [parse(t).with_default_tag().familiar_string() for t in self.repo_tags]

    def stored_layer(self, i: int) -> bytes:
        """Layer ``i`` as written into ``<id>/layer.tar``."""
        layer = self.layers[i]
        return gzip_bytes(layer) if self.gzip_layers and layer[:2] != b"\x1f\x8b" else layer

    def _layer_history(self, i: int) -> dict[str, Any]:
        """The history entry of layer ``i`` (empty when history and layers do not pair up)."""
        real = [h for h in self.history_entries() if not h.get("empty_layer")]
        return real[i] if real and len(real) == len(self.layers) else {}

    def _cmd(self, i: int) -> list[str]:
        """``container_config.Cmd`` of layer ``i``, from its history ``created_by``."""
        created_by = str(self._layer_history(i).get("created_by", ""))
        shell = "/bin/sh -c "
        if created_by.startswith(shell):
            return ["/bin/sh", "-c", created_by.removeprefix(shell)]
        return [created_by]

    def v1_json(self, i: int, layout: Layout) -> dict[str, Any]:
        """The v1 ``<id>/json`` of layer ``i`` without ``id``/``parent``.

        ``manifest``: what docker >= 1.10 writes (non-top layers are empty shells, the top
        carries the image config). ``legacy``/``both``: pre-1.10 style, every layer with its
        own created time and build command, so a legacy loader rebuilds the history.
        """
        top = i == len(self.layers) - 1
        doc: dict[str, Any] = {"os": "linux"}
        if layout == "manifest" and not top:
            return doc | {"created": EPOCH, "container_config": EMPTY_CONTAINER_CONFIG}
        created = self._layer_history(i).get("created", self.created)
        doc |= {"created": created, "container_config": {"Cmd": self._cmd(i)},
                "architecture": "amd64"}
        return doc | ({"config": self.config, "docker_version": "1.11.2"} if top else {})


def _save_layers(files: dict[str, bytes | str], by_diff: dict[str, str], img: SaveImage,
                 layout: Layout) -> list[str]:
    """Add the ``<v1id>/`` directories of ``img`` to ``files``; return the v1 ids in order.

    Like docker: a v1 id already written (a base shared by two images) is not written again,
    and a diff id already stored under another v1 id becomes a ``layer.tar`` symlink to it.
    """
    ids: list[str] = []
    diff_ids = img.diff_ids()
    for i, (d, chain) in enumerate(zip(diff_ids, chain_ids(diff_ids), strict=True)):
        v1 = img.v1_json(i, layout)
        parent = ids[-1] if ids else ""
        v1id = hashlib.sha256(_dumps([chain, parent, v1])).hexdigest()
        ids.append(v1id)
        if f"{v1id}/json" in files:
            continue
        files[f"{v1id}/VERSION"] = b"1.0"
        files[f"{v1id}/json"] = _dumps({"id": v1id} | ({"parent": parent} if parent else {}) | v1)
        if d in by_diff:
            files[f"{v1id}/layer.tar"] = "../" + by_diff[d]  # a str is a symlink target
        else:
            by_diff[d] = f"{v1id}/layer.tar"
            files[by_diff[d]] = img.stored_layer(i)
    return ids


def docker_save_tar(images: list[SaveImage], *, layout: Layout = "manifest") -> bytes:
    """A ``docker save`` tarball of ``images``.

    Layouts: ``manifest`` is docker 1.10-24 (``manifest.json``, ``<config hex>.json``,
    ``<v1id>/{VERSION,json,layer.tar}``, ``repositories``); ``legacy`` is pre-1.10 (no
    manifest.json nor config: ``repositories`` and per-layer json only, the top layer's json
    carrying the image config); ``both`` has manifest.json and config *and* full legacy json
    in every layer, so either loader path gets the whole image. Members are in docker's
    order (a sorted walk), so manifest.json comes after the layers.
    """
    files: dict[str, bytes | str] = {}
    by_diff: dict[str, str] = {}
    manifest: list[dict[str, Any]] = []
    repos: dict[str, dict[str, str]] = {}
    for img in images:
        ids = _save_layers(files, by_diff, img, layout)
        config_name = img.image_id().removeprefix("sha256:") + ".json"
        if layout != "legacy":
            files[config_name] = img.config_json()
        manifest.append({"Config": config_name, "RepoTags": img.repo_tag_strings() or None,
                         "Layers": [f"{v1id}/layer.tar" for v1id in ids]})
        for tag in img.repo_tags:
            ref = parse(tag).with_default_tag()
            repos.setdefault(ref.familiar_name, {})[str(ref.tag)] = ids[-1]
    if layout != "legacy":
        files["manifest.json"] = _dumps(manifest) + b"\n"
    if repos:
        files["repositories"] = _dumps(repos) + b"\n"
    return _pack(files)


def _pack(files: dict[str, bytes | str]) -> bytes:
    """Tar ``files`` (bytes: a file, str: a symlink target) with their parent directories."""
    entries = [directory(p) for p in {p.rpartition("/")[0] for p in files} - {""}]
    for path, body in files.items():
        entries.append(symlink(path, body) if isinstance(body, str) else file(path, body))
    entries.sort(key=lambda e: e.path.split("/"))
    return layer_tar(entries)


# --- merged trees: what a stack of layers looks like once applied -------------------------


@dataclass(frozen=True)
class Node:
    """One path of a merged tree: ``data`` is a file's content, a symlink's target, or
    ``b"major:minor"`` for a device; ``mode`` the permission bits (``& 0o7777``)."""

    kind: Literal["file", "dir", "symlink", "fifo", "char", "block"]
    data: bytes = b""
    mode: int = 0o644


def merged_tree(layers: Iterable[bytes]) -> dict[str, Node]:
    """Apply ``layers`` (bottom first) the way docker's ``UnpackLayer`` does, in memory.

    Whiteouts delete the named path and everything below it; an opaque marker deletes what
    lower layers had in its directory but keeps what this layer already put there; a
    non-directory replaces whatever was at its path; a directory over a directory keeps the
    children; missing parents appear as 0755 directories. Keys have no leading ``./``.
    """
    tree: dict[str, Node] = {}
    for layer in layers:
        with tarfile.open(fileobj=io.BytesIO(uncompressed(layer))) as tar:
            _apply(tree, tar)
    return tree


def _apply(tree: dict[str, Node], tar: tarfile.TarFile) -> None:
    unpacked: set[str] = set()
    for member in tar:
        path = member.name.removeprefix("./").strip("/")
        parent, _, base = path.rpartition("/")
        if base == WH_OPAQUE:
            prefix = parent + "/" if parent else ""
            for p in [p for p in tree if p.startswith(prefix) and p not in unpacked]:
                del tree[p]
            continue
        if base.startswith(WH_PREFIX):
            _remove(tree, _join(parent, base.removeprefix(WH_PREFIX)))
            continue
        for i, ch in enumerate(path):
            if ch == "/" and path[:i] not in tree:
                tree[path[:i]] = Node("dir", mode=0o755)
        node = _node(tree, tar, member)
        old = tree.get(path)
        if old is not None and not (old.kind == node.kind == "dir"):
            _remove(tree, path)
        tree[path] = node
        unpacked.add(path)


def _node(tree: dict[str, Node], tar: tarfile.TarFile, m: tarfile.TarInfo) -> Node:
    mode = m.mode & 0o7777
    if m.islnk():
        return tree[m.linkname.removeprefix("./").strip("/")]
    if m.isfile():
        f = tar.extractfile(m)
        return Node("file", f.read() if f else b"", mode)
    if m.isdir():
        return Node("dir", mode=mode)
    if m.issym():
        return Node("symlink", m.linkname.encode(), 0o777)
    kind: Literal["fifo", "char", "block"] = "fifo" if m.isfifo() else (
        "char" if m.ischr() else "block")
    return Node(kind, b"" if kind == "fifo" else f"{m.devmajor}:{m.devminor}".encode(), mode)


def _remove(tree: dict[str, Node], path: str) -> None:
    for p in [p for p in tree if p == path or p.startswith(path + "/")]:
        del tree[p]


def tree_from_dir(root: str | os.PathLike[str]) -> dict[str, Node]:
    """Read a directory (an extracted or mounted rootfs) into the :func:`merged_tree` shape."""
    tree: dict[str, Node] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            tree[os.path.relpath(full, root)] = _node_from_stat(full, os.lstat(full))
    return tree


def _node_from_stat(path: str, st: os.stat_result) -> Node:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return Node("symlink", os.fsencode(os.readlink(path)), 0o777)
    if stat.S_ISDIR(st.st_mode):
        return Node("dir", mode=mode)
    if stat.S_ISREG(st.st_mode):
        return Node("file", Path(path).read_bytes(), mode)
    if stat.S_ISFIFO(st.st_mode):
        return Node("fifo", mode=mode)
    dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}".encode()
    return Node("char" if stat.S_ISCHR(st.st_mode) else "block", dev, mode)


# --- crafted layer sets -------------------------------------------------------------------


def whiteout_image_layers() -> list[bytes]:
    """Four layers: add, change (content and mode), delete a file and a directory, make a
    directory opaque, re-create deleted paths, replace a directory by a file, re-point a
    symlink. :func:`whiteout_expected_tree` is the result."""
    return [layer_tar(entries) for entries in (
        [directory("etc"), file("etc/a.conf", b"a1"), file("etc/b.conf", b"b1"),
         directory("data"), file("data/keep", b"k1"), directory("data/old"),
         file("data/old/x", b"x1"), directory("opq"), file("opq/one", b"1"),
         directory("opq/sub"), file("opq/sub/deep", b"d"), directory("swap"),
         file("swap/inner", b"i"), symlink("link", "etc/a.conf"),
         file("run.sh", b"#!/bin/sh\necho 1\n", mode=0o755)],
        [directory("etc"), file("etc/a.conf", b"a2"), whiteout("etc/b.conf"),
         file("etc/c.conf", b"c2"), directory("data"), whiteout("data/old"),
         directory("opq"), opaque("opq"), file("opq/three", b"3"),
         file("run.sh", b"#!/bin/sh\necho 2\n", mode=0o700)],
        [directory("etc"), file("etc/b.conf", b"b3"), whiteout("etc/c.conf"),
         directory("data/old"), file("data/old/y", b"y3"), whiteout("link"),
         directory("new"), file("new/file", b"n3")],
        [file("swap", b"now a file"), symlink("link", "new/file"), directory("opq"),
         file("opq/four", b"4")],
    )]


def whiteout_expected_tree() -> dict[str, Node]:
    """The merged tree of :func:`whiteout_image_layers`, written out by hand."""
    d = Node("dir", mode=0o755)
    return {
        "etc": d, "etc/a.conf": Node("file", b"a2"), "etc/b.conf": Node("file", b"b3"),
        "data": d, "data/keep": Node("file", b"k1"), "data/old": d,
        "data/old/y": Node("file", b"y3"), "opq": d, "opq/three": Node("file", b"3"),
        "opq/four": Node("file", b"4"), "swap": Node("file", b"now a file"),
        "link": Node("symlink", b"new/file", 0o777), "new": d,
        "new/file": Node("file", b"n3"),
        "run.sh": Node("file", b"#!/bin/sh\necho 2\n", 0o700),
    }


def deep_image_layers(n: int = 64) -> list[bytes]:
    """``n`` small layers: layer ``i`` adds ``deep/NNN`` and rewrites ``deep/top`` to ``i``."""
    return [layer_tar([directory("deep"), file(f"deep/{i:03d}", f"{i}\n".encode()),
                       file("deep/top", f"{i}\n".encode())]) for i in range(n)]


def malicious_tars() -> dict[str, bytes]:
    """Crafted archives an extractor must refuse or keep inside its root.

    ``dotdot``: ``../escape``. ``absolute_symlink_parent``: ``a -> ESCAPE_TARGET`` then
    ``a/x``. ``hardlink_outside``: a hard link to ``../../etc/passwd``.
    ``symlink_parent_relative``: ``b -> ../..`` then ``b/x``. ``truncated``: cut in the
    middle of a file's data. ``garbage``: random bytes. ``corrupt_gzip``: a gzip stream of a
    valid tar with bytes flipped mid-stream.
    """
    body = bytes(range(256)) * 256  # 64 KiB, so the cut lands inside the data
    whole = layer_tar([directory("d"), file("d/big", body)])
    broken = bytearray(gzip_bytes(whole))
    for i in range(len(broken) // 2, len(broken) // 2 + 16):
        broken[i] ^= 0xFF
    return {
        "dotdot": layer_tar([file("../escape", b"escaped")]),
        "absolute_symlink_parent": layer_tar([symlink("a", ESCAPE_TARGET),
                                              file("a/x", b"escaped")]),
        "hardlink_outside": layer_tar([hardlink("evil", "../../etc/passwd")]),
        "symlink_parent_relative": layer_tar([symlink("b", "../.."), file("b/x", b"escaped")]),
        "truncated": whole[: 512 * 2 + len(body) // 2],
        "garbage": random.Random(1234).randbytes(8192),
        "corrupt_gzip": bytes(broken),
    }


async def import_busybox(c: Any) -> None:
    """Import the busybox rootfs as ``busybox:latest`` through the API (``c``: an
    ``httpx.AsyncClient`` on a daemon's socket); fails the test if the daemon refuses."""
    r = await c.post("/images/create", params={"fromSrc": "-", "repo": "busybox",
                                               "tag": "latest"},
                     content=busybox_rootfs_tar())
    assert r.status_code == 200, r.text
