"""Container wire models: the create body (configuration + HostConfig) as clients send it.

Field names are the API's. Unknown fields are ignored (open schema). Values that the API
allows in two shapes (``Cmd`` as a string or a list, ``StopSignal`` as a name or a number) are
normalized here; bounds from the spec's Limits table are checked by ``svc.engine`` so that the
400's message can name the field (see ``validate_host_config``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from svc.models.base import WireModel
from svc.models.legacy_hostconfig import merge_top_level


def str_or_list(v: Any) -> Any:
    """``Cmd`` and ``Entrypoint`` as a string (one word) or a list."""
    if isinstance(v, str):
        return [v] if v else None
    return v


class RestartPolicyBody(WireModel):
    Name: str = ""
    MaximumRetryCount: int = 0


class LogConfigBody(WireModel):
    Type: str = ""
    Config: dict[str, str] | None = None


class DeviceMapping(WireModel):
    PathOnHost: str
    PathInContainer: str = ""
    CgroupPermissions: str = "rwm"


class Ulimit(WireModel):
    Name: str
    Soft: int
    Hard: int


class WeightDevice(WireModel):
    Path: str
    Weight: int


class ThrottleDevice(WireModel):
    Path: str
    Rate: int


class MountDriverConfig(WireModel):
    Name: str = ""
    Options: dict[str, str] | None = None


class MountVolumeOptions(WireModel):
    NoCopy: bool = False
    Labels: dict[str, str] | None = None
    DriverConfig: MountDriverConfig | None = None


class MountBindOptions(WireModel):
    Propagation: str = ""


class MountTmpfsOptions(WireModel):
    SizeBytes: int = 0
    Mode: int = 0


class PortBinding(WireModel):
    """One host address of ``HostConfig.PortBindings`` (a struct in the reference engine, so
    its names fold like any field's)."""

    HostIp: str = ""
    HostPort: str = ""


class MountBody(WireModel):
    """One entry of ``HostConfig.Mounts`` (the CLI's ``--mount``)."""

    Type: str = ""
    Source: str = ""
    Target: str = ""
    ReadOnly: bool = False
    BindOptions: MountBindOptions | None = None
    VolumeOptions: MountVolumeOptions | None = None
    TmpfsOptions: MountTmpfsOptions | None = None


class HostConfigBody(WireModel):
    Binds: list[str] | None = None
    Mounts: list[MountBody] | None = None
    Tmpfs: dict[str, str] | None = None  # path -> mount options (``--tmpfs /run:size=64m``)
    Links: list[str] | None = None
    Memory: int = 0
    MemorySwap: int = 0
    MemoryReservation: int = 0
    KernelMemory: int = 0
    CpuShares: int = 0
    CpuPeriod: int = 0
    CpuQuota: int = 0
    Cpuset: str = ""
    CpusetCpus: str = ""
    CpusetMems: str = ""
    BlkioWeight: int = 0
    BlkioWeightDevice: list[WeightDevice] | None = None
    BlkioDeviceReadBps: list[ThrottleDevice] | None = None
    BlkioDeviceWriteBps: list[ThrottleDevice] | None = None
    BlkioDeviceReadIOps: list[ThrottleDevice] | None = None
    BlkioDeviceWriteIOps: list[ThrottleDevice] | None = None
    MemorySwappiness: int | None = None
    OomKillDisable: bool | None = None
    OomScoreAdj: int = 0
    PidsLimit: int = 0
    PortBindings: dict[str, list[PortBinding] | None] | None = None
    PublishAllPorts: bool = False
    Privileged: bool = False
    ReadonlyRootfs: bool = False
    Dns: list[str] | None = None
    DnsOptions: list[str] | None = None
    DnsSearch: list[str] | None = None
    ExtraHosts: list[str] | None = None
    VolumesFrom: list[str] | None = None
    CapAdd: list[str] | None = None
    CapDrop: list[str] | None = None
    GroupAdd: list[str] | None = None
    RestartPolicy: RestartPolicyBody = Field(default_factory=RestartPolicyBody)
    NetworkMode: str = ""
    Devices: list[DeviceMapping] | None = None
    Ulimits: list[Ulimit] | None = None
    LogConfig: LogConfigBody = Field(default_factory=LogConfigBody)
    SecurityOpt: list[str] | None = None
    CgroupParent: str = ""
    VolumeDriver: str = ""
    ShmSize: int = 0
    IpcMode: str = ""
    PidMode: str = ""
    UTSMode: str = ""
    ContainerIDFile: str = ""
    AutoRemove: bool = False  # v1.25's field; CLI 28 sends it for "run --rm -d" at any version

    @field_validator("Binds", "Links", "Dns", "DnsOptions", "DnsSearch", "ExtraHosts",
                     "VolumesFrom", "CapAdd", "CapDrop", "GroupAdd", "SecurityOpt",
                     mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return str_or_list(v)


class ContainerConfig(WireModel):
    """The create body's top level (and the Config object of inspect)."""

    Hostname: str = ""
    Domainname: str = ""
    User: str = ""
    AttachStdin: bool = False
    AttachStdout: bool = False
    AttachStderr: bool = False
    ExposedPorts: dict[str, dict[str, Any]] | None = None
    Tty: bool = False
    OpenStdin: bool = False
    StdinOnce: bool = False
    Env: list[str] | None = None
    Cmd: list[str] | None = None
    Image: str = ""
    Volumes: dict[str, dict[str, Any]] | None = None
    WorkingDir: str = ""
    Entrypoint: list[str] | None = None
    NetworkDisabled: bool = False
    MacAddress: str = ""
    OnBuild: list[str] | None = None
    Labels: dict[str, str] | None = None
    StopSignal: str = ""

    @field_validator("Cmd", "Entrypoint", mode="before")
    @classmethod
    def _cmd(cls, v: Any) -> Any:
        return str_or_list(v)

    @field_validator("StopSignal", mode="before")
    @classmethod
    def _signal(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class EndpointIPAMConfig(WireModel):
    IPv4Address: str = ""
    IPv6Address: str = ""


class EndpointConfigBody(WireModel):
    """A container's settings on one network (create's NetworkingConfig, network connect)."""

    IPAMConfig: EndpointIPAMConfig | None = None
    Links: list[str] | None = None
    Aliases: list[str] | None = None


class NetworkingConfigBody(WireModel):
    EndpointsConfig: dict[str, EndpointConfigBody] | None = None


class CreateBody(ContainerConfig):
    HostConfig: HostConfigBody | None = None
    NetworkingConfig: NetworkingConfigBody | None = None

    @model_validator(mode="before")
    @classmethod
    def _top_level_host_config(cls, data: Any) -> Any:
        """HostConfig fields beside ``HostConfig`` (older dialects), merged as the engines
        merged them (``svc.models.legacy_hostconfig``)."""
        if not isinstance(data, dict):
            return data
        return merge_top_level(data, cls, HostConfigBody)


class CreateResponse(WireModel):
    Id: str
    Warnings: list[str] = Field(default_factory=list)


class ContainerStateBody(WireModel):
    Status: str
    Running: bool
    Paused: bool
    Restarting: bool
    OOMKilled: bool
    Dead: bool
    Pid: int
    ExitCode: int
    Error: str
    StartedAt: str
    FinishedAt: str


class EndpointSettings(WireModel):
    IPAMConfig: dict[str, Any] | None = None
    Links: list[str] | None = None
    Aliases: list[str] | None = None
    NetworkID: str = ""
    EndpointID: str = ""
    Gateway: str = ""
    IPAddress: str = ""
    IPPrefixLen: int = 0
    IPv6Gateway: str = ""
    GlobalIPv6Address: str = ""
    GlobalIPv6PrefixLen: int = 0
    MacAddress: str = ""


class NetworkSettingsBody(WireModel):
    Bridge: str = ""
    SandboxID: str = ""
    HairpinMode: bool = False
    LinkLocalIPv6Address: str = ""
    LinkLocalIPv6PrefixLen: int = 0
    Ports: dict[str, Any] | None = None
    SandboxKey: str = ""
    SecondaryIPAddresses: list[Any] | None = None
    SecondaryIPv6Addresses: list[Any] | None = None
    EndpointID: str = ""
    Gateway: str = ""
    GlobalIPv6Address: str = ""
    GlobalIPv6PrefixLen: int = 0
    IPAddress: str = ""
    IPPrefixLen: int = 0
    IPv6Gateway: str = ""
    MacAddress: str = ""
    Networks: dict[str, EndpointSettings] = Field(default_factory=dict)


class MountPoint(WireModel):
    Name: str = ""
    Source: str
    Destination: str
    Driver: str = ""
    Mode: str = ""
    RW: bool = True
    Propagation: str = ""


class ContainerInspect(WireModel):
    Id: str
    Created: str
    Path: str
    Args: list[str]
    State: ContainerStateBody
    Image: str
    ResolvConfPath: str
    HostnamePath: str
    HostsPath: str
    LogPath: str
    Name: str
    RestartCount: int
    Driver: str = "overlay2"
    ExecDriver: str = "native-0.2"
    MountLabel: str = ""
    ProcessLabel: str = ""
    AppArmorProfile: str = ""
    ExecIDs: list[str] | None = None
    HostConfig: dict[str, Any]
    GraphDriver: dict[str, Any]
    SizeRw: int | None = None
    SizeRootFs: int | None = None
    Mounts: list[MountPoint] = Field(default_factory=list)
    Config: dict[str, Any]
    NetworkSettings: NetworkSettingsBody


class PortBody(WireModel):
    IP: str | None = None
    PrivatePort: int
    PublicPort: int | None = None
    Type: str


class ContainerSummary(WireModel):
    Id: str
    Names: list[str]
    Image: str
    ImageID: str
    Command: str
    Created: int
    Ports: list[PortBody]
    Labels: dict[str, str]
    State: str
    Status: str
    HostConfig: dict[str, str]
    NetworkSettings: dict[str, Any]
    Mounts: list[MountPoint]
    SizeRw: int | None = None
    SizeRootFs: int | None = None


class WaitResponse(WireModel):
    StatusCode: int


class UpdateBody(WireModel):
    """POST /containers/{id}/update: the resource fields (and, from v1.23, RestartPolicy)."""

    BlkioWeight: int = 0
    CpuShares: int = 0
    CpuPeriod: int = 0
    CpuQuota: int = 0
    CpusetCpus: str = ""
    CpusetMems: str = ""
    Memory: int = 0
    MemorySwap: int = 0
    MemoryReservation: int = 0
    KernelMemory: int = 0
    RestartPolicy: RestartPolicyBody | None = None


class UpdateResponse(WireModel):
    Warnings: list[str] = Field(default_factory=list)


class TopResponse(WireModel):
    Titles: list[str]
    Processes: list[list[str]]


class CopyBody(WireModel):
    Resource: str = ""


class ChangeEntry(WireModel):
    Path: str
    Kind: int


class CommitResponse(WireModel):
    Id: str
