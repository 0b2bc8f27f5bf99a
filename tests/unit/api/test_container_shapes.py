"""The list entry kept in two encoded pieces around Status (``encoded_summary``) joins to the
same JSON as the whole entry, wherever Status falls (versions drop fields around it); the
file paths inspect joins as text are ``Container``'s own."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic_core
import pytest

from svc.api.container_shapes import _paths, _split_at_status
from svc.engine.containers.container import Container
from svc.models.containers import ContainerConfig, HostConfigBody


@pytest.mark.parametrize("body", [
    {"Id": "a", "Labels": {"Status": ""}, "Status": "", "HostConfig": {"NetworkMode": "x"}},
    {"Id": "a", "Names": ["/é"], "Status": ""},
    {"Status": "", "Mounts": []},
    {"Status": ""},
])
def test_pieces_join_to_the_whole_entry(body: dict[str, Any]) -> None:
    head, tail = _split_at_status(body)
    for status in ("Up 2 seconds", "Exited (0) 3 minutes ago", ""):
        joined = head + pydantic_core.to_json(status) + tail
        assert joined == pydantic_core.to_json({**body, "Status": status})


def test_inspect_paths_are_the_containers() -> None:
    c = Container(id="c" * 64, name="/c", created_ns=1, path="sh", args=[],
                  config=ContainerConfig(), host_config=HostConfigBody(), image_id="sha256:x",
                  dir=Path("/var/lib/svc/containers") / ("c" * 64))
    images: Any = SimpleNamespace(images={})
    shown = _paths(c, images)
    assert shown["ResolvConfPath"] == str(c.resolv_conf_path)
    assert shown["HostnamePath"] == str(c.hostname_path)
    assert shown["HostsPath"] == str(c.hosts_path)
    assert shown["LogPath"] == str(c.log_path)
    assert shown["GraphDriver"]["Data"] == {"UpperDir": str(c.upper_dir),
                                            "WorkDir": str(c.work_dir),
                                            "MergedDir": str(c.rootfs)}
