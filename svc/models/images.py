"""Image wire models: list entries, inspect, history, removal reports, stream messages."""

from __future__ import annotations

from typing import Any

from svc.models.base import WireModel


class ImageSummary(WireModel):
    Id: str
    ParentId: str
    RepoTags: list[str]
    RepoDigests: list[str]
    Created: int
    Size: int
    VirtualSize: int
    Labels: dict[str, str] | None = None


class GraphDriver(WireModel):
    Name: str
    Data: dict[str, str] | None = None


class RootFS(WireModel):
    Type: str
    Layers: list[str]


class ImageInspect(WireModel):
    Id: str
    RepoTags: list[str]
    RepoDigests: list[str]
    Parent: str
    Comment: str
    Created: str
    Container: str
    ContainerConfig: dict[str, Any]
    DockerVersion: str
    Author: str
    Config: dict[str, Any]
    Architecture: str
    Os: str
    Size: int
    VirtualSize: int
    GraphDriver: GraphDriver
    RootFS: RootFS


class HistoryEntry(WireModel):
    Id: str
    Created: int
    CreatedBy: str
    Tags: list[str] | None
    Size: int
    Comment: str


class ProgressMessage(WireModel):
    """One object of a JSON progress stream (pull, import, load)."""

    status: str | None = None
    stream: str | None = None
    id: str | None = None
    progress: str | None = None
    progressDetail: dict[str, int] | None = None
    error: str | None = None
    errorDetail: dict[str, Any] | None = None
    aux: dict[str, Any] | None = None

    def line(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode() + b"\r\n"


class SearchResult(WireModel):
    """One entry of ``GET /images/search``."""

    name: str
    description: str = ""
    star_count: int = 0
    is_official: bool = False
    is_automated: bool = False
