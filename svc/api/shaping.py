"""Per-version shapes of response bodies: fields that did not exist yet are left out, and
types that changed are written the old way (e.g. /info booleans as integers before v1.19)."""

from __future__ import annotations

import json
from typing import Any

from quart import Response

from svc.api.versioning import Version
from svc.models.base import WireModel
from svc.models.system import SystemInfo, VersionInfo

# field -> first API version that has it
_INFO_SINCE: dict[str, Version] = {
    "CgroupDriver": (1, 23), "KernelMemory": (1, 23),
    "Architecture": (1, 22), "OSType": (1, 22), "ContainersRunning": (1, 22),
    "ContainersPaused": (1, 22), "ContainersStopped": (1, 22), "SystemStatus": (1, 22),
    "ServerVersion": (1, 21),
    "CpuCfsPeriod": (1, 19), "CpuCfsQuota": (1, 19), "OomKillDisable": (1, 19),
    "SystemTime": (1, 18), "HttpProxy": (1, 18), "HttpsProxy": (1, 18), "NoProxy": (1, 18),
    "NCPU": (1, 16), "MemTotal": (1, 16), "Name": (1, 16), "ID": (1, 16), "Labels": (1, 16),
}
_INFO_INT_BOOLS_BEFORE_119 = ("Debug", "IPv4Forwarding", "MemoryLimit", "SwapLimit")
_VERSION_SINCE: dict[str, Version] = {"Os": (1, 18), "Arch": (1, 18), "KernelVersion": (1, 18),
                                      "BuildTime": (1, 19), "Experimental": (1, 19)}


def json_bytes(body: WireModel | dict[str, Any] | list[Any] | None) -> bytes:
    """A response body as svc encodes JSON: compact, one line."""
    if isinstance(body, WireModel):
        return body.wire()
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def json_response(body: WireModel | dict[str, Any] | list[Any] | None,
                  status: int = 200) -> Response:
    return Response(json_bytes(body), status=status, content_type="application/json")


def shape_version(v: VersionInfo, version: Version) -> dict[str, Any]:
    body = v.model_dump(by_alias=True)
    return {k: val for k, val in body.items() if version >= _VERSION_SINCE.get(k, (0, 0))}


def shape_info(info: SystemInfo, version: Version) -> dict[str, Any]:
    body = info.model_dump(by_alias=True)
    body = {k: v for k, v in body.items() if version >= _INFO_SINCE.get(k, (0, 0))}
    if version < (1, 19):
        for key in _INFO_INT_BOOLS_BEFORE_119:
            body[key] = int(body[key])
    return body
