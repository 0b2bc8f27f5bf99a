"""Taking back, at start, a container that ran on under its svc-shim (or, started by an
earlier build, its conmon) while the daemon was away (live restore), as if the daemon had
never left: its supervisor reads what the monitor kept from where the last one stopped (the
lines written meanwhile go to its log and to ``logs``), its endpoints are read back from the
kernel, its embedded DNS and published ports are served again, and its stdin and TTY are
reached again. One that exited meanwhile is taken back too: its supervisor reads the rest of
its output, records the exit code and time the monitor wrote, sends ``die`` with that time,
tears it down and applies its restart policy.
"""

from __future__ import annotations

import logging

import trio

from svc.engine.containers import shimmed
from svc.engine.containers.container import Container, Live
from svc.engine.containers.monitored import monitor_alive, monitor_files, open_handle
from svc.engine.containers.run import Runner
from svc.engine.containers.shipping import open_shipping
from svc.engine.networks import ports
from svc.engine.networks.adoption import adopt_endpoints
from svc.errors import SvcError
from svc.network.adopt import container_interfaces
from svc.runtime.process import wait_gone
from svc.runtime.shim.channel import ShimError

log = logging.getLogger("svc.engine.containers")
EXITED_WAIT = 30.0  # bound on reading the rest of the log of one that exited while away


async def adopt(c: Container, runner: Runner, nursery: trio.Nursery) -> bool:
    """Take ``c`` back if it runs (or ran) under a conmon of an earlier daemon; False if it
    does not (the caller then handles it as a container that lost its supervisor)."""
    if runner.monitor is None or not c.monitor_pid:
        return False
    if c.monitor_kind == shimmed.KIND:
        found = await _shim_handle(c)
        if found is None:
            return False
        shim, alive = found
        live = Live(c.state.pid, cgroup=runner.cgroup_of(c), monitor=shim,
                    console=shim.console, stdin=shim.stdin)
    else:  # started by a build that ran containers under conmon
        files = monitor_files(c.dir, runner.bundle_dir(c), c.id)
        alive = monitor_alive(c.monitor_pid, c.id)
        if not alive and files.exit_code() is None:
            return False
        handle = await open_handle(c.monitor_pid, files,
                                   wants_input=alive and (c.tty or c.config.OpenStdin))
        live = Live(c.state.pid, cgroup=runner.cgroup_of(c), monitor=handle)
        live.console, live.stdin = (handle.input, None) if c.tty else (None, handle.input)
    if alive:
        await _adopt_network(c, runner, nursery)
    try:
        pump = await open_shipping(c)
    except SvcError as exc:  # its receiver is down: the output stays in the log meanwhile
        log.error("container %s: %s", c.short_id, exc)
        pump = None
    c.live = live
    await nursery.start(runner.supervisor.supervise, c, live, None, pump)
    if not alive:  # its exit recorded before the first request is served
        with trio.move_on_after(EXITED_WAIT):
            await live.exited.wait()
    log.info("container %s taken back (%s)", c.short_id,
             "running" if alive else "it exited while the daemon was away")
    return True


async def _shim_handle(c: Container) -> tuple[shimmed.ShimHandle, bool] | None:
    """The container's shim, connected, if it runs on (True); its spool and exit file if it
    has gone (False); None if neither (nothing to take back)."""
    files = shimmed.shim_files(c.dir)
    if shimmed.shim_alive(c.monitor_pid, c.id):
        try:
            return await shimmed.connect(c.monitor_pid, files), True
        except ShimError as exc:  # it is going: what it left is read as below
            log.info("container %s: its shim: %s", c.short_id, exc)
            with trio.move_on_after(EXITED_WAIT):
                await wait_gone(c.monitor_pid)
    gone = shimmed.gone_handle(c.monitor_pid, files)
    return (gone, False) if gone is not None else None


async def _adopt_network(c: Container, runner: Runner, nursery: trio.Nursery) -> None:
    """Its endpoints, DNS and published ports, as they were (nothing is made anew)."""
    nets = runner.networks
    try:
        found = await trio.to_thread.run_sync(container_interfaces, c.state.pid, c.id)
    except OSError as exc:  # it exited just now: its supervisor sees that
        log.info("container %s: its network cannot be read: %s", c.short_id, exc)
        return
    joined = adopt_endpoints(nets.networks, c.id, c.name, found, c.net_config)
    if not joined:
        return
    try:
        if not joined[0].builtin:
            await nets.dns.start(c.id, c.state.pid, nursery, list(c.host_config.Dns or []))
        published = ports.bindings(c.host_config, c.config)
        if published:
            await nets.publish(c.id, published, nursery, joined[0])
    except (SvcError, OSError) as exc:
        log.error("container %s: its DNS or ports could not be served again: %s",
                  c.short_id, exc)
