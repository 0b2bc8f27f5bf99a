"""The create body turned into a container's Config and HostConfig, checked as dockerd checks.

``merge_config`` applies the image's defaults (moby ``daemon.merge``); ``check_host_config``
validates every bound of the spec's Limits table with dockerd's messages (a 400 naming the
field) and turns knobs this kernel lacks into Warnings, dropping them, as dockerd's
``verifyPlatformContainerSettings`` does.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

from svc.engine.containers import security_opts
from svc.engine.networks.ports import parse_port, valid_port
from svc.errors import InvalidParameter
from svc.logdrivers import registry as logdrivers
from svc.models.containers import ContainerConfig, CreateBody, HostConfigBody
from svc.models.imageconfig import RunConfig
from svc.runtime.cgroups import Knobs
from svc.runtime.process import signal_number
from svc.storage.jsonlog.options import parse_log_opts

# The spec's rule (/?[a-zA-Z0-9_-]+) and dockerd's (which also allows "." after the first).
NAME_RE = re.compile(r"^/?[a-zA-Z0-9_][a-zA-Z0-9_.-]*$")
MIN_MEMORY = 4 << 20
RESTART_POLICIES = ("", "no", "always", "unless-stopped", "on-failure")
LOG_DRIVERS_KNOWN = ("json-file", "none", "syslog", "journald", "gelf", "fluentd", "awslogs",
                     "splunk", "etwlogs", "gcplogs")
LOG_DRIVERS_BUILT = ("json-file", "none", *logdrivers.SHIPPING)
ULIMITS = ("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile",
           "nproc", "rss", "rtprio", "rttime", "sigpending", "stack", "as")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


NAME_MAX = 255


def check_name(name: str) -> str:
    """``/name`` for a valid requested name."""
    if len(name) > NAME_MAX:
        raise InvalidParameter(f"Invalid container name ({name[:32]}...): at most {NAME_MAX} "
                               "characters")
    if not NAME_RE.match(name):
        raise InvalidParameter(f"Invalid container name ({name}), only /?[a-zA-Z0-9_-]+ "
                               "(and . after the first character) are allowed")
    return "/" + name.lstrip("/")


def _merge_env(image_env: list[str], user_env: list[str]) -> list[str]:
    """Image variables first, each overridden by the user's of the same name (moby)."""
    order: dict[str, str] = {}
    for item in [*image_env, *user_env]:
        key = item.split("=", 1)[0]
        order.pop(key, None)
        order[key] = item
    return list(order.values())


def merge_config(body: CreateBody, img: RunConfig,
                 container_id: str) -> tuple[ContainerConfig, str, list[str]]:
    """The container's Config (image defaults filled in) and its Path and Args."""
    # only what the client set: the rest takes the same defaults, and pydantic keeps the set
    # of given field names per model (all 21 of them: 2 KiB per container)
    cfg = ContainerConfig.model_validate(body.model_dump(
        exclude={"HostConfig", "NetworkingConfig"}, exclude_unset=True))
    for env in cfg.Env or []:
        if not env.split("=", 1)[0]:
            raise InvalidParameter(f"invalid environment variable: {env!r}")
    cfg.Env = _merge_env(list(img.Env or []), list(cfg.Env or []))
    if not cfg.Entrypoint:
        if not cfg.Cmd:
            cfg.Cmd = img.Cmd
        if cfg.Entrypoint is None:
            cfg.Entrypoint = img.Entrypoint
    cfg.User = cfg.User or img.User
    cfg.WorkingDir = cfg.WorkingDir or img.WorkingDir
    cfg.StopSignal = cfg.StopSignal or img.StopSignal
    for spec in cfg.ExposedPorts or {}:
        parse_port(spec)  # 400 now, never a list that cannot be shown later
    image_ports = {k: v for k, v in (img.ExposedPorts or {}).items() if valid_port(k)}
    cfg.ExposedPorts = {**image_ports, **(cfg.ExposedPorts or {})} or None
    cfg.Volumes = {**(img.Volumes or {}), **(cfg.Volumes or {})} or None
    cfg.Labels = {**(img.Labels or {}), **(cfg.Labels or {})}
    if not cfg.Hostname:
        cfg.Hostname = container_id[:12]
    if cfg.WorkingDir and not cfg.WorkingDir.startswith("/"):
        raise InvalidParameter(f"the working directory '{cfg.WorkingDir}' is invalid, it "
                               "needs to be absolute")
    if cfg.StopSignal:
        try:
            signal_number(cfg.StopSignal)
        except ValueError:
            raise InvalidParameter(f"Invalid signal: {cfg.StopSignal}") from None
    command = [*(cfg.Entrypoint or []), *(cfg.Cmd or [])]
    if not command:
        raise InvalidParameter("No command specified")
    return cfg, command[0], command[1:]


