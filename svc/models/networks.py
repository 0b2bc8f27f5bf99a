"""Network responses (spec: Network)."""

from __future__ import annotations

from pydantic import Field

from svc.models.base import WireModel
from svc.models.containers import EndpointConfigBody


class IPAMConfigEntry(WireModel):
    """One IPAM pool; clients send null for what they leave out (docker-py does)."""

    Subnet: str | None = ""
    IPRange: str | None = ""
    Gateway: str | None = ""
    AuxiliaryAddresses: dict[str, str] | None = None


class IPAMBody(WireModel):
    Driver: str = "default"
    # not named Config: pydantic would take a class attribute of that name for the model's
    # configuration (deprecated class-based config)
    ipam_config: list[IPAMConfigEntry] = Field(default_factory=list, alias="Config")
    Options: dict[str, str] | None = None


class NetworkContainer(WireModel):
    Name: str = ""
    EndpointID: str = ""
    MacAddress: str = ""
    IPv4Address: str = ""
    IPv6Address: str = ""


class NetworkBody(WireModel):
    Name: str
    Id: str
    Scope: str = "local"
    Driver: str
    EnableIPv6: bool = False  # returned from v1.23
    IPAM: IPAMBody
    Internal: bool = False  # returned from v1.23
    Containers: dict[str, NetworkContainer] = Field(default_factory=dict)
    Options: dict[str, str] = Field(default_factory=dict)
    Labels: dict[str, str] | None = None  # v1.23


class IPAMRequest(WireModel):
    Driver: str = ""
    Config: list[IPAMConfigEntry] | None = None
    Options: dict[str, str] | None = None


class NetworkCreateBody(WireModel):
    Name: str = ""
    CheckDuplicate: bool = False
    Driver: str = ""
    IPAM: IPAMRequest | None = None
    Internal: bool = False
    EnableIPv6: bool = False
    Options: dict[str, str] | None = None
    Labels: dict[str, str] | None = None


class NetworkCreateResponse(WireModel):
    Id: str
    Warning: str = ""


class ConnectBody(WireModel):
    Container: str = ""
    EndpointConfig: EndpointConfigBody | None = None


class DisconnectBody(WireModel):
    Container: str = ""
    Force: bool = False
