"""The composition root: logging, pid file, engine, listeners, hypercorn, signals.

Lifetime of the daemon process (see docs/architecture.md):
1. claim the pid file, open the engine (load durable state), bind the listeners;
2. serve under one trio nursery that also holds the engine's background tasks and the
   memory scavenger (``svc.memory``);
3. on SIGTERM or SIGINT: end live streams, stop accepting, let in-flight requests finish for
   up to ``GRACEFUL_TIMEOUT``, persist what is still in memory, remove the sockets and the pid
   file, exit 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import trio
from hypercorn.utils import wrap_app

from svc import sched
from svc.api import hijack, limits
from svc.api.app import create_app
from svc.api.server import (
    Listeners,
    ServerSetupError,
    check_tls_files,
    hypercorn_config,
    open_listeners,
    validate_hosts,
)
from svc.api.serving import serve
from svc.background import keep_running
from svc.config import DaemonConfig
from svc.engine.cluster.session import ClusterFlags
from svc.engine.containers.config import LogDefaults
from svc.engine.engine import Adapters, Engine, EngineConfig
from svc.errors import InvalidParameter
from svc.memory import freeze_imports, scavenge, tune_heap
from svc.registry.transport import RegistryConfig
from svc.runtime.cgroups import CgroupV1
from svc.runtime.runc import Runc
from svc.runtime.shim.launch import Shim, find_binary
from svc.storage.lock import RootInUse
from svc.storage.store import ObjectStore
from svc.version import API_VERSION_STR, SVC_VERSION

log = logging.getLogger("svc")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "error": logging.ERROR, "fatal": logging.CRITICAL}


class DaemonError(Exception):
    """The daemon cannot start; the message says why."""


def setup_logging(config: DaemonConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s.%(msecs)03d svcd[%(process)d] %(levelname)s %(name)s: %(message)s",
        "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[config.effective_log_level])
    # pyroute2 logs every netlink message at debug level: thousands of lines per network
    # operation, which drown the daemon's own debug log and slow it down.
    logging.getLogger("pyroute2").setLevel(max(logging.INFO, root.level))
    # httpx logs every request at info level: the cluster store's heartbeats would fill the
    # log with one line a second
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))


def claim_pidfile(path: Path) -> None:
    """Write our pid, refusing when the file names a live process (another daemon)."""
    try:
        other = int(path.read_text().strip() or "0")
    except (FileNotFoundError, ValueError):
        other = 0
    if other and other != os.getpid() and _alive(other):
        raise DaemonError(f"pid file found, ensure svcd is not running or delete {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def release_pidfile(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        if int(path.read_text().strip()) == os.getpid():
            path.unlink()


def registry_config(config: DaemonConfig) -> RegistryConfig:
    """The registry adapter's settings from the daemon's flags and config file."""
    return RegistryConfig(certs_dir=config.registry_config_dir,
                          insecure_registries=tuple(config.insecure_registries),
                          registry_mirrors=tuple(m.rstrip("/") for m in config.registry_mirrors),
                          user_agent=f"svc/{SVC_VERSION}")


def host_adapters(config: EngineConfig) -> Adapters:
    """The engine's adapters on this host: runc (or the configured runtime, which speaks
    runc's command line), the cgroup v1 tree, the on-disk store under the root."""
    runc = Runc(config.exec_root / "runc", config.runtime)
    monitor = Shim(runc) if config.live_restore else None
    return Adapters(runtime=runc, cgroups=CgroupV1(), store=ObjectStore(config.root),
                    monitor=monitor)


