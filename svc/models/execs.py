"""Exec wire models: create and start bodies, and the inspect shape."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from svc.models.base import WireModel
from svc.models.containers import str_or_list


class ExecCreateBody(WireModel):
    AttachStdin: bool = False
    AttachStdout: bool = False
    AttachStderr: bool = False
    Tty: bool = False
    Cmd: list[str] | None = None
    DetachKeys: str = ""
    User: str = ""
    Privileged: bool = False

    @field_validator("Cmd", mode="before")
    @classmethod
    def _cmd(cls, v: Any) -> Any:
        return str_or_list(v)


class ExecStartBody(WireModel):
    Detach: bool = False
    Tty: bool = False


class ExecProcessConfig(WireModel):
    privileged: bool
    user: str
    tty: bool
    entrypoint: str
    arguments: list[str]


class ExecInspect(WireModel):
    ID: str
    Running: bool
    ExitCode: int | None
    ProcessConfig: ExecProcessConfig
    OpenStdin: bool
    OpenStderr: bool
    OpenStdout: bool
    CanRemove: bool = False
    ContainerID: str
    DetachKeys: str = ""
    Pid: int = 0
    Container: dict[str, Any]
