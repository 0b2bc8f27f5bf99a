"""Network namespace files: made by svc before the runtime runs, entered by path, removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from svc.network.netns import create_netns, delete_netns, in_netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making a namespace needs root")


def _links() -> list[str]:
    with IPRoute() as ip:
        return sorted(str(link.get_attr("IFLA_IFNAME")) for link in ip.get_links())


def test_a_namespace_file_holds_a_new_namespace(tmp_path: Path) -> None:
    path = tmp_path / "ns"
    create_netns(path)
    try:
        assert os.path.ismount(path)
        assert os.stat(path).st_ino != os.stat("/proc/self/ns/net").st_ino
        assert in_netns(path, _links) == ["lo"]  # a fresh namespace: only its loopback
        assert len(_links()) > 1 or _links() != ["lo"]  # this thread never moved
        with pytest.raises(FileExistsError):
            create_netns(path)
    finally:
        assert delete_netns(path)
    assert not path.exists() and not delete_netns(path)


def test_a_file_left_unmounted_by_a_crash_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "ns"
    path.touch()  # made, never mounted: a crash between the two
    assert delete_netns(path) and not path.exists()
