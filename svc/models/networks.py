"""Network responses (spec: Network)."""

from __future__ import annotations

from pydantic import Field

from svc.models.base import WireModel


class IPAMConfigEntry(WireModel):
    Subnet: str = ""
    IPRange: str = ""
    Gateway: str = ""


class IPAMBody(WireModel):
    Driver: str = "default"
    Config: list[IPAMConfigEntry] = Field(default_factory=list)
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
