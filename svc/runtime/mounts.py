"""A container's root filesystem: the overlay mount over image layers, unmounting, leftovers.

``mount_overlay`` calls mount(2) itself (from a worker thread) when the options, with every
path absolute, fit in the one page mount(2) takes: a mount(8) process costs some milliseconds
on each container start. Otherwise it runs mount(8) with ``cwd=<layer root>`` so that
``lowerdir=`` can name the layers by their short relative links (``l/ABC...:l/DEF...``) and stay
under that limit even with 100+ layers (docker's overlay2 does the same). A ``chdir`` inside the
daemon would change the cwd of every thread, hence the child process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

import trio

from svc.errors import SystemError_
from svc.runtime.protocol import Device

MNT_DETACH = 2
OVERLAY_PARAMS = Path("/sys/module/overlay/parameters")
# Features that make an upper dir depend on the exact set of lowers (index) or that a later
# kernel or copy-up tool may not understand (redirects, metadata-only copy-up): off, explicitly,
# whatever the module defaults say. Passed only if the running kernel knows the option.
_OFF_FEATURES = ("index", "redirect_dir", "metacopy")
_PAGE = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(None, use_errno=True)


def overlay_options(lower_dirs: Sequence[str], upper: str | None, work: str | None,
                    *, features: Sequence[str] = _OFF_FEATURES) -> str:
    """The mount data string: ``lowerdir=a:b,upperdir=...,workdir=...,<feature>=off``.

    Without ``upper`` and ``work`` the mount is read-only (overlayfs then wants two lowers).
    """
    if not lower_dirs:
        raise ValueError("an overlay needs at least one lower dir")
    parts = ["lowerdir=" + ":".join(lower_dirs)]
    if upper is not None and work is not None:
        parts += [f"upperdir={upper}", f"workdir={work}"]
    parts += [f"{name}=off" for name in features]
    return ",".join(parts)


def supported_off_features(params: Path = OVERLAY_PARAMS) -> list[str]:
    """Which of index/redirect_dir/metacopy this kernel's overlayfs knows (module parameters)."""
    return [name for name in _OFF_FEATURES if (params / name).exists()]


def _relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when inside it (shorter mount data), else absolute."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _mount_data(layer_root: Path, lower_dirs: Sequence[str], upper: Path | None,
                work: Path | None) -> tuple[Path, str, str]:
    """The layer root, the mount data relative to it (for mount(8) run there) and the same
    with every path absolute (for mount(2) from the daemon)."""
    root, features = layer_root.resolve(), supported_off_features()
    rel: tuple[str | None, str | None] = (None, None)  # read-only: no upper and work dirs
    full: tuple[str | None, str | None] = (None, None)
    if upper is not None and work is not None:
        upper, work = upper.resolve(), work.resolve()
        rel = (_relative(upper, root), _relative(work, root))
        full = (str(upper), str(work))
    relative = overlay_options(lower_dirs, *rel, features=features)
    absolute = overlay_options([os.path.join(root, d) for d in lower_dirs], *full,
                               features=features)
    return root, relative, absolute


async def mount_overlay(layer_root: Path, lower_dirs: Sequence[str], upper: Path | None,
                        work: Path | None, target: Path) -> None:
    """Mount an overlay of ``lower_dirs`` (top first, relative to ``layer_root``) on ``target``.

    ``upper`` and ``work`` must exist on one filesystem; ``target`` must exist. Without them
    the overlay is read-only (at least two lower dirs), and its unmount syncs nothing (one
    with an upper dir syncs the whole file system of that dir when it is unmounted).

    Raises:
        SystemError_: mount(2) or mount(8) failed (its reason; the kernel's details are in
            dmesg), or the options exceed a page.

    Cancellation: mount(2) runs to its end; mount(8) is killed. Either way the overlay may
    be mounted (``unmount`` is harmless).
    """
    root, data, direct = _mount_data(layer_root, lower_dirs, upper, work)
    if len(direct) < _PAGE:
        await trio.to_thread.run_sync(_mount_syscall, "overlay", target, "overlay", direct)
        return
    if len(data) >= _PAGE:
        raise SystemError_(f"overlay mount options for {target} are {len(data)} bytes, "
                           f"over the {_PAGE}-byte limit: too many layers")
    result = await trio.run_process(
        ["mount", "-t", "overlay", "overlay", "-o", data, str(target)], cwd=root,
        stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True, check=False)
    if result.returncode != 0:
        msg = result.stderr.decode(errors="replace").strip().splitlines()
        raise SystemError_(f"mounting the overlay on {target} failed: "
                           f"{msg[0] if msg else result.returncode}")


