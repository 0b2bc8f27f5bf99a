"""A container's filesystem: changes, export, archive (stat/get/put), copy, and commit.

Reads and writes of paths go through ``svc.storage.chroot_archive`` run as a child chrooted
into the container's root: its overlay (mounted for the duration if the container is
stopped) with its volumes and bind mounts bound in, in the helper's private mount namespace.
Symlinks therefore resolve inside the container, never on the host, and a path inside a
volume is the volume's.

Cancellation: a cancelled stream kills the child; a half-done ``put`` leaves what it had
extracted (as an interrupted ``docker cp`` does).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from svc.engine.containers.container import Container
from svc.engine.containers.run import Runner
from svc.engine.containers.state import State
from svc.engine.images import config as imageconfig
from svc.engine.images.service import Image, ImageService
from svc.engine.volumes.base import LOCAL
from svc.errors import Forbidden, InvalidParameter, NotFound, PathNotFound, SvcError, SystemError_
from svc.runtime.protocol import Runtime, RuntimeFailure
from svc.storage.layerproduce import produce_layer
from svc.storage.tarformat import OPAQUE_XATTR

# -I: no PYTHON* variables, no user site; the helper is exec'd, never forked from the daemon.
HELPER = [sys.executable, "-I", "-m", "svc.storage.chroot_archive"]
READ = 1 << 16
MakeConfig = Callable[[Image, str], bytes]  # (the container's image, the new diff id)
KINDS: dict[str, type[SvcError]] = {"not_found": NotFound, "invalid": InvalidParameter,
                                    "forbidden": Forbidden, "system": SystemError_}


PATH_MAX = 4096


def _check_path(path: str) -> None:
    if "\0" in path or len(path) > PATH_MAX:
        raise InvalidParameter(f"invalid path {path[:64]!r}: no NUL byte, at most {PATH_MAX} "
                               "bytes")


def _gone_or(c: Container, err: SvcError) -> SvcError:
    """The helper could not enter the root because the container was removed meanwhile (its
    directory went): that is a 404, as for any removed container."""
    if isinstance(err, SystemError_) and c.state.status is State.REMOVING:
        return NotFound(f"No such container: {c.id}")
    return err


def _error(stderr: bytes, fallback: str, c: Container | None = None,
           path: str = "") -> SvcError:
    for line in stderr.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            doc = json.loads(line)
            if doc["kind"] == "not_found" and c is not None and path:
                return PathNotFound(path, c.name.lstrip("/"))
            return KINDS.get(doc["kind"], InvalidParameter)(str(doc["message"]))
    return InvalidParameter(fallback + (": " + stderr.decode(errors="replace").strip()
                                        if stderr.strip() else ""))


class ContainerFS:
    def __init__(self, runner: Runner, images: ImageService, runtime: Runtime) -> None:
        self.runner = runner
        self.images = images
        self.runtime = runtime  # pause and resume around a commit

    @asynccontextmanager
    async def root(self, c: Container, *, volumes: bool = True) -> AsyncIterator[list[str]]:
        """The helper's first arguments while the block runs: the container's overlay root
        (mounted for the block if the container is stopped, unmounted by the last user) and,
        with ``volumes``, its volumes and bind mounts to bind in (JSON). Running or stopped,
        the container's files are seen as dockerd shows them to ``docker cp``: through its
        own mounts, not through a process (whose exit would pull the root away mid-way)."""
        # a plugin's volume is there only while the container runs (mounted for it)
        binds = [[str(m.Source), str(m.Destination), not m.RW] for m in c.mounts
                 if m.Type in ("bind", "volume") and m.Source
                 and (m.Type == "bind" or m.Driver in ("", LOCAL) or c.live is not None)
                 ] if volumes else []
        if c.state.status is State.REMOVING:
            raise NotFound(f"No such container: {c.id}")
        c.fs_users += 1  # a running container's teardown leaves the overlay to the last user
        try:
            await self.runner.mount(c)
            yield [str(c.rootfs), json.dumps(binds)]
        finally:
            c.fs_users -= 1
            if c.fs_users == 0 and c.live is None:
                with trio.CancelScope(shield=True):
                    await self.runner.unmount(c, unless_used=True)

    def image_view(self, c: Container) -> contextlib.AbstractAsyncContextManager[Path]:
        """``c``'s image as its root shows it, read-only, for look-ups in a container that
        never ran (``Runner.image_view``)."""
        return self.runner.image_view(c)

    # -- archive ----------------------------------------------------------------------------

    async def stat(self, c: Container, path: str) -> dict[str, Any]:
        _check_path(path)
        async with self.root(c) as root:
            result = await trio.run_process([*HELPER, "stat", *root, path],
                                            capture_stdout=True, capture_stderr=True,
                                            check=False)
        if result.returncode != 0:
            raise _gone_or(c, _error(result.stderr, f"cannot stat {path}", c, path))
        return dict(json.loads(result.stdout))

    async def get(self, c: Container, path: str) -> AsyncIterator[dict[str, Any] | bytes]:
        """An async generator: first the path status (errors are raised by that first step,
        before anything is sent), then the tar's chunks."""
        _check_path(path)
        async with self.root(c) as root, _helper("get", *root, path) as proc:
            first, rest = await _first_line(proc)
            if first is None:
                await proc.wait()
                raise _gone_or(c, _error(await _read_all(proc.stderr), f"cannot read {path}", c,
                                               path))
            yield dict(json.loads(first))
            async for chunk in _chunks(proc, rest):
                yield chunk

    async def export(self, c: Container) -> AsyncIterator[bytes]:
        """An async generator: ``b""`` once the export has started, then the tar's chunks."""
        async with self.root(c, volumes=False) as root, _helper("export", *root) as proc:
            yield b""
            async for chunk in _chunks(proc, b""):
                yield chunk
        self.runner.event(c, "export")

    async def put(self, c: Container, path: str, body: AsyncIterator[bytes], *,
                  no_overwrite_dir_non_dir: bool, volumes: bool = True) -> None:
        """Extract the tar ``body`` at ``path``: through the container's volumes and bind
        mounts as ``docker cp`` does, or with ``volumes=False`` into its root filesystem
        alone (the builder's COPY, whose files must land in the committed layer)."""
        _check_path(path)
        if c.host_config.ReadonlyRootfs and not _in_rw_bind(c, path):
            raise Forbidden("container rootfs is marked read-only")
        if _in_ro_bind(c, path):
            raise Forbidden(f"the volume mounted at {path} is read-only")
        args = ["--no-overwrite-dir-non-dir"] if no_overwrite_dir_non_dir else []
        async with self.root(c, volumes=volumes) as root, _helper("put", *root, path, *args,
                                                                  stdin=True) as proc:
            assert proc.stdin is not None
            try:
                async for chunk in body:
                    await proc.stdin.send_all(chunk)
            except trio.BrokenResourceError:
                pass  # the helper stopped reading: its exit status says why
            finally:
                await proc.stdin.aclose()
            stderr = await _read_all(proc.stderr)
            code = await proc.wait()
        if code != 0:
            raise _gone_or(c, _error(stderr, f"cannot extract into {path}", c, path))

    # -- changes, commit --------------------------------------------------------------------

    async def changes(self, c: Container) -> list[dict[str, Any]]:
        image = self.images.images.get(c.image_id)
        layers = self.images.layers
        lowers = [c.init_dir] + [layers.root / d for d in c.build_lowers] + (
            [layers.root / d for d in layers.lower_dirs(image.chain[-1])]
            if image is not None and image.chain else [])
        return await trio.to_thread.run_sync(upper_changes, c.upper_dir, lowers)

    async def _pause_for_commit(self, c: Container) -> bool:
        """Pause a running ``c`` for the commit; whether it was paused. A container that
        exits meanwhile is committed without a pause; one that a restart replaced meanwhile
        has its new process paused (a few tries, as a stop and a start can race the commit)."""
        for _ in range(3):
            live = c.live
            if c.state.status is not State.RUNNING or live is None:
                return False
            try:
                await self.runtime.pause(c.id)
                return True
            except RuntimeFailure:
                if await self.runner.settle_exit(c) or c.live is not live:
                    continue  # it exited, or it was restarted: look again
                raise  # still running and yet it cannot be paused
        return False

    async def _resume_after_commit(self, c: Container) -> None:
        """Resume what the commit paused; a container killed meanwhile (a stop or kill
        during the commit) is not there to resume, and that is no error of the commit."""
        try:
            await self.runtime.resume(c.id)
        except RuntimeFailure:
            if not await self.runner.settle_exit(c):
                raise

    async def commit(self, c: Container, *, repo_config: dict[str, Any] | None,
                     changes: list[str], comment: str, author: str,
                     pause: bool, make_config: MakeConfig | None = None) -> Image:
        """A new image: the container's image plus a layer made from its upper dir. The
        builder passes ``make_config(image, diff_id)`` to write the config itself."""
        image = self.images.images.get(c.image_id)
        if image is None:
            raise NotFound(f"the image {c.image_id} of container {c.id} is gone")
        paused_here = pause and await self._pause_for_commit(c)
        try:
            staged_file = await trio.to_thread.run_sync(_produce_to_temp, c.upper_dir,
                                                        self.images.layers.root)
        finally:
            if paused_here:  # a client gone mid-commit must not leave the container frozen
                with trio.CancelScope(shield=True):
                    await self._resume_after_commit(c)
        try:
            parent = image.chain[-1] if image.chain else None
            with open(staged_file, "rb") as f:  # noqa: ASYNC230 - opened here, read in a thread
                async with self.images.layer_lock:
                    layer = await trio.to_thread.run_sync(self.images.layers.register, f, parent)
                    self.images.pins[layer.chain_id] += 1
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(os.unlink, staged_file)
        chain = [*image.chain, layer.chain_id]
        try:
            config = make_config(image, layer.diff_id) if make_config else \
                imageconfig.commit_config(
                    image.config, c.config, container_id=c.id,
                    diff_id=layer.diff_id, created_ns=time.time_ns(), comment=comment,
                    author=author, changes=changes, overrides=repo_config, empty_layer=False)
            async with self.images.lock:
                new = await self.images.commit_image(config, chain, image.id)
        finally:
            await self.images.release_layers([layer.chain_id])
        return new


