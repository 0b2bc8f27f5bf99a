"""HostConfig fields at the top level of a create body, merged as the engines merged them.

Clients of the older dialects put HostConfig fields beside ``HostConfig`` (docker-py 1.x, and
so compose 1.x: ``CpuShares``, ``Cpuset``/``CpusetCpus``, ``Memory``, ``MemorySwap``,
``VolumeDriver``) or, before API 1.18, sent no ``HostConfig`` at all. moby's
``ContainerConfigWrapper`` embeds a second HostConfig at the top level, so every HostConfig
field found there is read, and ``getHostConfig`` merges:

- no inner ``HostConfig`` (absent or null): the top-level fields are the host config, whole;
- an inner one: each of ``Memory``, ``MemorySwap``, ``CpuShares``, ``CpusetCpus`` and
  ``VolumeDriver`` that the inner one leaves at zero takes its top-level value (the rest of
  the top level is ignored);
- then a top-level ``Cpuset`` fills ``CpusetCpus`` if it is still empty.

Names match as Go's decoder matches them (case-insensitively, ``fold_keys``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from svc.models.base import fields_of, fold_keys

MERGED = ("Memory", "MemorySwap", "CpuShares", "CpusetCpus", "VolumeDriver")


def merge_top_level(data: dict[str, Any], body: type[BaseModel],
                    host: type[BaseModel]) -> dict[str, Any]:
    """``data`` (a create body, keys as sent) with its top-level HostConfig fields merged
    into ``HostConfig`` as the engines merged them; returns ``data`` itself when it has
    none."""
    data = fold_keys(data, fields_of(body))
    host_fields = fields_of(host)
    top = {k: v for k, v in data.items() if k not in fields_of(body).exact}
    if not top:
        return data
    outer = {k: v for k, v in fold_keys(top, host_fields).items() if k in host_fields.exact}
    cpuset = outer.pop("Cpuset", None)
    inner = data.get("HostConfig")
    if not outer and not cpuset:
        return data
    if not isinstance(inner, dict):
        merged = outer  # no inner HostConfig: the top level is the host config
    else:
        merged = fold_keys(inner, host_fields)
        merged = dict(merged)
        for name in MERGED:
            if outer.get(name) and not merged.get(name):
                merged[name] = outer[name]
    if cpuset and not merged.get("CpusetCpus"):
        merged["CpusetCpus"] = cpuset
    return {**data, "HostConfig": merged}
