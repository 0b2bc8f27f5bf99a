"""Confining a helper process before it works inside a container's root.

A helper that reads or writes a container's files (``chroot_archive``) runs as host root in the
host's namespaces, and the container's files are hostile input: a container can plant an
``/etc/nsswitch.conf`` and an NSS library that glibc would load into any process that looks a
user name up after entering its root (CVE-2019-14271), or a Python module that a lazy
``import`` would find once ``/`` is the container's. ``confine`` closes every way in that it
can:

1. descriptors other than stdio are closed (no directory of the host to ``fchdir`` back to);
2. the helper gets a network, IPC and UTS namespace of its own, empty, and a private mount
   namespace, in which the container's volumes and bind mounts are bound onto its root at
   their destinations (as dockerd mounts them for ``docker cp``: a path inside a volume
   resolves into the volume, for a running container and for a stopped one alike);
3. ``chroot`` into the root, then the import system is sealed: every module the helper needs
   was imported before, and any later import fails instead of searching the container;
4. capabilities are cut to the few the operation needs (never ``CAP_SYS_CHROOT``, so the
   double-chroot escape is gone, nor ``CAP_SYS_ADMIN``, ``CAP_SYS_PTRACE`` or the network
   ones), in the bounding set too, with ``no_new_privs``, so nothing the helper could be made
   to run gains anything back.

Names never come from the container through glibc: callers write numeric ids only (as moby's
``FileInfoHeaderNoLookups``) or parse ``/etc/passwd`` as data.

Everything here runs in the helper process itself (it was exec'd, never forked from the
daemon), and uses only the libc symbols already in the process (``CDLL(None)``): no library is
searched for or loaded after the chroot.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from svc.storage.securejoin import mkdir_all, secure_join

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

CAP_CHOWN = 0
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
CAP_FOWNER = 3
CAP_FSETID = 4
CAP_MKNOD = 27
CAP_SETFCAP = 31

READ_CAPS = frozenset({CAP_DAC_READ_SEARCH})
WRITE_CAPS = frozenset({CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
                        CAP_FSETID, CAP_MKNOD, CAP_SETFCAP})

_libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(OSError):
    """A confinement step failed; the helper must not go on."""


@dataclass(frozen=True)
class BindMount:
    """A host path (a volume's data, a bind's source) to show at ``destination``."""

    source: str
    destination: str
    readonly: bool = False


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class _NoImports(MetaPathFinder):
    """After the chroot an import would search the container's files: refuse them all."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        raise ImportError(f"import of {fullname} refused inside a container's root")


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {os.strerror(err)}")


def last_cap() -> int:
    """The highest capability number this kernel knows."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def close_other_fds() -> None:
    """Close every descriptor above stderr (an inherited directory fd defeats a chroot)."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))


def seal_imports() -> None:
    """Make every later ``import`` of a module not yet loaded fail."""
    sys.meta_path[:] = [_NoImports()]
    sys.path[:] = []
    sys.path_hooks[:] = []
    sys.path_importer_cache.clear()


def keep_only(caps: Iterable[int], highest: int) -> None:
    """Drop every capability but ``caps`` from the bounding, ambient, permitted, effective
    and inheritable sets, and set ``no_new_privs``."""
    keep = frozenset(caps)
    for cap in range(highest + 1):
        if cap not in keep:
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # EINVAL on old kernels
    mask = [0, 0]
    for cap in keep:
        mask[cap // 32] |= 1 << (cap % 32)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)(*(_CapData(m, m, 0) for m in mask))
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _mount(source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source is not None else None
    _check(_libc.mount(src, target.encode(), None, flags, None), f"mount {target}")


def _mount_point(root: Path, m: BindMount) -> str | None:
    """The path in ``root`` to bind ``m`` over, made if missing (a directory, or an empty
    file for a file's bind), resolved inside ``root``; None when the source is gone."""
    try:
        src = os.stat(m.source)
    except OSError:
        return None
    if stat.S_ISDIR(src.st_mode):
        return str(mkdir_all(root, m.destination))
    parent, _, name = m.destination.rstrip("/").rpartition("/")
    target = mkdir_all(root, parent or "/") / name
    if not os.path.lexists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
    return str(secure_join(root, m.destination))


def bind_mounts(root: str, mounts: Sequence[BindMount]) -> None:
    """Bind each mount onto ``root`` (outer ones first), read-only where it is. Only in this
    process's private mount namespace: nothing shows on the host."""
    for m in sorted(mounts, key=lambda m: m.destination.rstrip("/").count("/")):
        target = _mount_point(Path(root), m)
        if target is None:
            continue
        _mount(m.source, target, MS_BIND | MS_REC)
        if m.readonly:
            _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)


def confine(root: str, caps: Iterable[int], mounts: Sequence[BindMount] = ()) -> None:
    """Enter ``root`` for good with only ``caps`` and ``mounts`` bound in (see the module
    docstring).

    Raises:
        ConfineError: a step failed; the process must exit without touching ``root``.
    """
    highest = last_cap()
    close_other_fds()
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    _mount(None, "/", MS_REC | MS_PRIVATE)
    bind_mounts(root, mounts)
    os.chroot(root)
    os.chdir("/")
    seal_imports()
    keep_only(caps, highest)