def stop_signal(config: ContainerConfig) -> int:
    try:
        return signal_number(config.StopSignal or "SIGTERM")
    except ValueError:
        return int(signal.SIGTERM)


def _parse_cpuset(text: str, field: str) -> set[int]:
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi or lo)
            if a < 0 or b < a:
                raise ValueError
            out.update(range(a, b + 1))
    except ValueError:
        raise InvalidParameter(f"Invalid value {text} for {field}") from None
    return out


def _available_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))


def check_host_config(hc: HostConfigBody, knobs: Knobs | None, *,
                      update: bool = False) -> list[str]:
    """Validate ``hc`` in place; knobs the kernel lacks are zeroed and reported as Warnings."""
    warnings: list[str] = []
    if hc.Memory and hc.Memory < MIN_MEMORY:
        raise InvalidParameter("Minimum memory limit allowed is 4MB")
    if hc.MemorySwap > 0 and not hc.Memory and not update:
        raise InvalidParameter("You should always set the Memory limit when using Memoryswap "
                               "limit, see usage")
    if hc.MemorySwap > 0 and hc.Memory and hc.MemorySwap < hc.Memory:
        raise InvalidParameter("Minimum memoryswap limit should be larger than memory limit, "
                               "see usage")
    if hc.MemorySwap < -1:
        raise InvalidParameter(f"Invalid value {hc.MemorySwap} for MemorySwap: -1 (unlimited) "
                               "or a number of bytes")
    if hc.Memory < 0 or hc.MemoryReservation < 0 or hc.KernelMemory < 0:
        raise InvalidParameter("Memory, MemoryReservation and KernelMemory must not be negative")
    if hc.MemoryReservation and hc.Memory and hc.Memory < hc.MemoryReservation:
        raise InvalidParameter("Minimum memory limit should be larger than memory reservation "
                               "limit, see usage")
    if hc.MemoryReservation and hc.MemoryReservation < MIN_MEMORY:
        raise InvalidParameter("Minimum memory reservation allowed is 4MB")
    if hc.KernelMemory and hc.KernelMemory < MIN_MEMORY:
        raise InvalidParameter("Minimum kernel memory limit allowed is 4MB")
    if hc.MemorySwappiness is not None and hc.MemorySwappiness != -1 and \
            not 0 <= hc.MemorySwappiness <= 100:
        raise InvalidParameter(f"Invalid value: {hc.MemorySwappiness}, valid memory swappiness "
                               "range is 0-100")
    if hc.CpuShares < 0:
        raise InvalidParameter(f"Invalid value {hc.CpuShares} for CpuShares: it must not be "
                               "negative")
    if hc.CpuPeriod and not 1000 <= hc.CpuPeriod <= 1_000_000:
        raise InvalidParameter("CPU cfs period can not be less than 1ms (i.e. 1000) or larger "
                               "than 1s (i.e. 1000000)")
    if hc.CpuQuota and hc.CpuQuota != -1 and hc.CpuQuota < 1000:
        raise InvalidParameter("CPU cfs quota can not be less than 1ms (i.e. 1000)")
    if hc.Cpuset and not hc.CpusetCpus:
        hc.CpusetCpus = hc.Cpuset
    if hc.CpusetCpus:
        want = _parse_cpuset(hc.CpusetCpus, "CpusetCpus")
        have = _available_cpus()
        if not want <= have:
            raise InvalidParameter(f"Requested CPUs are not available - requested "
                                   f"{hc.CpusetCpus}, available: "
                                   f"{','.join(map(str, sorted(have)))}")
    if hc.CpusetMems:
        mems = _parse_cpuset(hc.CpusetMems, "CpusetMems")
        if mems - {0}:
            raise InvalidParameter(f"Requested memory nodes are not available - requested "
                                   f"{hc.CpusetMems}, available: 0")
    if hc.BlkioWeight and not 10 <= hc.BlkioWeight <= 1000:
        raise InvalidParameter("Range of blkio weight is from 10 to 1000")
    for wd in hc.BlkioWeightDevice or []:
        if not 10 <= wd.Weight <= 1000:
            raise InvalidParameter(f"Range of blkio weight is from 10 to 1000 (BlkioWeightDevice "
                                   f"{wd.Path}: {wd.Weight})")
    for name in ("BlkioDeviceReadBps", "BlkioDeviceWriteBps", "BlkioDeviceReadIOps",
                 "BlkioDeviceWriteIOps"):
        for td in getattr(hc, name) or []:
            if td.Rate < 0:
                raise InvalidParameter(f"{name}: the rate for {td.Path} must not be negative")
    if not -1000 <= hc.OomScoreAdj <= 1000:
        raise InvalidParameter(f"Invalid value {hc.OomScoreAdj}, range for oom score adj is "
                               "[-1000, 1000]")
    if hc.ShmSize < 0:
        raise InvalidParameter("SHM size must be greater then 0")
    if hc.PidsLimit < -1:
        raise InvalidParameter(f"Invalid value {hc.PidsLimit} for PidsLimit")
    _check_restart_policy(hc)
    if not update:
        _check_log_config(hc)
        for u in hc.Ulimits or []:
            if u.Name not in ULIMITS:
                raise InvalidParameter(f"Invalid ulimit type: {u.Name}")
            if u.Soft > u.Hard:
                raise InvalidParameter(f"ulimit soft limit must be less than or equal to hard "
                                       f"limit: {u.Soft} > {u.Hard}")
        for d in hc.Devices or []:
            if not d.CgroupPermissions or set(d.CgroupPermissions) - set("rwm"):
                raise InvalidParameter(f"invalid device permissions {d.CgroupPermissions!r} for "
                                       f"{d.PathOnHost}: a combination of r, w and m")
        _check_network_mode(hc.NetworkMode)
        _check_cgroup_parent(hc.CgroupParent)
        warnings += security_opts.warnings(security_opts.parse(hc.SecurityOpt),
                                           hc.Privileged)
    if knobs is not None:
        warnings += _drop_missing_knobs(hc, knobs)
    return warnings


