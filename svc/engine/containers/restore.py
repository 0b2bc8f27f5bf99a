"""Restoring containers when the daemon starts: no container runs without a supervisor.

After a crash (or a clean restart), ones the records say were running are killed and torn
down and recorded as exited (137 when svc killed them, 255 when they had died unseen), unless
they run under conmon (live restore): those are taken back (``adopt``); a removal the crash
interrupted is finished; then ``always`` and ``unless-stopped`` containers start again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import trio

from svc.engine.containers.adopt import adopt
from svc.engine.containers.container import Container, now_ns
from svc.engine.containers.monitored import monitor_alive
from svc.engine.containers.registry import ContainerRegistry
from svc.engine.containers.rootfs import unmount_quietly
from svc.engine.containers.run import Runner
from svc.engine.containers.shimmed import shim_alive
from svc.engine.containers.state import State, transition
from svc.errors import SvcError
from svc.runtime.mounts import mounts_under
from svc.runtime.protocol import ContainerNotFound, Runtime, RuntimeFailure
from svc.storage.fsutil import remove_tree
from svc.storage.trash import Trash

log = logging.getLogger("svc.engine.containers")
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


class ContainerRestore:
    """Brings the known containers back at start; it needs the runtime (what it still
    holds), the runner (teardown, launch), the records' directory, a way to save a record and
    to finish an interrupted removal."""

    def __init__(self, registry: ContainerRegistry, runtime: Runtime, runner: Runner,
                 root: Path, save: Callable[[Container], Awaitable[None]],
                 finish_remove: Callable[[Container], Awaitable[None]],
                 trash: Trash | None = None) -> None:
        self.registry = registry
        self.runtime = runtime
        self.runner = runner
        self.dir = root
        self.save = save
        self.finish_remove = finish_remove
        self.trash = trash

    def load(self, records: Mapping[str, Mapping[str, Any]], keep: Iterable[str] = ()) -> None:
        """Load the records (blocking, before serving); damaged ones are skipped. Container
        directories without a record (nor a damaged one among ``keep``) are swept."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o710)
        self._sweep_leftovers(set(records) | set(keep))
        for cid, rec in records.items():
            try:
                c = Container.from_record(dict(rec), self.dir)
            except (KeyError, ValueError, TypeError) as exc:
                log.error("skipping container %s: %s", cid, exc)
                continue
            self.registry.containers[c.id] = c
            self.registry.names[c.name] = c.id


    def still_running(self) -> set[str]:
        """Before the restore: the containers running on under a monitor (live restore)."""
        alive = {"shim": shim_alive, "conmon": monitor_alive}
        return {c.id for c in self.registry.all()
                if self.runner.monitor is not None and c.monitor_pid
                and alive.get(c.monitor_kind, monitor_alive)(c.monitor_pid, c.id)}

    def _sweep_leftovers(self, known: set[str]) -> None:
        """Blocking: remove the directories of containers that have no record: what a crash
        left of a create (the directory is made before the record is written) or of a
        removal (the record goes before the directory)."""
        with os.scandir(self.dir) as entries:
            leftovers = [e.path for e in entries if e.name not in known
                         and _CONTAINER_ID.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
        for path in leftovers:
            log.warning("removing %s: a container directory without a record", path)
            if self.trash is not None and not mounts_under(Path(path)):
                self.trash.throw([Path(path)], durable=False)  # deleted in the background
            else:
                remove_tree(path, ignore_errors=True)

    async def restore(self, nursery: trio.Nursery) -> None:
        """After a crash or a restart: no container runs without a supervisor. Ones that were
        running are killed and torn down and recorded as exited (137 when svc killed them, 255
        when they had died unseen); then ``always`` and ``unless-stopped`` ones start again."""
        self.runner.bind(nursery)
        # What a crash can leave behind, looked up once (a runc call per container would make
        # a start with many containers slow): runc's containers and the overlay mounts.
        try:
            in_runc = {str(d.get("id")) for d in await self.runtime.list()}
        except RuntimeFailure as exc:
            log.warning("cannot list the runtime's containers: %s", exc)
            in_runc = set(self.registry.containers)
        mounted = set(await trio.to_thread.run_sync(mounts_under, self.dir))
        adopted: set[str] = set()
        for c in list(self.registry.all()):
            try:
                if c.state.status in (State.RUNNING, State.PAUSED) and \
                        await adopt(c, self.runner, nursery):
                    adopted.add(c.id)
                    continue
                await self._restore_one(c, in_runc, mounted)
            except Exception:  # one damaged container must not keep the daemon from starting
                log.exception("restoring container %s failed", c.short_id)
        if self.runner.monitor is not None:  # (their rules were kept for those taken back)
            await self.runner.networks.ports.forget_others(adopted)
        for c in list(self.registry.all()):
            if c.id in adopted:  # its supervisor applies its policy if it exited
                continue
            policy = c.host_config.RestartPolicy.Name or "no"
            if policy == "always" or (policy == "unless-stopped" and not c.manually_stopped):
                if not c.has_been_started:
                    continue
                async with c.lock:
                    try:
                        await self.runner.launch(c)
                    except (SvcError, OSError) as exc:
                        log.error("container %s did not come back: %s", c.short_id, exc)

    async def _restore_one(self, c: Container, in_runc: set[str], mounted: set[Path]) -> None:
        if c.view_dir in mounted:  # a build's look-up the crash cut short
            await trio.to_thread.run_sync(unmount_quietly, c.view_dir)
        was = c.state.status
        if was in (State.RUNNING, State.PAUSED, State.RESTARTING):
            code, error = await self._reap_orphan(c)
            transition(c.state, "exited")
            c.state.pid, c.state.finished_ns = 0, now_ns()
            c.monitor_pid = 0
            c.state.exit_code, c.state.error = code, error
            await self.save(c)
        elif was is State.REMOVING:
            await self.finish_remove(c)
            self.runner.event(c, "destroy")
            return
        elif c.id not in in_runc and c.rootfs not in mounted:
            return
        await self.runner.teardown(c)

    async def _reap_orphan(self, c: Container) -> tuple[int, str]:
        try:
            state = await self.runtime.state(c.id)
        except ContainerNotFound:
            return 255, "the container exited while the daemon was not running"
        except RuntimeFailure as exc:
            return 255, str(exc)
        if state.get("status") in ("running", "paused", "created"):
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.delete(c.id, force=True)
            return 137, "killed when the daemon restarted (it was not running to supervise it)"
        return 255, "the container exited while the daemon was not running"
