"""Volume bodies and responses (spec: Volume, the Volumes endpoints)."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from svc.models.base import WireModel


class VolumeCreateBody(WireModel):
    Name: str = ""
    Driver: str = ""
    DriverOpts: dict[str, str] | None = None
    Labels: dict[str, str] | None = None  # v1.23

    @field_validator("DriverOpts", "Labels", mode="before")
    @classmethod
    def _maps(cls, v: Any) -> Any:
        if isinstance(v, dict):  # the CLI sends string values; a number is taken as text
            return {str(k): str(x) for k, x in v.items()}
        return v


class VolumeBody(WireModel):
    Name: str
    Driver: str
    Mountpoint: str
    Labels: dict[str, str] | None = None  # v1.23 and later