def _mount_syscall(source: str, target: Path, fstype: str, data: str) -> None:
    """Blocking: mount(2); SystemError_ with the kernel's reason (its details in dmesg)."""
    if _libc.mount(source.encode(), os.fsencode(target), fstype.encode(), 0,
                   data.encode()) != 0:
        err = ctypes.get_errno()
        raise SystemError_(f"mounting the overlay on {target} failed: {os.strerror(err)}")


async def mount_device(device: str, target: Path, fstype: str, options: str) -> None:
    """``mount -t fstype -o options device target``: a local volume with driver options
    (tmpfs, a bind of a host directory, a block device), parsed by mount(8) as users know it.

    Raises:
        SystemError_: mount(8) failed (its message).

    Cancellation: mount(8) is killed; the device may be mounted (``unmount`` is harmless).
    """
    argv = ["mount", "-t", fstype or "none", *(["-o", options] if options else []), device,
            str(target)]
    result = await trio.run_process(argv, stdin=subprocess.DEVNULL, capture_stdout=True,
                                    capture_stderr=True, check=False)
    if result.returncode != 0:
        msg = result.stderr.decode(errors="replace").strip().splitlines()
        raise SystemError_(f"mounting {device} ({fstype}) on {target} failed: "
                           f"{msg[0] if msg else result.returncode}")


def unmount(target: Path, *, lazy_fallback: bool = True) -> bool:
    """Unmount ``target``; if it is busy, detach it lazily (``MNT_DETACH``).

    Returns:
        True if something was unmounted, False if ``target`` was not a mount point.

    Raises:
        OSError: umount2 failed otherwise.

    Cancellation: blocking (one syscall; may wait for the filesystem to sync), not a checkpoint.
    """
    for flags in (0, MNT_DETACH) if lazy_fallback else (0,):
        if _libc.umount2(os.fsencode(target), flags) == 0:
            return True
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOENT):
            return False
        if err != errno.EBUSY:
            break
    raise OSError(err, f"umount {target}: {os.strerror(err)}")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts_under(root: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[Path]:
    """Mount points at or below ``root``, deepest first (the order to unmount them in)."""
    base = str(root.resolve()).rstrip("/")
    found = []
    for line in mountinfo.read_text().splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        if point == base or point.startswith(base + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def unmount_all(root: Path) -> list[Path]:
    """Unmount everything at or below ``root`` (crash cleanup); returns what was unmounted.

    Cancellation: blocking, not a checkpoint.
    """
    done: list[Path] = []
    for _ in range(8):  # mounts stacked on one point are listed once: go round again
        points = mounts_under(root)
        if not points:
            break
        for point in points:
            if unmount(point):
                done.append(point)
    return done


_SKIP_DEV = {"pts", "shm", "fd", "mqueue", ".lxc", ".udev", "console"}


def host_devices(dev: Path = Path("/dev")) -> list[Device]:
    """The host's device nodes under /dev, for ``--privileged`` (moby ``HostDevices``).

    Skips /dev/pts, /dev/shm, /dev/mqueue, /dev/fd and /dev/console, which the container gets
    its own of, and symlinks.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(dev):
        here = Path(dirpath)
        if here == dev:
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DEV]
        for name in filenames:
            if here == dev and name in _SKIP_DEV:
                continue
            try:
                st = os.lstat(here / name)
            except OSError:
                continue
            kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else ""
            if kind:
                found.append(Device(str(here / name), kind, os.major(st.st_rdev),
                                    os.minor(st.st_rdev), stat.S_IMODE(st.st_mode), st.st_uid,
                                    st.st_gid))
    return found
