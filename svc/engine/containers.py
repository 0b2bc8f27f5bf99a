"""The containers service: records, names, and every lifecycle verb with dockerd's rules.

Each verb checks the state table (``container_state.require``) under the container's lock, so
two verbs never interleave on one container. Running processes belong to supervisor tasks in
the engine's nursery (``container_run.Runner``); a verb that waits for an exit waits on the
container's ``changed`` event, never on the process itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import trio

from svc.engine import names as namegen
from svc.engine.attach import SessionOptions, StdinTarget, session
from svc.engine.container import Container, new_id, now_ns
from svc.engine.container_config import (
    check_host_config,
    check_name,
    host_config_record,
    merge_config,
    stop_signal,
)
from svc.engine.container_files import check_dns, check_extra_hosts
from svc.engine.container_fs import ContainerFS
from svc.engine.container_logs import log_stream
from svc.engine.container_mounts import (
    check_binds,
)
from svc.engine.container_networks import ContainerNetworking
from svc.engine.container_run import Runner, RunnerDeps
from svc.engine.container_spec import resources
from svc.engine.container_state import State, require
from svc.engine.container_stats import StatsService
from svc.engine.container_volumes import ContainerVolumes
from svc.engine.exec import ExecService
from svc.engine.images import Image
from svc.engine.links import parse_link
from svc.engine.ports import bindings as port_bindings
from svc.errors import Conflict, InvalidParameter, NotFound, SvcError
from svc.models.containers import CreateBody, HostConfigBody, UpdateBody
from svc.runtime.cgroups import Knobs
from svc.runtime.mounts import mounts_under
from svc.runtime.process import signal_number
from svc.runtime.protocol import ContainerNotFound, RuntimeFailure
from svc.runtime.spec import with_resources

log = logging.getLogger("svc.engine.containers")

COLLECTION = "containers"
RUNNING_STATES = (State.RUNNING, State.PAUSED, State.RESTARTING)


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


class ContainerService(ContainerNetworking, ContainerVolumes):
    def __init__(self, root: Path, deps: RunnerDeps, knobs: Knobs | None) -> None:
        self.dir = root / "containers"
        self.deps = deps
        self.knobs = knobs
        self.runner = Runner(deps)
        self.fs = ContainerFS(self.runner, deps.images)
        self.execs = ExecService(self.runner)
        self.stats = StatsService(self.runner)
        self.containers: dict[str, Container] = {}
        self.names: dict[str, str] = {}  # "/name" -> id
        self._names_lock = trio.Lock()

    # -- loading and restoring --------------------------------------------------------------

    def open(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Load the records (blocking, before serving); damaged ones are skipped."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o710)
        for cid, rec in records.items():
            try:
                c = Container.from_record(dict(rec), self.dir)
            except (KeyError, ValueError, TypeError) as exc:
                log.error("skipping container %s: %s", cid, exc)
                continue
            self.containers[c.id] = c
            self.names[c.name] = c.id
        self.deps.images.container_use = self._image_use

    async def restore(self, nursery: trio.Nursery) -> None:
        """After a crash or a restart: no container runs without a supervisor. Ones that were
        running are killed and torn down and recorded as exited (137 when svc killed them, 255
        when they had died unseen); then ``always`` and ``unless-stopped`` ones start again."""
        self.runner.bind(nursery)
        # What a crash can leave behind, looked up once (a runc call per container would make
        # a start with many containers slow): runc's containers and the overlay mounts.
        try:
            in_runc = {str(d.get("id")) for d in await self.deps.runtime.list()}
        except RuntimeFailure as exc:
            log.warning("cannot list the runtime's containers: %s", exc)
            in_runc = set(self.containers)
        mounted = set(await trio.to_thread.run_sync(mounts_under, self.dir))
        for c in list(self.containers.values()):
            try:
                await self._restore_one(c, in_runc, mounted)
            except Exception:  # one damaged container must not keep the daemon from starting
                log.exception("restoring container %s failed", c.short_id)
        for c in list(self.containers.values()):
            policy = (c.host_config.get("RestartPolicy") or {}).get("Name") or "no"
            if policy == "always" or (policy == "unless-stopped" and not c.manually_stopped):
                if not c.has_been_started:
                    continue
                async with c.lock:
                    try:
                        await self.runner.launch(c)
                    except (SvcError, OSError) as exc:
                        log.error("container %s did not come back: %s", c.short_id, exc)

    async def _restore_one(self, c: Container, in_runc: set[str], mounted: set[Path]) -> None:
        was = c.state.status
        if was in (State.RUNNING, State.PAUSED, State.RESTARTING):
            code, error = await self._reap_orphan(c)
            c.state.status, c.state.pid, c.state.finished_ns = State.EXITED, 0, now_ns()
            c.state.exit_code, c.state.error = code, error
            await self.deps.save(c)
        elif was is State.REMOVING:
            await self._finish_remove(c)
            return
        elif c.id not in in_runc and c.rootfs not in mounted:
            return
        await self.runner.teardown(c)

    async def _reap_orphan(self, c: Container) -> tuple[int, str]:
        try:
            state = await self.deps.runtime.state(c.id)
        except ContainerNotFound:
            return 255, "the container exited while the daemon was not running"
        except RuntimeFailure as exc:
            return 255, str(exc)
        if state.get("status") in ("running", "paused", "created"):
            with contextlib.suppress(RuntimeFailure):
                await self.deps.runtime.delete(c.id, force=True)
            return 137, "killed when the daemon restarted (it was not running to supervise it)"
        return 255, "the container exited while the daemon was not running"

    # -- names ------------------------------------------------------------------------------

    def resolve(self, ref: str) -> Container:
        """By full id, name (with or without "/") or unique id prefix; 404 / 400 ambiguous."""
        if not ref:
            raise NotFound("No such container: ")
        c = self.containers.get(ref)
        if c is not None:
            return c
        by_name = self.names.get("/" + ref.lstrip("/"))
        if by_name is not None:
            return self.containers[by_name]
        matches = [c for cid, c in self.containers.items() if cid.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise InvalidParameter(f"multiple IDs found with provided prefix: {ref}")
        raise NotFound(f"No such container: {ref}")

    def _name_taken(self, name: str) -> Conflict:
        return Conflict(f'Conflict. The name "{name}" is already in use by container '
                        f"{self.names[name]}. You have to remove (or rename) that container to "
                        "be able to reuse that name.")

    def _new_name(self) -> str:
        for attempt in range(10):
            name = "/" + namegen.generate(attempt)
            if name not in self.names:
                return name
        return "/" + new_id()[:12]

    def _image_use(self, image_id: str) -> tuple[str, bool] | None:
        found: tuple[str, bool] | None = None
        for c in self.containers.values():
            if c.image_id == image_id:
                running = c.state.status in RUNNING_STATES
                if found is None or running:
                    found = (c.id, running)
        return found

    # -- create -----------------------------------------------------------------------------

    async def create(self, body: CreateBody, name: str | None) -> Container:
        image_ref = body.Image
        if not image_ref:
            raise InvalidParameter("Config.Image is required: the image to create the "
                                   "container from")
        try:
            image = self.deps.images.resolve(image_ref)
        except NotFound:
            raise NotFound(f"No such image: {image_ref}") from None
        hc = body.HostConfig or HostConfigBody()
        warnings = check_host_config(hc, self.knobs)
        check_binds(hc)
        check_extra_hosts(list(hc.ExtraHosts or []))
        check_dns(list(hc.Dns or []))
        volumes_from = self._volumes_from(hc)
        if hc.NetworkMode.startswith("container:"):
            self.resolve(hc.NetworkMode.partition(":")[2])
        net_config = self._net_config(hc.NetworkMode, body)
        for entry in hc.Links or []:
            target, _ = parse_link(entry)
            try:
                self.resolve(target)
            except NotFound:
                raise NotFound(f"Could not get container for {target}") from None
            if hc.NetworkMode not in ("", "default", "bridge"):
                raise InvalidParameter("links are supported on the default bridge network "
                                       "only; on a user network, use names and aliases")
        cid = new_id()
        config, path, args = merge_config(body, image.container_config, cid)
        hc_record = host_config_record(hc)
        port_bindings(hc_record, config)  # 400s before anything is made
        async with self._names_lock:
            if name:
                full = check_name(name)
                if full in self.names:
                    raise self._name_taken(full)
            else:
                full = self._new_name()
            c = Container(id=cid, name=full, created_ns=now_ns(), path=path, args=args,
                          config=config, host_config=hc_record, net_config=net_config,
                          image_id=image.id, warnings=warnings, dir=self.dir / cid)
            self.names[full] = cid
            self.containers[cid] = c
        try:
            c.mounts = await self._make_mounts(hc, config.get("Volumes"), volumes_from, [])
            await trio.to_thread.run_sync(os.mkdir, c.dir, 0o710)
            await self.deps.save(c)
        except BaseException:
            self.names.pop(full, None)
            self.containers.pop(cid, None)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, c.dir, True)
                await self._drop_anonymous(c)
            raise
        self.runner.event(c, "create")
        return c

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, c: Container) -> None:
        async with c.lock:
            require(c.state.status, "start", c.id)
            c.manually_stopped = False
            await self.runner.launch(c)

    async def wait_exit(self, c: Container) -> int:
        """Block until ``c`` is neither running, paused nor restarting; its exit code."""
        while True:
            changed = c.changed
            if c.state.status not in RUNNING_STATES and c.live is None:
                return c.state.exit_code
            await changed.wait()

    async def _wait_live_exit(self, c: Container, timeout: float | None) -> bool:
        """Wait for the current process to exit; False on timeout."""
        live = c.live
        if live is None:
            return True
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            await live.exited.wait()
            return True
        return False

    async def stop(self, c: Container, timeout: int | None) -> None:
        async with c.lock:
            require(c.state.status, "stop", c.id)
            await self._stop_locked(c, 10 if timeout is None else timeout)
        self.runner.event(c, "stop")

    async def _stop_locked(self, c: Container, timeout: float) -> None:
        c.manually_stopped = True
        await self.deps.save(c)
        if c.state.status is State.RESTARTING:
            if c.restart_scope is not None:
                c.restart_scope.cancel()
            return
        sig = stop_signal(c.config)
        await self._signal(c, sig)
        if not await self._wait_live_exit(c, timeout):
            await self._signal(c, signal.SIGKILL)
            await self._wait_live_exit(c, None)

    async def _signal(self, c: Container, sig: int) -> None:
        """Send ``sig`` to the init; a paused container is thawed so that it can act on it."""
        if c.live is None:
            return
        with contextlib.suppress(RuntimeFailure):
            await self.deps.runtime.kill(c.id, sig)
        if c.state.status is State.PAUSED:
            with contextlib.suppress(RuntimeFailure):
                await self.deps.runtime.resume(c.id)
            c.state.status = State.RUNNING

    async def restart(self, c: Container, timeout: int | None) -> None:
        async with c.lock:
            require(c.state.status, "restart", c.id)
            if c.state.status in RUNNING_STATES:
                await self._stop_locked(c, 10 if timeout is None else timeout)
            c.manually_stopped = False
            await self.runner.launch(c)
        self.runner.event(c, "restart")

    async def kill(self, c: Container, sig_text: str | None) -> None:
        try:
            sig = signal_number(sig_text) if sig_text else int(signal.SIGKILL)
        except ValueError:
            raise InvalidParameter(f"Invalid signal: {sig_text}") from None
        async with c.lock:
            require(c.state.status, "kill", c.id)
            if c.state.status is State.RESTARTING:
                c.manually_stopped = True
                if c.restart_scope is not None:
                    c.restart_scope.cancel()
                return
            c.manually_stopped = True
            with contextlib.suppress(RuntimeFailure):
                await self.deps.runtime.kill(c.id, sig)
            self.runner.event(c, "kill", signal=str(sig))
            if sig == signal.SIGKILL:
                if c.state.status is State.PAUSED:
                    with contextlib.suppress(RuntimeFailure):
                        await self.deps.runtime.resume(c.id)
                await self._wait_live_exit(c, None)

    async def pause(self, c: Container) -> None:
        await self._freeze(c, "pause")

    async def unpause(self, c: Container) -> None:
        await self._freeze(c, "unpause")

    async def _freeze(self, c: Container, verb: str) -> None:
        """pause / unpause through the runtime (the freezer cgroup)."""
        async with c.lock:
            require(c.state.status, verb, c.id)
            if verb == "pause":
                await self.deps.runtime.pause(c.id)
                c.state.status = State.PAUSED
            else:
                await self.deps.runtime.resume(c.id)
                c.state.status = State.RUNNING
            await self.deps.save(c)
            c.notify()
        self.runner.event(c, verb)

    async def rename(self, c: Container, new: str) -> None:
        if not new:
            raise InvalidParameter("Neither old nor new names may be empty")
        full = check_name(new)
        async with self._names_lock:
            require(c.state.status, "rename", c.id)
            if full == c.name:
                raise Conflict(f"Renaming a container with the same name as its current name "
                               f"({full}) is not allowed")
            if full in self.names:
                raise self._name_taken(full)
            old = c.name
            c.name = full
            self.names[full] = c.id
            self.names.pop(old, None)
            try:
                await self.deps.save(c)
            except BaseException:
                c.name = old
                self.names[old] = c.id
                self.names.pop(full, None)
                raise
        self.runner.event(c, "rename", oldName=old)

    async def remove(self, c: Container, *, force: bool, volumes: bool = False) -> None:
        async with c.lock:
            require(c.state.status, "force_remove" if force else "remove", c.id)
            if c.state.status in RUNNING_STATES:
                c.manually_stopped = True
                if c.restart_scope is not None:
                    c.restart_scope.cancel()
                await self._signal(c, signal.SIGKILL)
                await self._wait_live_exit(c, None)
            c.state.status = State.REMOVING
            await self.deps.save(c)
            c.notify()
            await self._finish_remove(c)
            if volumes:
                with trio.CancelScope(shield=True):
                    await self._drop_anonymous(c)

    async def _finish_remove(self, c: Container) -> None:
        with trio.CancelScope(shield=True):
            await self.runner.teardown(c)
            # even while an archive reader holds it: the overlay is detached (lazily, if
            # busy) before its directory goes, so rmtree never walks into a mounted tree
            await self.runner.unmount(c)
            await trio.to_thread.run_sync(shutil.rmtree, c.dir, True)
            await self.deps.delete(c)
            self.execs.forget(c)
            self.stats.forget(c)
            self.containers.pop(c.id, None)
            if self.names.get(c.name) == c.id:
                del self.names[c.name]
            c.notify()
        self.runner.event(c, "destroy")

    async def stop_all(self, timeout: float) -> None:
        """Daemon shutdown: every running container gets its stop signal, then SIGKILL."""
        async def one(c: Container) -> None:
            try:
                async with c.lock:
                    if c.state.status in RUNNING_STATES:
                        was_manual = c.manually_stopped
                        await self._stop_locked(c, timeout)
                        c.manually_stopped = was_manual  # a shutdown is not a user's stop
                        await self.deps.save(c)
            except Exception:  # the others are still stopped; the next start cleans up
                log.exception("stopping container %s at shutdown failed", c.short_id)

        async with trio.open_nursery() as nursery:
            for c in list(self.containers.values()):
                nursery.start_soon(one, c)

    async def attach(self, c: Container, stream: trio.abc.Stream, *, logs: bool,
                     follow: bool, stdin: bool, stdout: bool, stderr: bool,
                     detach_keys: bytes, raw_output: bool = False) -> str:
        """Serve an attached client (see ``engine.attach``). Output is subscribed to before
        anything else, so a client that attaches before ``start`` misses nothing."""
        attachment = c.hub.subscribe(stdout=stdout, stderr=stderr) if follow else None
        replay = None
        if logs and c.log_driver() == "json-file":
            def replay() -> AsyncIterator[bytes]:
                return log_stream(c, stdout=stdout, stderr=stderr, since_ns=0, tail=None,
                                  timestamps=False, follow=False, raw=c.tty or raw_output)
        self.runner.event(c, "attach")
        target = None
        if stdin and c.config.get("OpenStdin"):
            target = StdinTarget(get=lambda: self._stdin_of(c),
                                 close_on_eof=bool(c.config.get("StdinOnce")) and not c.tty)
        opts = SessionOptions(stdin=target is not None, tty=c.tty or raw_output,
                              detach_keys=detach_keys)
        ended = await session(stream, attachment, opts, target, replay)
        if ended == "detach":
            self.runner.event(c, "detach")
        return ended

    async def _stdin_of(self, c: Container) -> Any:
        """The running process's stdin (the pty for a TTY), waiting for a start."""
        while True:
            changed = c.changed
            live = c.live
            if live is not None:
                return live.console if c.tty else live.stdin
            if c.state.status is State.REMOVING:
                return None
            await changed.wait()

    async def apply_start_host_config(self, c: Container, hc: HostConfigBody) -> None:
        """HostConfig sent with start (clients before v1.24): validated and applied before
        the first start, as dockerd does; ignored once the container has run."""
        if c.has_been_started or c.state.status is not State.CREATED:
            return
        c.warnings = check_host_config(hc, self.knobs)
        check_binds(hc)
        volumes_from = self._volumes_from(hc)
        before = c.mounts
        c.mounts = await self._make_mounts(hc, c.config.get("Volumes"), volumes_from, before)
        c.host_config = host_config_record(hc)
        await self.deps.save(c)
        kept = {m["Name"] for m in c.mounts}
        await self._drop_anonymous(c, [m for m in before if m["Name"] not in kept])

    async def update(self, c: Container, body: UpdateBody, *,
                     restart_policy: bool) -> list[str]:
        """Change resource limits (live, through the runtime, when running) and, from v1.23,
        the restart policy. The merged HostConfig is validated as at create."""
        async with c.lock:
            require(c.state.status, "update", c.id)
            merged = dict(c.host_config)
            for key, value in body.model_dump(exclude={"RestartPolicy"}).items():
                if value:
                    merged[key] = value
            if body.Memory and not body.MemorySwap and merged.get("MemorySwap", 0) > 0 and \
                    merged["MemorySwap"] < body.Memory:
                raise InvalidParameter("Memory limit should be smaller than already set "
                                       "memoryswap limit, update the memoryswap at the same time")
            if restart_policy and body.RestartPolicy is not None:
                merged["RestartPolicy"] = body.RestartPolicy.model_dump()
            hc = HostConfigBody.model_validate(merged)
            warnings = check_host_config(hc, self.knobs, update=True)
            if c.live is not None and c.state.status is not State.RESTARTING:
                res = resources(hc.model_dump())
                spec: dict[str, Any] = {}
                with_resources(res)(spec)
                try:
                    await self.deps.runtime.update(c.id, spec["linux"]["resources"])
                except RuntimeFailure as exc:
                    raise InvalidParameter(f"Cannot update container {c.id}: {exc}") from None
            new = host_config_record(hc)
            new["NetworkMode"] = c.host_config.get("NetworkMode", new["NetworkMode"])
            c.host_config = new
            await self.deps.save(c)
        self.runner.event(c, "update")
        return warnings

    async def top(self, c: Container, ps_args: str) -> tuple[list[str], list[list[str]]]:
        """``ps <ps_args>`` on the host, keeping the rows of the container's processes."""
        if c.state.status not in (State.RUNNING, State.PAUSED) or c.live is None:
            raise Conflict(f"Container {c.id} is not running")
        cgroup = self.runner.cgroup_of(c)
        pids = set(await trio.to_thread.run_sync(self.deps.cgroups.procs, cgroup))
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
        c.live.console.resize(height, width)
        self.runner.event(c, "resize", height=str(height), width=str(width))

    async def commit(self, c: Container, *, repo: str, tag: str, comment: str, author: str,
                     pause: bool, changes: list[str], config: dict[str, Any] | None) -> Image:
        """``docker commit``: a new image from the container's changes, optionally named."""
        images = self.deps.images
        ref = images.tag_reference(repo, tag or None) if repo else None
        if ref is None and tag:
            raise InvalidParameter("commit: a tag needs a repository (repo)")
        image = await self.fs.commit(c, repo_config=config, changes=changes, comment=comment,
                                     author=author, pause=pause)
        if ref is not None:
            async with images.lock:
                await images.add_ref(image, ref, force=True)
        attrs = {"comment": comment} if comment else {}
        self.runner.event(c, "commit", **attrs)
        return image

    # -- queries ----------------------------------------------------------------------------

    async def sizes(self, c: Container) -> tuple[int, int]:
        """(SizeRw, SizeRootFs): bytes in the upper dir, and those plus the image's."""
        rw = await trio.to_thread.run_sync(_tree_size, c.upper_dir)
        image = self.deps.images.images.get(c.image_id)
        return rw, rw + (image.size if image is not None else 0)

    def waited_pids(self) -> set[int]:
        """Processes whose exit a supervisor waits for (never reaped by the orphan reaper)."""
        inits = {c.live.pid for c in self.containers.values() if c.live is not None}
        return inits | self.execs.waited_pids()

    def all(self) -> Iterable[Container]:
        return self.containers.values()

    def counts(self) -> tuple[int, int, int, int]:
        """(all, running, paused, stopped) for /info."""
        running = sum(1 for c in self.containers.values() if c.state.status in (
            State.RUNNING, State.RESTARTING))
        paused = sum(1 for c in self.containers.values() if c.state.status is State.PAUSED)
        total = len(self.containers)
        return total, running, paused, total - running - paused
