"""Volume drivers over the plugin protocol, through the docker CLI and both SDKs: create, ls,
inspect and rm with a plugin driver; containers that use a plugin's volumes (named, with
``--volume-driver``, anonymous); what each call carries and when it is made."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx

from tests.conftest import http_client, run_sdk
from tests.plugins.volume_helpers import (
    bodies,
    cli,
    mount_count,
    read_state,
    record,
    volume_plugin,
)
from tests.support.daemon import Daemon
from tests.support.etcdd import free_port
from tests.support.plugins.process import PluginProcess


def events(host: str, since: float, *filters: str) -> list[dict[str, object]]:
    args = [f"--filter={f}" for f in filters]
    out = cli(host, "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
              "--format", "{{json .}}", *args)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_cli_create_ls_inspect_rm(vhost: str, vdaemon: Daemon,
                                  plugins: list[PluginProcess]) -> None:
    p = volume_plugin(plugins, vdaemon, "vpcli")
    since = time.time()
    assert cli(vhost, "volume", "create", "-d", "vpcli", "--name", "pv1", "-o", "size=10",
               "-o", "tier=fast").strip() == "pv1"
    # as moby's store: Get (is it there?), Create with the options, Path for the answer
    assert bodies(p, "Create") == [{"Name": "pv1", "Opts": {"size": "10", "tier": "fast"}}]
    assert [c["method"] for c in p.calls()][-3:] == ["VolumeDriver.Get", "VolumeDriver.Create",
                                                    "VolumeDriver.Path"]
    assert (p.state / "volumes" / "pv1").is_dir()
    cli(vhost, "volume", "create", "--name", "loc1")
    ls = cli(vhost, "volume", "ls")
    assert re.search(r"^vpcli\s+pv1$", ls, re.M) and re.search(r"^local\s+loc1$", ls, re.M)
    assert cli(vhost, "volume", "ls", "-q", "-f", "driver=vpcli").split() == ["pv1"]
    assert cli(vhost, "volume", "ls", "-q", "-f", "driver=local").split() == ["loc1"]
    got = json.loads(cli(vhost, "volume", "inspect", "pv1"))[0]
    assert got["Name"] == "pv1" and got["Driver"] == "vpcli"
    assert got["Mountpoint"] == str(p.state / "volumes" / "pv1")
    assert got["Status"] == {"mounts": 0} and got["Scope"] == "local"
    assert bodies(p, "Get")[-1] == {"Name": "pv1"}
    # the daemon records which driver owns the name (a restart knows it)
    assert record(vdaemon, "pv1")["Driver"] == "vpcli"
    # a second create of the name answers the same volume, without asking the plugin
    creates = len(p.calls("VolumeDriver.Create"))
    cli(vhost, "volume", "create", "-d", "vpcli", "--name", "pv1")
    assert len(p.calls("VolumeDriver.Create")) == creates
    err = cli(vhost, "volume", "create", "-d", "vpcli", "--name", "loc1", ok=False)
    assert "A volume named loc1 already exists with the local driver" in err
    cli(vhost, "volume", "rm", "pv1", "loc1")
    assert bodies(p, "Remove") == [{"Name": "pv1"}]
    assert not (p.state / "volumes" / "pv1").exists()
    assert cli(vhost, "volume", "ls", "-q").split() == []
    seen = [(e["Action"], e["Actor"]["ID"], e["Actor"]["Attributes"]["driver"])  # type: ignore[index]
            for e in events(vhost, since, "type=volume", "volume=pv1")]
    assert seen == [("create", "pv1", "vpcli"), ("destroy", "pv1", "vpcli")]


def test_ls_merges_every_plugin_and_adopts_what_they_list(vhost: str, vdaemon: Daemon,
                                                          plugins: list[PluginProcess]) -> None:
    a = volume_plugin(plugins, vdaemon, "vpa")
    volume_plugin(plugins, vdaemon, "vpb")
    cli(vhost, "volume", "create", "-d", "vpa", "--name", "made-a")
    cli(vhost, "volume", "create", "-d", "vpb", "--name", "made-b")
    # a volume the plugin has and the daemon never heard of (made on another host, say)
    state = read_state(a.state)
    state["outside"] = {"opts": None, "mounts": {}}
    (a.state / "volumes.json").write_text(json.dumps(state))
    (a.state / "volumes" / "outside").mkdir()
    ls = cli(vhost, "volume", "ls")
    assert re.search(r"^vpa\s+outside$", ls, re.M)
    assert re.search(r"^vpa\s+made-a$", ls, re.M) and re.search(r"^vpb\s+made-b$", ls, re.M)
    assert record(vdaemon, "outside")["Driver"] == "vpa"  # adopted: known after a restart
    # a plugin that is down: left out with a warning, its recorded volumes still shown
    b = plugins[1]
    b.kill()
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(vdaemon.sock)),
                      base_url="http://svc", timeout=30) as c:
        t = time.monotonic()
        body = c.get("/volumes").json()
        assert time.monotonic() - t < 5
    names = {v["Name"]: v["Driver"] for v in body["Volumes"]}
    assert names == {"outside": "vpa", "made-a": "vpa", "made-b": "vpb"}
    assert len(body["Warnings"]) == 1 and body["Warnings"][0].startswith("list vpb: ")
    assert "unreachable" in body["Warnings"][0]
    b.start()


def test_run_with_a_plugin_volume(vhost: str, vdaemon: Daemon,
                                  plugins: list[PluginProcess]) -> None:
    p = volume_plugin(plugins, vdaemon, "vprun")
    since = time.time()
    cli(vhost, "run", "--rm", "-v", "rv:/data", "--volume-driver", "vprun", "busybox",
        "sh", "-c", "echo hi > /data/f")
    assert (p.state / "volumes" / "rv" / "f").read_text() == "hi\n"
    # a second container names the volume alone: the existing one, the plugin's
    assert cli(vhost, "run", "--rm", "-v", "rv:/data:ro", "busybox", "cat",
               "/data/f") == "hi\n"
    mounts, unmounts = bodies(p, "Mount"), bodies(p, "Unmount")
    assert len(mounts) == 2 and mounts == unmounts
    assert mounts[0]["Name"] == "rv" and mounts[0]["ID"] != mounts[1]["ID"]
    assert all(re.fullmatch(r"[0-9a-f]{64}", m["ID"]) for m in mounts)
    assert mount_count(p.state, "rv") == 0
    assert bodies(p, "Create") == [{"Name": "rv", "Opts": None}]
    seen = [(e["Action"], e["Actor"]["Attributes"].get("driver"),  # type: ignore[index]
             e["Actor"]["Attributes"].get("container"))  # type: ignore[index]
            for e in events(vhost, since, "type=volume", "volume=rv")]
    assert seen == [("create", "vprun", None),
                    ("mount", "vprun", mounts[0]["ID"]), ("unmount", "vprun", mounts[0]["ID"]),
                    ("mount", "vprun", mounts[1]["ID"]), ("unmount", "vprun", mounts[1]["ID"])]


def test_inspect_shows_the_plugin_path_and_rm_refuses_while_used(
        vhost: str, vdaemon: Daemon, plugins: list[PluginProcess]) -> None:
    p = volume_plugin(plugins, vdaemon, "vpuse")
    cid = cli(vhost, "create", "-v", "used:/d", "--volume-driver", "vpuse", "busybox",
              "true").strip()
    mounts = json.loads(cli(vhost, "inspect", cid))[0]["Mounts"]
    assert [(m["Name"], m["Driver"], m["Destination"]) for m in mounts] == [
        ("used", "vpuse", "/d")]
    err = cli(vhost, "volume", "rm", "used", ok=False)
    assert "volume is in use" in err and cid in err
    assert bodies(p, "Remove") == []
    cli(vhost, "start", "-a", cid)
    mounts = json.loads(cli(vhost, "inspect", cid))[0]["Mounts"]
    assert mounts[0]["Source"] == str(p.state / "volumes" / "used")
    cli(vhost, "rm", cid)
    cli(vhost, "volume", "rm", "used")
    assert bodies(p, "Remove") == [{"Name": "used"}]


def test_anonymous_volumes_take_the_volume_driver(vdaemon: Daemon,
                                                  plugins: list[PluginProcess],
                                                  vhost: str) -> None:
    p = volume_plugin(plugins, vdaemon, "vpanon")
    cid = cli(vhost, "run", "-d", "--volume-driver", "vpanon", "-v", "/scratch", "busybox",
              "sh", "-c", "echo x > /scratch/y").strip()
    cli(vhost, "wait", cid)
    [m] = json.loads(cli(vhost, "inspect", cid))[0]["Mounts"]
    assert m["Driver"] == "vpanon" and re.fullmatch(r"[0-9a-f]{64}", m["Name"])
    assert (p.state / "volumes" / m["Name"] / "y").read_text() == "x\n"
    assert bodies(p, "Create") == [{"Name": m["Name"], "Opts": None}]
    cli(vhost, "rm", "-v", cid)  # its anonymous volume goes with it, at the plugin too
    assert bodies(p, "Remove") == [{"Name": m["Name"]}]


def test_a_plugin_found_by_a_spec_file_on_tcp(vhost: str, vdaemon: Daemon,
                                              plugins: list[PluginProcess]) -> None:
    port = free_port()
    p = volume_plugin(plugins, vdaemon, "vptcp", tcp=f"127.0.0.1:{port}",
                      spec_dir=vdaemon.plugin_dir, args={"capabilities": "none"})
    assert (vdaemon.plugin_dir / "vptcp.spec").read_text() == f"tcp://127.0.0.1:{port}\n"
    cli(vhost, "volume", "create", "-d", "vptcp", "--name", "overtcp")
    cli(vhost, "run", "--rm", "-v", "overtcp:/t", "busybox", "sh", "-c", "echo tcp > /t/f")
    assert (p.state / "volumes" / "overtcp" / "f").read_text() == "tcp\n"
    assert len(bodies(p, "Mount")) == len(bodies(p, "Unmount")) == 1
    # a plugin of 1.11 has no Capabilities (a 404): local scope, asked once per activation
    assert json.loads(cli(vhost, "volume", "inspect", "overtcp"))[0]["Scope"] == "local"
    assert len(p.calls("VolumeDriver.Capabilities")) == 1


def test_sdk7(vhost: str, vdaemon: Daemon, plugins: list[PluginProcess]) -> None:
    p = volume_plugin(plugins, vdaemon, "vpsdk", args={"scope": "global"})
    out = run_sdk("sdk7", """