def run_daemon(config: DaemonConfig,
               extensions: Sequence[Callable[..., None]] = ()) -> None:
    """Run svcd until SIGTERM/SIGINT. Raises DaemonError when it cannot start."""
    setup_logging(config)
    if os.geteuid() != 0:
        log.warning("not running as root: containers, cgroups and networks will not work")
    try:
        validate_hosts(config)
        check_tls_files(config)
    except ServerSetupError as exc:
        raise DaemonError(str(exc)) from None
    if shutil.which(config.runtime) is None:
        log.warning("OCI runtime %r not found: containers cannot run until it is installed",
                    config.runtime)
    if config.live_restore and not os.access(find_binary(), os.X_OK):
        raise DaemonError(f"--live-restore runs containers under svc-shim, which is not at "
                          f"{find_binary()} (scripts/setup.sh builds it)")
    claim_pidfile(config.pidfile)
    # Each connection costs a descriptor and the connection cap is half the soft limit: raise
    # it to the hard limit as dockerd does (containers get their own from the spec).
    log.debug("descriptor limit %d", limits.raise_nofile())
    freeze_imports()  # before the state: records a removal makes garbage stay collectable
    tune_heap()  # before any thread: an arena made before the cap would stay
    try:
        try:
            engine_config = EngineConfig(root=config.root, exec_root=config.exec_root,
                                         runtime=config.runtime,
                                         cgroup_parent=config.cgroup_parent,
                                         shutdown_timeout=config.shutdown_timeout,
                                         bridge=config.bridge, bip=config.bip,
                                         dns=tuple(config.dns),
                                         registry=registry_config(config),
                                         debug=config.effective_log_level == "debug",
                                         log_defaults=log_defaults(config),
                                         cluster=ClusterFlags(
                                             config.cluster_store, config.cluster_advertise,
                                             tuple(sorted(config.cluster_store_opts.items()))),
                                         plugin_dirs=tuple(config.plugin_dirs),
                                         plugin_timeout=config.plugin_timeout,
                                         authorization_plugins=tuple(
                                             config.authorization_plugins),
                                         live_restore=config.live_restore)
            engine = Engine(engine_config, host_adapters(engine_config))
        except InvalidParameter as exc:  # --bridge, --bip
            raise DaemonError(str(exc)) from None
        try:
            engine.open()
        except RootInUse as exc:
            raise DaemonError(str(exc)) from None
        except OSError as exc:
            raise DaemonError(f"cannot open the state under {config.root}: {exc}") from None
        try:
            listeners = open_listeners(config)
        except (ServerSetupError, OSError) as exc:
            raise DaemonError(str(exc)) from None
        if sched.prefer_short_slice():  # the event loop's thread: see svc/sched.py
            log.debug("the event loop's thread runs with a %d us scheduler slice",
                      sched.SLICE_NS // 1000)
        try:
            trio.run(_serve, config, engine, listeners, extensions)
        finally:
            listeners.close()
            engine.close()
    finally:
        release_pidfile(config.pidfile)
    log.info("svcd stopped")


def log_defaults(config: DaemonConfig) -> LogDefaults:
    """--log-driver and --log-opt, checked as a container's would be (InvalidParameter)."""
    defaults = LogDefaults(config.log_driver, tuple(sorted(config.log_opts.items())))
    try:
        defaults.check()
    except InvalidParameter as exc:
        raise InvalidParameter(f"--log-driver/--log-opt: {exc}") from None
    return defaults


async def _serve(config: DaemonConfig, engine: Engine, listeners: Listeners,
                 extensions: Sequence[Callable[..., None]]) -> None:
    app = create_app(engine, cors_origin=config.api_cors_header, extensions=extensions)
    # (debug: every request through the app, so that each has its access log line)
    hijack.install(None if config.effective_log_level == "debug" else app.plain)
    hconf = hypercorn_config(config)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_signals, engine, shutdown)
        await nursery.start(engine.run)
        await nursery.start(keep_running, "memory scavenger", scavenge)
        async with trio.open_nursery() as http:
            # Returns once shutdown is set and in-flight requests are done (or timed out).
            binds = await http.start(partial(
                serve, wrap_app(app, 0, "asgi"), hconf, sockets=listeners.sockets(),
                shutdown_trigger=shutdown.wait))
            log.info("svcd %s (API %s) listening on %s", SVC_VERSION, API_VERSION_STR,
                     ", ".join(binds))
        await engine.stop_containers()
        with trio.CancelScope(shield=True):
            await engine.persist()
        nursery.cancel_scope.cancel()


async def _watch_signals(engine: Engine, shutdown: trio.Event, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """First SIGTERM/SIGINT: graceful shutdown. A second one during it takes the default action
    (the process dies at once; the next start replaces the stale socket and pid file)."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            engine.begin_shutdown()
            shutdown.set()
            return