def _check_cgroup_parent(parent: str) -> None:
    """A path below each hierarchy's root: no ``..`` (it would name a cgroup, or a directory,
    outside the hierarchy), no NUL, a sane length."""
    parts = parent.split("/")
    if ".." in parts or "\0" in parent or len(parent) > 1024:
        raise InvalidParameter(f"invalid CgroupParent {parent[:64]!r}: a cgroup path without "
                               "'..'")


def _check_restart_policy(hc: HostConfigBody) -> None:
    rp = hc.RestartPolicy
    if hc.AutoRemove and rp.Name not in ("", "no"):
        raise InvalidParameter("can't create 'AutoRemove' container with restart policy")
    if rp.Name not in RESTART_POLICIES:
        raise InvalidParameter(f"invalid restart policy {rp.Name}")
    if rp.MaximumRetryCount < 0:
        raise InvalidParameter("maximum restart count must be a positive integer")
    if rp.MaximumRetryCount and rp.Name != "on-failure":
        raise InvalidParameter(f'maximum restart count not valid with restart policy of '
                               f'"{rp.Name}"')


@dataclass(frozen=True)
class LogDefaults:
    """The daemon's ``--log-driver`` and ``--log-opt`` values: what a container that names no
    driver gets, and the options of that driver that a container leaves out."""

    driver: str = "json-file"
    opts: tuple[tuple[str, str], ...] = ()

    def check(self) -> None:
        """Raises InvalidParameter naming what is wrong (the daemon refuses to start)."""
        _check_log_config(HostConfigBody.model_validate(
            {"LogConfig": {"Type": self.driver, "Config": dict(self.opts)}}))


def with_log_defaults(hc: HostConfigBody, defaults: LogDefaults) -> HostConfigBody:
    """``hc`` with the daemon's log defaults merged in, as dockerd merges them
    (``mergeAndVerifyLogConfig``): no driver takes the daemon's; the daemon's driver takes
    each daemon option the container does not set."""
    driver = hc.LogConfig.Type or defaults.driver
    config = dict(hc.LogConfig.Config or {})
    if driver == defaults.driver:
        for key, value in defaults.opts:
            config.setdefault(key, value)
    if driver == hc.LogConfig.Type and config == (hc.LogConfig.Config or {}):
        return hc
    log_config = hc.LogConfig.model_copy(update={"Type": driver, "Config": config})
    return hc.model_copy(update={"LogConfig": log_config})