def _produce_to_temp(upper: Path, tmp_dir: Path) -> str:
    """The upper dir as a layer tar in a temp file (removed if it cannot be written whole).
    A container never started has no upper dir yet: its layer is the empty one, as the
    engines committed it (an image of its base and its config)."""
    fd, name = tempfile.mkstemp(prefix="tmp-commit-", dir=tmp_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            if upper.is_dir():
                produce_layer(upper, out)
            else:
                with tempfile.TemporaryDirectory(prefix="tmp-commit-empty-", dir=tmp_dir) as e:
                    produce_layer(Path(e), out)
    except BaseException:
        os.unlink(name)
        raise
    return name


def _in_bind(c: Container, path: str) -> tuple[bool, bool]:
    """(inside a mount point, that mount is read-only) for an absolute container path: the
    deepest mount point holding it decides."""
    p = "/" + path.strip("/")
    best: tuple[int, bool] | None = None
    for m in c.mounts:
        dest = "/" + str(m.Destination).strip("/")
        if (p == dest or p.startswith(dest.rstrip("/") + "/")) and \
                (best is None or len(dest) > best[0]):
            best = (len(dest), not m.RW)
    return (False, False) if best is None else (True, best[1])


def _in_rw_bind(c: Container, path: str) -> bool:
    inside, ro = _in_bind(c, path)
    return inside and not ro


def _in_ro_bind(c: Container, path: str) -> bool:
    inside, ro = _in_bind(c, path)
    return inside and ro


def path_stat_header(info: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(info).encode()).decode()


@asynccontextmanager
async def _helper(*args: str, stdin: bool = False) -> AsyncIterator[trio.Process]:
    proc = await trio.lowlevel.open_process(
        [*HELPER, *args], stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    await stream.aclose()


async def _read_all(stream: trio.abc.ReceiveStream | None) -> bytes:
    if stream is None:
        return b""
    out = bytearray()
    while chunk := await stream.receive_some(READ):
        out += chunk
    return bytes(out)


async def _first_line(proc: trio.Process) -> tuple[bytes | None, bytes]:
    assert proc.stdout is not None
    buf = bytearray()
    while b"\n" not in buf:
        chunk = await proc.stdout.receive_some(READ)
        if not chunk:
            return None, b""
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    return line, rest


async def _chunks(proc: trio.Process, first: bytes) -> AsyncIterator[bytes]:
    assert proc.stdout is not None
    if first:
        yield first
    while chunk := await proc.stdout.receive_some(READ):
        yield bytes(chunk)
    code = await proc.wait()
    if code not in (0,):
        stderr = await _read_all(proc.stderr)
        raise _error(stderr, "reading the container's files failed")


def upper_changes(upper: Path, lowers: list[Path]) -> list[dict[str, Any]]:
    """Kind 0 (modified), 1 (added), 2 (deleted) for each path in the upper dir (blocking)."""
    out: list[dict[str, Any]] = []
    for dirpath, dirs, files in os.walk(upper):
        rel_dir = os.path.relpath(dirpath, upper)
        for name in sorted(dirs + files):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                out.append({"Path": "/" + rel, "Kind": 2})
                continue
            kind = 0 if _in_lowers(rel, lowers) else 1
            out.append({"Path": "/" + rel, "Kind": kind})
        dirs.sort()
    out.sort(key=lambda ch: ch["Path"])
    return out


def _in_lowers(rel: str, lowers: list[Path]) -> bool:
    parts = rel.split("/")
    for lower in lowers:
        try:
            st = os.lstat(lower / rel)
        except (FileNotFoundError, NotADirectoryError):
            if _opaque_above(lower, parts):
                return False
            continue
        return not (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0)
    return False


def _opaque_above(lower: Path, parts: list[str]) -> bool:
    cur = lower
    for part in parts[:-1]:
        cur = cur / part
        try:
            if os.getxattr(cur, OPAQUE_XATTR, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False
