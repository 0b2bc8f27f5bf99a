"""Confining a helper process before it works inside a container's root.

A helper that reads or writes a container's files (``chroot_archive``) runs as host root in the
host's namespaces, and the container's files are hostile input: a container can plant an
``/etc/nsswitch.conf`` and an NSS library that glibc would load into any process that looks a
user name up after entering its root (CVE-2019-14271), or a Python module that a lazy
``import`` would find once ``/`` is the container's. ``confine`` closes every way in that it
can:

1. descriptors other than stdio are closed (no directory of the host to ``fchdir`` back to);
2. the helper gets a network, IPC and UTS namespace of its own, empty, before the chroot;
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
import sys
from collections.abc import Iterable, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
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


def confine(root: str, caps: Iterable[int]) -> None:
    """Enter ``root`` for good with only ``caps`` (see the module docstring).

    Raises:
        ConfineError: a step failed; the process must exit without touching ``root``.
    """
    highest = last_cap()
    close_other_fds()
    _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    os.chroot(root)
    os.chdir("/")
    seal_imports()
    keep_only(caps, highest)
