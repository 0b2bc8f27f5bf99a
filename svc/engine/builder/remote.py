"""``remote=``: a context the daemon fetches itself (only the SDKs send it; the CLI clones
and downloads on its own side).

- a git URL (``git://``, ``git@``, ``github.com/...``, or an http(s) URL ending in
  ``.git``), with ``#ref:subdir``: a shallow clone on the host (with its submodules, git
  reading nothing from a terminal nor stdin), bounded in time
  (``GIT_SECONDS``) and size (``MAX_BYTES``), over network protocols only (never
  ``file://`` or a local path: the daemon's own files are no build material);
- an http(s) URL of a tar archive (any compression): the context;
- an http(s) URL of anything else: the text of the instructions file, alone in the context.

Cancellation: the clone or download is stopped; the caller removes the work directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from functools import partial
from pathlib import Path

import trio

from svc.engine.builder.context import MAX_BYTES, Context, ContextError, unpack
from svc.engine.builder.fetch import fetch_to
from svc.engine.builder.sources import is_archive

GIT_SECONDS = 300
DOWNLOAD_SECONDS = 300
MAX_SVCFILE_TEXT = 4 << 20
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": "http:https:git:ssh",
            "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent", "GIT_ASKPASS": "/bin/false"}


def is_git(url: str) -> bool:
    base = url.split("#", 1)[0]
    return url.startswith(("git://", "git@", "github.com/")) or (
        url.startswith(("http://", "https://")) and base.endswith(".git"))


async def fetch(url: str, work: Path) -> tuple[Context, bool]:
    """The context ``url`` names, in ``work``; and whether it is only an instructions file
    (the ``svcfile`` parameter then does not apply)."""
    if is_git(url):
        return await _git(url, work), False
    if not url.startswith(("http://", "https://")):
        raise ContextError(f"remote: unsupported URL {url!r}: a git URL, or an http(s) URL "
                           "of a tar archive or of an instructions file")
    blob = work / "remote"
    await _download(url, blob)
    if await trio.to_thread.run_sync(is_archive, blob):
        with open(blob, "rb") as f:  # noqa: ASYNC230 - read in the worker thread
            ctx = await trio.to_thread.run_sync(unpack, f, work / "context")
        return ctx, False
    root = work / "context"
    await trio.to_thread.run_sync(partial(root.mkdir, mode=0o700))
    size = blob.stat().st_size
    if size > MAX_SVCFILE_TEXT:
        raise ContextError(f"remote: {url} is neither a tar archive nor an instructions file "
                           f"(it has {size} bytes)")
    await trio.to_thread.run_sync(os.rename, blob, root / "Dockerfile")
    return await trio.to_thread.run_sync(_hashed, root, work), True


async def _download(url: str, dest: Path) -> None:
    await fetch_to(url, dest, limit=MAX_BYTES, deadline=DOWNLOAD_SECONDS,
                   fail=lambda m: ContextError(f"remote: {m}"))


def _split_fragment(url: str) -> tuple[str, str, str]:
    base, _, fragment = url.partition("#")
    ref, _, subdir = fragment.partition(":")
    if base.startswith("github.com/"):
        base = "https://" + base
    return base, ref, subdir


async def _git(url: str, work: Path) -> Context:
    base, ref, subdir = _split_fragment(url)
    if base.startswith(("-", "file:", "/", "ext::")):
        raise ContextError(f"remote: unsupported git URL {base!r}")
    clone = work / "git"
    shallow = ["--depth", "1", "--no-tags", *(["--branch", ref] if ref else [])]
    why = await _bounded_git(["clone", "--quiet", "--recursive", *shallow, "--", base,
                              str(clone)], clone)
    if why is not None:
        # a dumb HTTP server cannot serve a shallow clone, a commit is no --branch: clone
        # it all, then check the ref out (what engines of this generation always did)
        await trio.to_thread.run_sync(partial(shutil.rmtree, clone, ignore_errors=True))
        why = await _bounded_git(["clone", "--quiet", "--recursive", "--", base, str(clone)],
                                 clone)
        if why is None and ref:
            why = await _bounded_git(["-C", str(clone), "checkout", "--quiet", ref, "--"],
                                     clone)
        if why is None and ref:  # the ref's own submodule commits
            why = await _bounded_git(["-C", str(clone), "submodule", "--quiet", "update",
                                      "--init", "--recursive"], clone)
    if why is not None:
        raise ContextError(f"remote: cannot clone {base}{'#' + ref if ref else ''}: {why}")
    await trio.to_thread.run_sync(_drop_git, clone)
    return await trio.to_thread.run_sync(_subdir_context, clone, subdir, base, work)


async def _bounded_git(args: list[str], clone: Path) -> str | None:
    """Run git, stopped after ``GIT_SECONDS`` or beyond ``MAX_BYTES`` in ``clone``; why it
    failed (its last line of errors), or None."""
    env = {**{k: v for k, v in os.environ.items() if k == "PATH"}, **_GIT_ENV}
    too_big = False
    result = None

    async def watch(scope: trio.CancelScope) -> None:
        nonlocal too_big
        while True:
            await trio.sleep(1)
            if await trio.to_thread.run_sync(_tree_size, clone) > MAX_BYTES:
                too_big = True
                scope.cancel()
                return

    try:
        with trio.fail_after(GIT_SECONDS):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, nursery.cancel_scope)
                result = await trio.run_process(["git", *args], env=env, capture_stderr=True,
                                                stdin=subprocess.DEVNULL, check=False)
                nursery.cancel_scope.cancel()
    except trio.TooSlowError:
        raise ContextError(f"remote: git took more than {GIT_SECONDS} s") from None
    if too_big:
        raise ContextError(f"remote: the repository is larger than {MAX_BYTES >> 30} GiB")
    assert result is not None
    if result.returncode == 0:
        return None
    lines = result.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"git exited with {result.returncode}"


def _drop_git(clone: Path) -> None:
    """The repository's ``.git`` and its submodules' (``.git`` files) are no build material."""
    for dirpath, dirnames, filenames in os.walk(clone):
        if ".git" in dirnames:
            dirnames.remove(".git")
            shutil.rmtree(Path(dirpath) / ".git", ignore_errors=True)
        if ".git" in filenames:
            os.unlink(Path(dirpath) / ".git")


def _subdir_context(clone: Path, subdir: str, base: str, work: Path) -> Context:
    root = Path(os.path.realpath(clone / subdir)) if subdir else clone
    inside = os.path.realpath(clone)
    if not (str(root) == inside or str(root).startswith(inside + "/")) or not root.is_dir():
        raise ContextError(f"remote: {subdir!r} is not a directory of {base}")
    return _hashed(root, work)


def _tree_size(path: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            with contextlib.suppress(OSError):  # gone meanwhile
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _hashed(root: Path, work: Path) -> Context:
    ctx = Context(root, work=work)
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                while data := f.read(1 << 20):
                    digest.update(data)
            ctx.hashes[str(path.relative_to(root))] = digest.hexdigest()
            ctx.size += path.stat().st_size
    return ctx
