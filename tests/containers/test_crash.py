"""The daemon SIGKILLed with containers running: after a restart every container has a true
state, restart-policy ones run again, and nothing is leaked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import trio

from svc.network import bridge as br
from svc.runtime.cgroups import CgroupV1
from svc.runtime.mounts import mounts_under
from tests.conftest import http_client
from tests.containers.conftest import IMAGE
from tests.runtime.conftest import RUNC, skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon


async def _make(c: httpx.AsyncClient, cmd: list[str], name: str, **hc: object) -> str:
    r = await c.post("/containers/create", params={"name": name},
                     json={"Image": IMAGE, "Cmd": cmd, "HostConfig": hc})
    assert r.status_code == 201, r.text
    cid: str = r.json()["Id"]
    assert (await c.post(f"/containers/{cid}/start")).status_code == 204
    return cid


def _runc_ids(d: Daemon) -> set[str]:
    out = subprocess.run([RUNC, "--root", str(d.exec_root / "runc"), "list", "-q"],
                         capture_output=True, text=True, check=False).stdout
    return set(out.split())


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def test_sigkill_and_restart(spawn) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        import pytest
        pytest.skip(reason)
    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        await timg.import_busybox(c)
        r = await c.post("/volumes/create", json={"Name": "crashtmp", "DriverOpts": {
            "type": "tmpfs", "device": "tmpfs", "o": "size=1m"}})
        assert r.status_code == 201
        tmp_point = r.json()["Mountpoint"]
        plain = await _make(c, ["sh", "-c", "echo kept > /k/f; sleep 300"], "plain",
                            Binds=["crashtmp:/t", "keep:/k"])
        always = await _make(c, ["sleep", "300"], "always", RestartPolicy={"Name": "always"})
        unless = await _make(c, ["sleep", "300"], "unless",
                             RestartPolicy={"Name": "unless-stopped"})
        stopped = await _make(c, ["sh", "-c", "exit 3"], "stopped",
                              RestartPolicy={"Name": "on-failure", "MaximumRetryCount": 1})
        with trio.fail_after(10):  # wait returns at each exit: the first run's, the retry's
            await c.post(f"/containers/{stopped}/wait")
            await c.post(f"/containers/{stopped}/wait")
        await c.post(f"/containers/{unless}/stop", params={"t": "0"})
        pids = {cid: (await c.get(f"/containers/{cid}/json")).json()["State"]["Pid"]
                for cid in (plain, always)}
        bridge_id = (await c.get("/networks/bridge")).json()["Id"]
        with trio.fail_after(10):
            while not (d.root / "volumes" / "keep" / "_data" / "f").exists():
                await trio.sleep(0.05)
    d.kill()
    assert all(_alive(p) for p in pids.values())  # orphaned, still running
    d.start()
    async with http_client(d.sock) as c:
        def state(cid: str) -> dict[str, object]:
            return states[cid]["State"]  # type: ignore[no-any-return]

        states = {cid: (await c.get(f"/containers/{cid}/json")).json()
                  for cid in (plain, always, unless, stopped)}
        assert (state(plain)["Status"], state(plain)["ExitCode"]) == ("exited", 137)
        assert state(always)["Status"] == "running"
        assert state(always)["Pid"] != pids[always]
        assert state(unless)["Status"] == "exited"  # stopped by hand: stays down
        assert (state(stopped)["Status"], state(stopped)["ExitCode"]) == ("exited", 3)
        listed = (await c.get("/containers/json", params={"all": "1"})).json()
        assert {x["Id"] for x in listed} == {plain, always, unless, stopped}
        assert not any(_alive(p) for p in pids.values())
        # nothing leaked: only the restarted container has runc state, a mount, a cgroup
        assert _runc_ids(d) == {always}
        mounted = {p for p in mounts_under(d.root) if p.name == "merged"}
        assert mounted == {d.root / "containers" / always / "fs" / "merged"}
        assert CgroupV1().children(d.cgroup_parent) == [f"{d.cgroup_parent}/{always}"]
        assert br.links_on(d.bridge) == [f"s0{always[:12]}h"]  # the killed ones' veths died
        assert (await c.post(f"/containers/{always}/stop", params={"t": "0"})).status_code \
            == 204
        assert _runc_ids(d) == set()
        assert not [p for p in mounts_under(d.root) if p.name == "merged"]
        assert os.path.isdir(d.root / "containers" / plain)
        # volumes survive; the crashed container's tmpfs volume was unmounted at the start
        vols = {v["Name"]: v for v in (await c.get("/volumes")).json()["Volumes"]}
        assert set(vols) == {"crashtmp", "keep"}
        assert Path(vols["keep"]["Mountpoint"], "f").read_text() == "kept\n"
        assert Path(tmp_point) not in mounts_under(d.root)
        # the bridge network keeps its id; no container is left on it (all stopped now)
        bridge = (await c.get("/networks/bridge")).json()
        assert bridge["Id"] == bridge_id and bridge["Containers"] == {}