import json, sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
v = c.volumes.create(name="sdkv", driver="vpsdk", driver_opts={"k": "v"}, labels={"l": "1"})
print(json.dumps(v.attrs))
print(json.dumps([x.name for x in c.volumes.list(filters={"driver": "vpsdk"})]))
out = c.containers.run("busybox", ["sh", "-c", "echo sdk > /m/f; cat /m/f"], remove=True,
                       volumes={"sdkv": {"bind": "/m", "mode": "rw"}})
print(out.decode().strip())
c.volumes.get("sdkv").remove()
print(json.dumps([x.name for x in c.volumes.list()]))
""", vhost)
    lines = out.splitlines()
    attrs = json.loads(lines[0])
    assert attrs["Driver"] == "vpsdk" and attrs["Labels"] == {"l": "1"}
    assert attrs["Scope"] == "global"
    assert attrs["Mountpoint"] == str(p.state / "volumes" / "sdkv")
    assert json.loads(lines[1]) == ["sdkv"] and lines[2] == "sdk"
    assert json.loads(lines[3]) == []
    assert bodies(p, "Create") == [{"Name": "sdkv", "Opts": {"k": "v"}}]
    assert len(bodies(p, "Mount")) == 1 and bodies(p, "Mount") == bodies(p, "Unmount")


def test_dockerpy1(vhost: str, vdaemon: Daemon, plugins: list[PluginProcess]) -> None:
    """docker-py 1.10.6 sends VolumeDriver at the top level of the create body (its
    ``create_host_config`` has no such argument), Binds in HostConfig."""
    p = volume_plugin(plugins, vdaemon, "vpdpy")
    out = run_sdk("dockerpy1", """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
