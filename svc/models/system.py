"""GET /version and GET /info bodies (v1.23 shape; older shapes are cut down in svc.api)."""

from __future__ import annotations

from pydantic import Field

from svc.models.base import WireModel


class VersionInfo(WireModel):
    Version: str
    ApiVersion: str
    MinAPIVersion: str
    GitCommit: str
    GoVersion: str
    Os: str
    Arch: str
    KernelVersion: str
    BuildTime: str
    Experimental: bool = False


class PluginsInfo(WireModel):
    Volume: list[str]
    Network: list[str]
    Authorization: list[str] | None = None


class IndexInfo(WireModel):
    Name: str
    Mirrors: list[str] = Field(default_factory=list)
    Secure: bool = True
    Official: bool = False


class RegistryConfig(WireModel):
    IndexConfigs: dict[str, IndexInfo]
    InsecureRegistryCIDRs: list[str]
    Mirrors: list[str] = Field(default_factory=list)


class SystemInfo(WireModel):
    ID: str
    Containers: int
    ContainersRunning: int
    ContainersPaused: int
    ContainersStopped: int
    Images: int
    Driver: str
    DriverStatus: list[list[str]]
    SystemStatus: list[list[str]] | None = None
    Plugins: PluginsInfo
    MemoryLimit: bool
    SwapLimit: bool
    KernelMemory: bool
    CpuCfsPeriod: bool
    CpuCfsQuota: bool
    CPUShares: bool
    CPUSet: bool
    IPv4Forwarding: bool
    BridgeNfIptables: bool
    BridgeNfIp6tables: bool
    Debug: bool
    NFd: int
    OomKillDisable: bool
    OomScoreAdj: int
    NGoroutines: int
    SystemTime: str
    ExecutionDriver: str
    LoggingDriver: str
    CgroupDriver: str
    NEventsListener: int
    KernelVersion: str
    OperatingSystem: str
    OSType: str
    Architecture: str
    IndexServerAddress: str
    RegistryConfig: RegistryConfig
    InitSha1: str
    InitPath: str
    NCPU: int
    MemTotal: int
    SvcRootDir: str
    DockerRootDir: str
    HttpProxy: str
    HttpsProxy: str
    NoProxy: str
    Name: str
    Labels: list[str]
    ExperimentalBuild: bool
    ServerVersion: str
    ClusterStore: str = ""
    ClusterAdvertise: str = ""
    DiscoveryBackend: str = ""
    LiveRestoreEnabled: bool = False  # (from API 1.25 engines on; harmless before)


class AuthBody(WireModel):
    """``POST /auth``: the credentials a client asks the daemon to check (field names folded
    as Go's decoder folds them: the CLI sends ``username``, docker-py ``Username`` too)."""

    username: str = ""
    password: str = ""
    auth: str = ""
    email: str = ""
    serveraddress: str = ""
    identitytoken: str = ""
    registrytoken: str = ""


class AuthAnswer(WireModel):
    Status: str
    IdentityToken: str = ""