def _check_log_config(hc: HostConfigBody) -> None:
    driver = hc.LogConfig.Type or "json-file"
    if driver not in LOG_DRIVERS_KNOWN:
        raise InvalidParameter(f"logger: no log driver named '{driver}' is registered")
    if driver not in LOG_DRIVERS_BUILT:
        raise InvalidParameter(f"the {driver} logging driver is not available in svc: use "
                               f"one of {', '.join(LOG_DRIVERS_BUILT)}")
    config = hc.LogConfig.Config or {}
    if driver == "none" and config:
        raise InvalidParameter("the none logging driver takes no options")
    try:
        if driver == "json-file":
            parse_log_opts(config)
        elif driver in logdrivers.SHIPPING:
            logdrivers.validate(driver, config)
    except ValueError as exc:  # (OptionError is one)
        raise InvalidParameter(f"LogConfig ({driver}): {exc}") from None


def _check_network_mode(mode: str) -> None:
    if mode in ("", "default", "bridge", "none", "host"):
        return
    if mode.startswith("container:"):
        if not mode.partition(":")[2]:
            raise InvalidParameter("Invalid network mode: container: needs a container name "
                                   "or id")
        return
    # another name is a user network: the containers service resolves it (404 if missing)


def _drop_missing_knobs(hc: HostConfigBody, knobs: Knobs) -> list[str]:
    """dockerd's warnings for limits this kernel cannot apply; the limit is discarded."""
    w: list[str] = []
    if hc.Memory and not knobs.has("memory.limit_in_bytes"):
        w.append("Your kernel does not support memory limit capabilities. Limitation discarded.")
        hc.Memory, hc.MemorySwap = 0, 0
    if hc.MemorySwap > 0 and not knobs.has("memory.memsw.limit_in_bytes"):
        w.append("Your kernel does not support swap limit capabilities, memory limited "
                 "without swap.")
        hc.MemorySwap = 0
    if hc.MemoryReservation and not knobs.has("memory.soft_limit_in_bytes"):
        w.append("Your kernel does not support memory soft limit capabilities. Limitation "
                 "discarded.")
        hc.MemoryReservation = 0
    if hc.KernelMemory and not knobs.kernel_memory_effective:
        w.append("Your kernel does not support kernel memory limit capabilities. Limitation "
                 "discarded.")
        hc.KernelMemory = 0
    if hc.MemorySwappiness not in (None, -1) and not knobs.has("memory.swappiness"):
        w.append("Your kernel does not support memory swappiness capabilities, memory "
                 "swappiness discarded.")
        hc.MemorySwappiness = None
    if hc.OomKillDisable and not knobs.has("memory.oom_control"):
        w.append("Your kernel does not support oom kill disable.")
        hc.OomKillDisable = False
    if hc.CpuShares and not knobs.has("cpu.shares"):
        w.append("Your kernel does not support CPU shares. Shares discarded.")
        hc.CpuShares = 0
    if hc.CpuPeriod and not knobs.has("cpu.cfs_period_us"):
        w.append("Your kernel does not support CPU cfs period. Period discarded.")
        hc.CpuPeriod = 0
    if hc.CpuQuota and not knobs.has("cpu.cfs_quota_us"):
        w.append("Your kernel does not support CPU cfs quota. Quota discarded.")
        hc.CpuQuota = 0
    if hc.BlkioWeight and not knobs.blkio_weight:
        w.append("Your kernel does not support Block I/O weight. Weight discarded.")
        hc.BlkioWeight = 0
    if hc.BlkioWeightDevice and not knobs.has("blkio.weight_device"):
        w.append("Your kernel does not support Block I/O weight_device. Weight-device "
                 "discarded.")
        hc.BlkioWeightDevice = None
    for name, knob in (("BlkioDeviceReadBps", "blkio.throttle.read_bps_device"),
                       ("BlkioDeviceWriteBps", "blkio.throttle.write_bps_device"),
                       ("BlkioDeviceReadIOps", "blkio.throttle.read_iops_device"),
                       ("BlkioDeviceWriteIOps", "blkio.throttle.write_iops_device")):
        if getattr(hc, name) and not knobs.has(knob):
            w.append(f"Your kernel does not support {knob}. {name} discarded.")
            setattr(hc, name, None)
    if hc.PidsLimit and not knobs.has("pids.max"):
        w.append("Your kernel does not support pids limit capabilities, pids limit discarded.")
        hc.PidsLimit = 0
    return w


def fill_host_defaults(hc: HostConfigBody) -> HostConfigBody:
    """The defaults dockerd fills into a stored HostConfig (network mode, log driver)."""
    if not hc.NetworkMode:
        hc.NetworkMode = "default"
    if not hc.LogConfig.Type:
        hc.LogConfig.Type = "json-file"
    if hc.LogConfig.Config is None:
        hc.LogConfig.Config = {}
    return hc
