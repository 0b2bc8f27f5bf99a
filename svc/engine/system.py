"""What /version and /info report: svc's own build facts plus live host and engine figures."""

from __future__ import annotations

import functools
import ipaddress
import os
import platform
import secrets
import time
from importlib import metadata
from pathlib import Path

import trio

from svc.engine.cluster.session import ClusterStatus
from svc.models.system import (
    IndexInfo,
    PluginsInfo,
    RegistryConfig,
    SystemInfo,
    VersionInfo,
)
from svc.registry.transport import RegistryConfig as Registries
from svc.runtime import host
from svc.version import API_VERSION_STR, MIN_API_VERSION_STR, SVC_VERSION
from svc.wire.timefmt import rfc3339_nano


@functools.cache
def build_time() -> str:
    """When this svc was built/installed: the mtime of its distribution metadata."""
    try:
        dist = metadata.distribution("svc")
        files = dist.files or []
        meta = next((f for f in files if f.name == "METADATA"), None)
        if meta is not None:
            ts = Path(str(dist.locate_file(meta))).stat().st_mtime_ns
            return rfc3339_nano(ts)
    except (metadata.PackageNotFoundError, OSError):
        pass
    return rfc3339_nano(int(Path(__file__).stat().st_mtime_ns))


@functools.cache
def git_commit() -> str:
    """The commit of the source tree svc runs from (short), read from .git without a subprocess."""
    git = Path(__file__).resolve().parents[2] / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:7]
        ref = head[5:]
        ref_file = git / ref
        if ref_file.exists():
            return ref_file.read_text().strip()[:7]
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0][:7]
    except OSError:
        pass
    return "unknown"


def load_engine_id(root: Path) -> str:
    """A stable daemon ID (dockerd style: 12 groups of 4 base32 characters), made once."""
    from svc.storage.atomic import atomic_write

    path = root / "engine-id"
    try:
        value = path.read_text().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    value = ":".join("".join(secrets.choice(alphabet) for _ in range(4)) for _ in range(12))
    atomic_write(path, value.encode() + b"\n", mode=0o644)
    return value


def version_info() -> VersionInfo:
    return VersionInfo(
        Version=SVC_VERSION,
        ApiVersion=API_VERSION_STR,
        MinAPIVersion=MIN_API_VERSION_STR,
        GitCommit=git_commit(),
        GoVersion=f"python{platform.python_version()}",
        Os="linux",
        Arch=host.goarch(),
        KernelVersion=host.kernel_version(),
        BuildTime=build_time(),
        Experimental=False,
    )


def count_tasks() -> int:
    """Live trio tasks: svc's honest stand-in for NGoroutines."""
    try:
        root = trio.lowlevel.current_root_task()
    except RuntimeError:
        return 0
    if root is None:
        return 0
    n, stack = 0, [root]
    while stack:
        task = stack.pop()
        n += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return n


def registry_info(config: Registries) -> RegistryConfig:
    """/info's RegistryConfig as dockerd shows it: CIDRs (loopback always) in
    InsecureRegistryCIDRs, named insecure registries as IndexConfigs with Secure false, the
    mirrors on docker.io's entry and at the top."""
    cidrs = ["127.0.0.0/8"]
    indexes = {"docker.io": IndexInfo(Name="docker.io", Official=True, Secure=True,
                                      Mirrors=list(config.registry_mirrors))}
    for entry in config.insecure_registries:
        try:  # only "addr/len" is a CIDR (dockerd's net.ParseCIDR); the rest name a registry
            net = str(ipaddress.ip_network(entry, strict=False)) if "/" in entry else ""
        except ValueError:
            net = ""
        if not net:
            indexes[entry] = IndexInfo(Name=entry, Official=False, Secure=False)
            continue
        if net not in cidrs:
            cidrs.append(net)
    return RegistryConfig(IndexConfigs=indexes, InsecureRegistryCIDRs=cidrs,
                          Mirrors=list(config.registry_mirrors))


def system_info(*, engine_id: str, root: Path, runtime: str, debug: bool,
                containers: tuple[int, int, int, int], images: int,
                listeners: int, registry: Registries,
                logging_driver: str = "json-file",
                plugins: PluginsInfo, cluster: ClusterStatus | None = None,
                log_dropped: int = 0, live_restore: bool = False) -> SystemInfo:
    total, running, paused, stopped = containers
    cg = host.CgroupFeatures()
    env = os.environ
    return SystemInfo(
        ID=engine_id,
        Containers=total, ContainersRunning=running, ContainersPaused=paused,
        ContainersStopped=stopped, Images=images,
        Driver="overlay2",
        DriverStatus=[["Backing Filesystem", host.fs_type(root)], ["Supports d_type", "true"],
                      ["Native Overlay Diff", "true"]],
        SystemStatus=[*(cluster_status(cluster) or []),
                      ["Log Messages Dropped", str(log_dropped)]],
        Plugins=plugins,
        MemoryLimit=cg.memory_limit, SwapLimit=cg.swap_limit, KernelMemory=cg.kernel_memory,
        CpuCfsPeriod=cg.cpu_cfs_period, CpuCfsQuota=cg.cpu_cfs_quota, CPUShares=cg.cpu_shares,
        CPUSet=cg.cpuset, OomKillDisable=cg.oom_kill_disable,
        IPv4Forwarding=host.ipv4_forwarding(),
        BridgeNfIptables=Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists(),
        BridgeNfIp6tables=Path("/proc/sys/net/bridge/bridge-nf-call-ip6tables").exists(),
        Debug=debug, NFd=host.open_fds(), OomScoreAdj=host.oom_score_adj(),
        NGoroutines=count_tasks(),
        SystemTime=rfc3339_nano(time.time_ns()),
        ExecutionDriver=Path(runtime).name, LoggingDriver=logging_driver, CgroupDriver="cgroupfs",
        NEventsListener=listeners,
        KernelVersion=host.kernel_version(), OperatingSystem=host.operating_system(),
        OSType="linux", Architecture=host.machine(),
        IndexServerAddress="https://index.docker.io/v1/",
        RegistryConfig=registry_info(registry),
        InitSha1="", InitPath="",
        NCPU=host.ncpu(), MemTotal=host.mem_total(),
        SvcRootDir=str(root), DockerRootDir=str(root),
        HttpProxy=env.get("HTTP_PROXY", env.get("http_proxy", "")),
        HttpsProxy=env.get("HTTPS_PROXY", env.get("https_proxy", "")),
        NoProxy=env.get("NO_PROXY", env.get("no_proxy", "")),
        Name=host.hostname(), Labels=[], ExperimentalBuild=False, ServerVersion=SVC_VERSION,
        ClusterStore=cluster.store if cluster else "",
        ClusterAdvertise=cluster.advertise if cluster else "",
        LiveRestoreEnabled=live_restore,
    )


def cluster_status(cluster: ClusterStatus | None) -> list[list[str]] | None:
    """/info's SystemStatus rows for the cluster store (None without one): whether it is
    reachable, why not, and the nodes registered in it."""
    if cluster is None or not (cluster.store or cluster.error):
        return None
    rows = [["Cluster Store", cluster.store],
            ["Cluster Store Reachable", "true" if cluster.reachable else "false"]]
    if cluster.error:
        rows.append(["Cluster Store Error", cluster.error])
    rows.append(["Cluster Nodes", str(len(cluster.nodes))])
    rows += [[" " + node, "registered"] for node in cluster.nodes]
    return rows
