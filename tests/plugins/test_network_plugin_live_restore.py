"""Live restore and network plugins: the plugin endpoint of a container that runs on under
conmon while the daemon is away is not undone at the next start (it would take the
container's interface away); it is undone once that container ends."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.plugins.network_helpers import (
    bodies,
    cli,
    ipam_plugin,
    net_plugin,
    net_state,
    subnet,
    wait_for,
)
from tests.support.daemon import Daemon, import_busybox
from tests.support.plugins.process import PluginProcess

pytestmark = pytest.mark.usefixtures("netlinks")


def test_a_container_taken_back_keeps_its_plugin_endpoint(spawn,  # type: ignore[no-untyped-def]
                                                          plugins: list[PluginProcess]) -> None:
    from tests.runtime.conftest import skip_reason
    if reason := skip_reason() or (shutil.which("conmon") is None and "no conmon"):
        pytest.skip(reason)
    d: Daemon = spawn(["--live-restore"])
    import_busybox(d)
    drv = net_plugin(plugins, d, "plive")
    ipam_plugin(plugins, d, "pilive", subnet())
    cli(d.url, "network", "create", "-d", "plive", "--ipam-driver", "pilive", "pl")
    cid = cli(d.url, "run", "-d", "--net", "pl", "busybox", "sleep", "300").strip()
    before = net_state(drv)["endpoints"]
    assert len(before) == 1
    d.kill()
    d.start()
    time.sleep(1.5)  # (what is owed is undone at once after a start)
    assert net_state(drv)["endpoints"] == before
    assert bodies(drv, "Leave") == [] and bodies(drv, "DeleteEndpoint") == []
    assert "eth0" in cli(d.url, "exec", cid, "ip", "-o", "link")  # its interface is there
    cli(d.url, "stop", "-t", "1", cid)
    wait_for(lambda: net_state(drv)["endpoints"] == {}, timeout=30,
             message=f"its endpoint undone once it ended: {net_state(drv)}")
    [eid] = before
    assert [b["EndpointID"] for b in bodies(drv, "DeleteEndpoint")] == [eid]