print(json.dumps(c.create_volume("dpyv0", driver="vpdpy", driver_opts={"a": "b"})))
ctr = c.create_container("busybox", ["sh", "-c", "echo dpy > /w/f"], volume_driver="vpdpy",
                         host_config=c.create_host_config(binds=["dpyv:/w"]))
c.start(ctr)
print(c.wait(ctr))
print(json.dumps(c.inspect_volume("dpyv")))
c.remove_container(ctr)
c.remove_volume("dpyv")
c.remove_volume("dpyv0")
print(json.dumps(c.volumes()))
""", vhost)
    lines = out.splitlines()
    assert json.loads(lines[0])["Driver"] == "vpdpy"
    assert lines[1] == "0"
    v = json.loads(lines[2])
    assert v["Driver"] == "vpdpy" and v["Mountpoint"] == str(p.state / "volumes" / "dpyv")
    assert json.loads(lines[3])["Volumes"] in (None, [])
    assert bodies(p, "Create") == [{"Name": "dpyv0", "Opts": {"a": "b"}},
                                   {"Name": "dpyv", "Opts": None}]
    assert not (p.state / "volumes" / "dpyv").exists()


async def test_hostconfig_mounts_with_a_driver_config(vhost: str, vdaemon: Daemon,
                                                      plugins: list[PluginProcess]) -> None:
    p = volume_plugin(plugins, vdaemon, "vpmnt")
    async with http_client(vdaemon.sock) as c:
        r = await c.post("/containers/create", json={
            "Image": "busybox", "Cmd": ["true"], "HostConfig": {"Mounts": [{
                "Type": "volume", "Source": "mnt1", "Target": "/m", "VolumeOptions": {
                    "DriverConfig": {"Name": "vpmnt", "Options": {"o": "1"}}}}]}})
        assert r.status_code == 201, r.text
        [m] = (await c.get(f"/containers/{r.json()['Id']}/json")).json()["Mounts"]
    assert (m["Name"], m["Driver"]) == ("mnt1", "vpmnt")
    assert bodies(p, "Create") == [{"Name": "mnt1", "Opts": {"o": "1"}}]


def test_plugin_volumes_in_one_container_are_data_only_while_it_runs(
        vhost: str, vdaemon: Daemon, plugins: list[PluginProcess], tmp_path: Path) -> None:
    """docker cp into a stopped container leaves a plugin's volume alone (it is not
    mounted then); while it runs, the copy lands in the volume."""
    p = volume_plugin(plugins, vdaemon, "vpcp")
    cid = cli(vhost, "run", "-d", "-v", "cpv:/v", "--volume-driver", "vpcp", "busybox",
              "sleep", "300").strip()
    (tmp_path / "in").write_text("copied\n")
    cli(vhost, "cp", str(tmp_path / "in"), f"{cid}:/v/in")
    assert (p.state / "volumes" / "cpv" / "in").read_text() == "copied\n"
    cli(vhost, "rm", "-f", cid)
    assert mount_count(p.state, "cpv") == 0


def test_info_lists_an_activated_volume_plugin_after_the_builtin_driver(
        vhost: str, vdaemon: Daemon, plugins: list[PluginProcess]) -> None:
    volume_plugin(plugins, vdaemon, "vpinfo")
    before = json.loads(cli(vhost, "info", "--format", "{{json .Plugins}}"))
    assert before["Volume"][0] == "local" and "vpinfo" not in before["Volume"]
    assert before["Network"][:3] == ["bridge", "host", "null"]
    cli(vhost, "volume", "create", "-d", "vpinfo", "--name", "pvinfo")
    after = json.loads(cli(vhost, "info", "--format", "{{json .Plugins}}"))
    assert after["Volume"][0] == "local" and "vpinfo" in after["Volume"]
    assert "vpinfo" not in after["Network"]  # it implements VolumeDriver only
