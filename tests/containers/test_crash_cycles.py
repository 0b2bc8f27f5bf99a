"""SIGKILL at random moments under load, twenty times over: every restart succeeds, every
acknowledged object is there (and every acknowledged removal holds), and nothing leaks.

Each cycle starts the daemon, checks what the previous cycles left, then runs concurrent
clients that create, start, attach to, exec in, commit and remove containers and create and
remove networks and volumes, and kills the daemon at a random moment. The checks after each
restart: the containers, images, networks and volumes acknowledged with a 2xx are there (and
those whose removal was acknowledged are not); runc knows only the containers that run; the
only overlay mounts and cgroups are theirs; the daemon's bridges are its networks' and carry
only their veths; its iptables rules name only its bridges; no container process outlived
its container.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from pyroute2 import IPRoute

from svc.network import bridge as br
from svc.network.firewall import owner_of
from svc.runtime.cgroups import CgroupV1
from svc.runtime.mounts import mounts_under
from tests.conftest import http_client
from tests.containers.test_crash import _runc_ids
from tests.runtime.conftest import skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon

CYCLES = 20
SEED = int(os.environ.get("SVC_CRASH_SEED", "4242"))


@dataclass
class Acked:
    """What the daemon acknowledged: kind -> id -> True (exists), False (removed) or None (a
    removal was sent, unanswered: either may be true)."""

    objects: dict[str, dict[str, bool | None]] = field(default_factory=lambda: {
        "containers": {}, "images": {}, "networks": {}, "volumes": {}})
    pids: set[int] = field(default_factory=set)  # processes of containers started

    def made(self, kind: str, oid: str) -> None:
        self.objects[kind][oid] = True

    async def remove(self, c: httpx.AsyncClient, kind: str, oid: str, url: str,
                     **params: str) -> None:
        self.objects[kind][oid] = None
        if (await c.delete(url, params=params)).status_code in (200, 204):
            self.objects[kind][oid] = False


async def _containers(c: httpx.AsyncClient, acked: Acked, rng: random.Random, n: int) -> None:
    for i in range(1000):
        r = await c.post("/containers/create", params={"name": f"k{n}-{i}"}, json={
            "Image": "busybox", "Cmd": ["sh", "-c", "sleep 30"],
            "Volumes": {"/data": {}} if i % 3 == 0 else None})
        if r.status_code != 201:
            continue
        cid = r.json()["Id"]
        acked.made("containers", cid)
        if (await c.post(f"/containers/{cid}/start")).status_code == 204:
            pid = (await c.get(f"/containers/{cid}/json")).json()["State"]["Pid"]
            if pid:
                acked.pids.add(pid)
        if rng.random() < 0.3:
            r = await c.post("/commit", params={"container": cid, "repo": f"crash{n}",
                                                "tag": str(i)})
            if r.status_code == 201:
                acked.made("images", r.json()["Id"])
        if rng.random() < 0.4:
            await acked.remove(c, "containers", cid, f"/containers/{cid}", force="1")


async def _networks_and_volumes(c: httpx.AsyncClient, acked: Acked, rng: random.Random,
                                n: int) -> None:
    for i in range(1000):
        r = await c.post("/networks/create", json={"Name": f"cn{n}-{i}"})
        if r.status_code == 201:
            nid = r.json()["Id"]
            acked.made("networks", nid)
            if rng.random() < 0.5:
                await acked.remove(c, "networks", nid, f"/networks/{nid}")
        r = await c.post("/volumes/create", json={"Name": f"cv{n}-{i}"})
        if r.status_code == 201:
            acked.made("volumes", f"cv{n}-{i}")
            if rng.random() < 0.5:
                await acked.remove(c, "volumes", f"cv{n}-{i}", f"/volumes/cv{n}-{i}")


async def _attached(c: httpx.AsyncClient, acked: Acked, n: int) -> None:
    """A container with a client attached (and an exec and an archive read going on)."""
    r = await c.post("/containers/create", params={"name": f"att{n}"}, json={
        "Image": "busybox", "Cmd": ["sh", "-c", "while true; do echo tick; sleep 0.05; done"],
        "OpenStdin": True, "AttachStdout": True})
    if r.status_code != 201:
        return
    cid = r.json()["Id"]
    acked.made("containers", cid)
    async with c.stream("POST", f"/containers/{cid}/attach",
                        params={"stream": "1", "stdout": "1", "stdin": "1"}) as att:
        if (await c.post(f"/containers/{cid}/start")).status_code != 204:
            return
        r = await c.post(f"/containers/{cid}/exec", json={"Cmd": ["sleep", "30"]})
        if r.status_code == 201:
            await c.post(f"/exec/{r.json()['Id']}/start", json={"Detach": True})
        async for _ in att.aiter_raw():
            await c.get(f"/containers/{cid}/archive", params={"path": "/bin"})


async def _load(d: Daemon, acked: Acked, rng: random.Random, n: int) -> None:
    async def guarded(fn: Any) -> None:
        try:
            async with http_client(d.sock) as c:
                c.timeout = httpx.Timeout(30)
                await fn(c)
        except (httpx.TransportError, OSError):
            pass  # the daemon died under it: what was not acknowledged may or may not be

    async with trio.open_nursery() as nursery:
        nursery.start_soon(guarded, lambda c: _containers(c, acked, rng, n))
        nursery.start_soon(guarded, lambda c: _networks_and_volumes(c, acked, rng, n))
        nursery.start_soon(guarded, lambda c: _attached(c, acked, n))
        await trio.sleep(rng.uniform(0.2, 1.6))
        d.kill()


def _links_named(prefix: str) -> list[str]:
    with IPRoute() as ip:
        return [n for n in (str(x.get_attr("IFLA_IFNAME")) for x in ip.get_links())
                if n.startswith(prefix)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


async def _check(d: Daemon, acked: Acked) -> None:
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        listed = {x["Id"]: x for x in (await c.get("/containers/json",
                                                    params={"all": "1"})).json()}
        for kind, url in (("containers", "/containers/{}/json"), ("images", "/images/{}/json"),
                          ("networks", "/networks/{}"), ("volumes", "/volumes/{}")):
            for oid, exists in list(acked.objects[kind].items()):
                status = (await c.get(url.format(oid))).status_code
                if exists is None:  # settle it: whichever the daemon kept
                    acked.objects[kind][oid] = status == 200
                    continue
                assert status == (200 if exists else 404), (kind, oid, exists, status)
        running = {cid for cid, x in listed.items() if x["State"] == "running"}
        nets = (await c.get("/networks")).json()
    assert running == set(), running  # no restart policy: nothing runs after the crash
    assert _runc_ids(d) == set()
    assert [p for p in mounts_under(d.root) if p.name == "merged"] == []
    assert CgroupV1().children(d.cgroup_parent) == []
    assert not [p for p in acked.pids if _alive(p)], "a container process outlived the crash"
    owner = owner_of((d.root / "engine-id").read_text().strip())
    bridges = {n["Options"].get("com.docker.network.bridge.name") or
               (d.bridge if n["Name"] == "bridge" else f"br-{n['Id'][:12]}")
               for n in nets if n["Driver"] == "bridge"}
    owned = set(br.owned_bridges(f"svc:{owner}:"))
    assert owned == bridges, (owned ^ bridges)
    assert {b: br.links_on(b) for b in owned} == {b: [] for b in owned}
    assert _links_named(f"svx{owner[:7]}") == []  # no bridge cut off before its alias
    rules = (await trio.run_process(["iptables-save"], capture_stdout=True)).stdout.decode() \
        .splitlines()
    for line in (x for x in rules if f"svc:{owner}:" in x):
        named = {w for w in line.split() if w.startswith(("br-", d.bridge))}
        assert named <= owned, line


async def test_twenty_sigkills_under_load(spawn) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        pytest.skip(reason)
    rng = random.Random(SEED)
    acked = Acked()
    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        await timg.import_busybox(c)
    for n in range(CYCLES):
        await _load(d, acked, rng, n)
        d.start()
        try:
            await _check(d, acked)
        except AssertionError as exc:
            raise AssertionError(f"after kill {n + 1}: {exc}\n{d.log()[-3000:]}") from exc
    made = sum(len(kind) for kind in acked.objects.values())
    assert made > 40, acked.objects  # the load did real work
    assert "another svcd is already using" not in d.log()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        for cid in [x["Id"] for x in (await c.get("/containers/json",
                                                   params={"all": "1"})).json()]:
            assert (await c.delete(f"/containers/{cid}", params={"v": "1"})).status_code == 204
        for net in (await c.get("/networks")).json():
            if net["Name"] not in ("bridge", "host", "none"):
                assert (await c.delete(f"/networks/{net['Id']}")).status_code in (200, 204)
    assert d.stop() == 0
    owner = owner_of((d.root / "engine-id").read_text().strip())
    assert set(br.owned_bridges(f"svc:{owner}:")) <= {d.bridge}
    rules = (await trio.run_process(["iptables-save"], capture_stdout=True)).stdout.decode()
    assert f"svc:{owner}:" not in rules
