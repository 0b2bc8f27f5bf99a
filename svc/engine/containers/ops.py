"""Verbs on a container that leave its state alone: update (live resource limits and the
restart policy), top, resize, commit, and the sizes that ``size=1`` reports."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from svc.engine.containers.config import check_host_config
from svc.engine.containers.container import Container
from svc.engine.containers.fs import ContainerFS
from svc.engine.containers.run import Runner
from svc.engine.containers.spec import resources
from svc.engine.containers.state import State, require
from svc.engine.images.service import Image, ImageService
from svc.errors import Conflict, InvalidParameter
from svc.models.containers import UpdateBody
from svc.runtime.cgroups import CgroupV1, Knobs
from svc.runtime.protocol import Runtime, RuntimeFailure
from svc.runtime.spec import with_resources


def parse_ps(output: str, pids: set[int]) -> tuple[list[str], list[list[str]]]:
    """ps output -> (Titles, Processes of ``pids``), as dockerd's ``parsePSOutput``."""
    lines = output.splitlines()
    if not lines:
        raise InvalidParameter("ps gave no output")
    titles = lines[0].split()
    try:
        pid_col = titles.index("PID")
    except ValueError:
        raise InvalidParameter("Couldn't find PID field in ps output") from None
    rows = []
    for line in lines[1:]:
        if not line.strip():
            continue
        fields = line.split(None, len(titles) - 1)
        try:
            pid = int(fields[pid_col])
        except (ValueError, IndexError):
            raise InvalidParameter(f"Unexpected pid {fields[pid_col:pid_col + 1]!r} in ps "
                                   "output") from None
        if pid in pids:
            rows.append(fields)
    return titles, rows


def _tree_size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


class ContainerOps:
    """update, top, resize, commit and sizes: what they need is the runtime, the cgroups,
    the images, the runner (events, cgroup paths, settling an exit), the files and a way to
    save a record."""

    def __init__(self, runtime: Runtime, cgroups: CgroupV1, images: ImageService,
                 runner: Runner, fs: ContainerFS, knobs: Knobs | None,
                 save: Callable[[Container], Awaitable[None]]) -> None:
        self.runtime = runtime
        self.cgroups = cgroups
        self.images = images
        self.runner = runner
        self.fs = fs
        self.knobs = knobs
        self.save = save

    async def update(self, c: Container, body: UpdateBody, *,
                     restart_policy: bool) -> list[str]:
        """Change resource limits (live, through the runtime, when running) and, from v1.23,
        the restart policy. The merged HostConfig is validated as at create."""
        async with c.lock:
            require(c.state.status, "update", c.id)
            changes = {key: value for key, value in body if key != "RestartPolicy" and value}
            if restart_policy and body.RestartPolicy is not None:
                changes["RestartPolicy"] = body.RestartPolicy.model_copy()
            if body.Memory and not body.MemorySwap and \
                    0 < c.host_config.MemorySwap < body.Memory:
                raise InvalidParameter("Memory limit should be smaller than already set "
                                       "memoryswap limit, update the memoryswap at the same time")
            hc = c.host_config.model_copy(deep=True, update=changes)
            warnings = check_host_config(hc, self.knobs, update=True)
            if c.live is not None and c.state.status is not State.RESTARTING:
                res = resources(hc)
                spec: dict[str, Any] = {}
                with_resources(res)(spec)
                try:
                    await self.runtime.update(c.id, spec["linux"]["resources"])
                except RuntimeFailure as exc:
                    # exited meanwhile: the new limits apply from its next start
                    if not await self.runner.settle_exit(c):
                        raise InvalidParameter(f"Cannot update container {c.id}: {exc}") \
                            from None
            c.host_config = hc
            await self.save(c)
        self.runner.event(c, "update")
        return warnings

    async def top(self, c: Container, ps_args: str) -> tuple[list[str], list[list[str]]]:
        """``ps <ps_args>`` on the host, keeping the rows of the container's processes."""
        if c.state.status not in (State.RUNNING, State.PAUSED) or c.live is None:
            raise Conflict(f"Container {c.id} is not running")
        cgroup = self.runner.cgroup_of(c)
        try:
            pids = set(await trio.to_thread.run_sync(self.cgroups.procs, cgroup))
        except OSError:
            if await self.runner.settle_exit(c):  # its cgroup went with its exit
                raise Conflict(f"Container {c.id} is not running") from None
            raise
        args = ps_args.split() if ps_args else ["-ef"]
        result = await trio.run_process(["ps", *args], capture_stdout=True,
                                        capture_stderr=True, check=False)
        if result.returncode != 0:
            raise InvalidParameter(f"Error running ps {ps_args}: "
                                   f"{result.stderr.decode(errors='replace').strip()}")
        titles, rows = parse_ps(result.stdout.decode(errors="replace"), pids)
        self.runner.event(c, "top")
        return titles, rows

    async def resize(self, c: Container, height: int, width: int) -> None:
        if c.live is None or c.state.status not in (State.RUNNING, State.PAUSED):
            raise Conflict(f"Container {c.id} is not running")
        if c.live.console is None:
            raise InvalidParameter(f"Container {c.id} has no TTY: only a TTY can be resized")
        if not (0 < height < 65536 and 0 < width < 65536):
            raise InvalidParameter(f"invalid size {height}x{width}")
        try:
            c.live.console.resize(height, width)
        except OSError:
            if await self.runner.settle_exit(c):  # the terminal closed with the exit
                raise Conflict(f"Container {c.id} is not running") from None
            raise
        self.runner.event(c, "resize", height=str(height), width=str(width))

    async def commit(self, c: Container, *, repo: str, tag: str, comment: str, author: str,
                     pause: bool, changes: list[str], config: dict[str, Any] | None) -> Image:
        """``docker commit``: a new image from the container's changes, optionally named."""
        images = self.images
        ref = images.tag_reference(repo, tag or None) if repo else None
        if ref is None and tag:
            raise InvalidParameter("commit: a tag needs a repository (repo)")
        image = await self.fs.commit(c, repo_config=config, changes=changes, comment=comment,
                                     author=author, pause=pause)
        if ref is not None:
            async with images.lock:
                await images.add_ref(image, ref, force=True)
        if comment:
            self.runner.event(c, "commit", comment=comment)
        else:
            self.runner.event(c, "commit")
        return image

    async def sizes(self, c: Container) -> tuple[int, int]:
        """(SizeRw, SizeRootFs): bytes in the upper dir, and those plus the image's."""
        rw = await trio.to_thread.run_sync(_tree_size, c.upper_dir)
        image = self.images.images.get(c.image_id)
        return rw, rw + (image.size if image is not None else 0)
