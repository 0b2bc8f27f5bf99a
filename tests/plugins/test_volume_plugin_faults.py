"""Volume plugins that refuse, hang, crash or answer garbage; reference counts of mounts
across containers; and a daemon killed with SIGKILL while plugin volumes are mounted."""

from __future__ import annotations

import json
import subprocess
import time

import httpx

from tests.conftest import docker_cli
from tests.plugins.volume_helpers import (
    bodies,
    cli,
    mount_count,
    read_state,
    record,
    volume_plugin,
    wait_for,
)
from tests.support.daemon import Daemon, import_busybox
from tests.support.plugins.process import PluginProcess


def api(d: Daemon) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                        timeout=60)


def running_ids(host: str) -> list[str]:
    return cli(host, "ps", "-q", "--no-trunc").split()


def test_unknown_drivers_in_the_engines_words(vhost: str, vdaemon: Daemon,
                                              plugins: list[PluginProcess]) -> None:
    words = "Error looking up volume plugin nope: plugin not found"
    err = cli(vhost, "volume", "create", "-d", "nope", "--name", "nv", ok=False)
    assert f"create nv: {words}" in err
    with api(vdaemon) as c:
        r = c.post("/volumes/create", json={"Name": "nv", "Driver": "nope"})
        assert r.status_code == 404 and words in r.text
    err = cli(vhost, "run", "--rm", "-v", "nv:/d", "--volume-driver", "nope", "busybox",
              "true", ok=False)
    assert words in err
    assert cli(vhost, "ps", "-aq") == "" and cli(vhost, "volume", "ls", "-q") == ""
    # a volume whose plugin has gone away: rm says which plugin cannot be found
    p = volume_plugin(plugins, vdaemon, "vpgone")
    cli(vhost, "volume", "create", "-d", "vpgone", "--name", "orphan")
    p.stop()
    err = cli(vhost, "volume", "rm", "orphan", ok=False)
    assert "remove orphan: Error looking up volume plugin vpgone: plugin not found" in err
    with api(vdaemon) as c:
        r = c.get("/volumes")
        assert r.json()["Warnings"] == [
            "list vpgone: Error looking up volume plugin vpgone: plugin not found"]
        assert [v["Name"] for v in r.json()["Volumes"]] == ["orphan"]
    (vdaemon.root / "store" / "volumes" / "orphan.json").unlink()  # (the record's end)


def test_refusals_reach_the_user(vhost: str, vdaemon: Daemon,
                                 plugins: list[PluginProcess]) -> None:
    volume_plugin(plugins, vdaemon, "vprefuse")
    volume_plugin(plugins, vdaemon, "vprefuse200", args={"err-status": "200"})
    for driver in ("vprefuse", "vprefuse200"):
        err = cli(vhost, "volume", "create", "-d", driver, "--name", "q",
                  "-o", "refuse=quota exceeded", ok=False)
        assert "create q: VolumeDriver.Create: quota exceeded" in err, err
    p = plugins[0]
    cli(vhost, "volume", "create", "-d", "vprefuse", "--name", "good")
    cli(vhost, "volume", "create", "-d", "vprefuse", "--name", "bad",
        "-o", "mount-refuse=device busy")
    # created through the API, whose Binds keep their order: the CLI sends its -v binds in
    # Go map order, and 'bad' first would leave 'good' never mounted
    with api(vdaemon) as c:
        made = c.post("/v1.23/containers/create", params={"name": "refused"},
                      json={"Image": "busybox", "Cmd": ["true"],
                            "HostConfig": {"Binds": ["good:/a", "bad:/b"]}})
        assert made.status_code == 201, made.text
    r = docker_cli(vhost, "start", "refused")
    assert r.returncode != 0 and "VolumeDriver.Mount: device busy" in r.stderr, r.stderr
    state = json.loads(cli(vhost, "inspect", "refused"))[0]["State"]
    assert not state["Running"] and "VolumeDriver.Mount: device busy" in state["Error"]
    # the volume mounted before the refusal was unmounted: nothing left mounted
    assert [b["Name"] for b in bodies(p, "Mount")] == ["good", "bad"]
    assert [b["Name"] for b in bodies(p, "Unmount")] == ["good"]
    assert mount_count(p.state, "good") == 0 and record(vdaemon, "good")["Mounts"] == []
    assert record(vdaemon, "bad")["Mounts"] == []  # refused: owed nothing
    cli(vhost, "rm", "refused")


def test_garbage_and_a_crash_mid_call(vhost: str, vdaemon: Daemon,
                                      plugins: list[PluginProcess]) -> None:
    p = volume_plugin(plugins, vdaemon, "vpbroken")
    p.faults(VolumeDriver_Create="garbage")
    err = cli(vhost, "volume", "create", "-d", "vpbroken", "--name", "g", ok=False)
    assert "create g: VolumeDriver.Create: plugin vpbroken answered with something that is " \
           "not JSON: '<html>this is not json'" in err
    p.faults()
    cli(vhost, "volume", "create", "-d", "vpbroken", "--name", "cv")
    p.faults(VolumeDriver_Mount="crash")
    err = cli(vhost, "run", "--name", "crashed", "-v", "cv:/d", "busybox", "true", ok=False)
    assert "VolumeDriver.Mount: plugin vpbroken went away during the call" in err
    assert running_ids(vhost) == []
    [mount] = bodies(p, "Mount")
    # the plugin may have mounted before it died: an Unmount is owed, sent once it is back
    assert record(vdaemon, "cv")["Mounts"] == [mount["ID"]]
    p.faults()
    p.start()
    wait_for(lambda: bodies(p, "Unmount") == [mount], message="the owed Unmount")
    wait_for(lambda: record(vdaemon, "cv")["Mounts"] == [], message="the record updated")
    assert mount_count(p.state, "cv") == 0
    # and the plugin serves the next container as before
    cli(vhost, "start", "-a", "crashed")
    assert len(bodies(p, "Mount")) == 2 and mount_count(p.state, "cv") == 0


def test_two_containers_count_mounts_by_container(vhost: str, vdaemon: Daemon,
                                                  plugins: list[PluginProcess]) -> None:
    p = volume_plugin(plugins, vdaemon, "vpcount")
    cli(vhost, "volume", "create", "-d", "vpcount", "--name", "shared")
    one = cli(vhost, "run", "-d", "-v", "shared:/s", "busybox", "sleep", "300").strip()
    two = cli(vhost, "run", "-d", "-v", "shared:/s", "busybox", "sleep", "300").strip()
    assert [b["ID"] for b in bodies(p, "Mount")] == [one, two]
    assert read_state(p.state)["shared"]["mounts"] == {one: 1, two: 1}
    assert record(vdaemon, "shared")["Mounts"] == sorted([one, two])
    cli(vhost, "stop", "-t", "0", one)
    assert bodies(p, "Unmount") == [{"Name": "shared", "ID": one}]
    assert read_state(p.state)["shared"]["mounts"] == {two: 1}
    cli(vhost, "restart", "-t", "0", two)  # an Unmount, then a Mount, for the same ID
    assert [b["ID"] for b in bodies(p, "Unmount")] == [one, two]
    assert [b["ID"] for b in bodies(p, "Mount")] == [one, two, two]
    assert read_state(p.state)["shared"]["mounts"] == {two: 1}
    cli(vhost, "rm", "-f", two)
    assert mount_count(p.state, "shared") == 0 and record(vdaemon, "shared")["Mounts"] == []


def test_a_hanging_plugin_holds_up_only_its_callers(spawn, plugins) -> None:  # type: ignore[no-untyped-def]
    from tests.runtime.conftest import skip_reason
    if reason := skip_reason():
        import pytest
        pytest.skip(reason)
    d: Daemon = spawn(["--plugin-timeout", "2"])
    import_busybox(d)
    hang = volume_plugin(plugins, d, "vphang")
    volume_plugin(plugins, d, "vpfine")
    cli(d.url, "volume", "create", "-d", "vpfine", "--name", "fine")
    cli(d.url, "volume", "create", "--name", "loc")
    hang.faults(VolumeDriver_Mount="hang")
    t0 = time.monotonic()
    run = subprocess.Popen(["docker", "run", "--rm", "-v", "hv:/d", "--volume-driver",
                            "vphang", "busybox", "true"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env={"DOCKER_HOST": d.url, "PATH": "/usr/local/bin:/usr/bin:/bin"})
    try:
        wait_for(lambda: bodies(hang, "Mount"), timeout=10, message="the hanging Mount")
        for args in (("ps",), ("volume", "ls"), ("volume", "inspect", "fine"),
                     ("volume", "inspect", "loc"), ("run", "--rm", "-v", "fine:/f", "busybox",
                                                    "true")):
            t = time.monotonic()
            cli(d.url, *args)
            assert time.monotonic() - t < 1.5, f"docker {' '.join(args)} was held up"
        _, err = run.communicate(timeout=20)
    finally:
        run.kill()
    took = time.monotonic() - t0
    assert run.returncode != 0
    assert "VolumeDriver.Mount: plugin vphang did not answer within 2s" in err, err
    assert took < 8, took
    assert cli(d.url, "ps", "-aq") == ""  # --rm: the container is gone, nothing runs
    [mount] = bodies(hang, "Mount")
    # its outcome unknown, the Mount is owed an Unmount: sent in the background
    wait_for(lambda: bodies(hang, "Unmount") == [mount], message="the owed Unmount")
    wait_for(lambda: record(d, "hv")["Mounts"] == [], message="the record updated")
    assert cli(d.url, "volume", "ls", "-q").split() == ["fine", "hv", "loc"]


def test_sigkill_with_plugin_volumes_mounted(spawn, plugins) -> None:  # type: ignore[no-untyped-def]
    from tests.runtime.conftest import skip_reason
    if reason := skip_reason():
        import pytest
        pytest.skip(reason)
    d: Daemon = spawn()
    import_busybox(d)
    p = volume_plugin(plugins, d, "vpcrash")
    cli(d.url, "volume", "create", "-d", "vpcrash", "--name", "kv")
    plain = cli(d.url, "run", "-d", "-v", "kv:/k", "busybox", "sleep", "300").strip()
    always = cli(d.url, "run", "-d", "--restart", "always", "-v", "kv:/k", "busybox",
                 "sleep", "300").strip()
    assert read_state(p.state)["kv"]["mounts"] == {plain: 1, always: 1}
    assert record(d, "kv")["Mounts"] == sorted([plain, always])
    d.kill()
    assert read_state(p.state)["kv"]["mounts"] == {plain: 1, always: 1}  # as the crash left
    d.start()
    # the Unmounts the crash skipped are sent; the ``always`` container mounts again
    wait_for(lambda: read_state(p.state)["kv"]["mounts"] == {always: 1}, timeout=20,
             message=f"the plugin's counts: {read_state(p.state)}")
    ids = [(c["method"].split(".")[1], c["body"]["ID"]) for c in p.calls()
           if c["method"] in ("VolumeDriver.Mount", "VolumeDriver.Unmount")]
    assert ids[:2] == [("Mount", plain), ("Mount", always)]
    assert sorted(ids[2:]) == sorted([("Mount", always), ("Unmount", always),
                                      ("Unmount", plain)])
    assert ids.index(("Unmount", always)) < len(ids) - 1 and ids[-1] == ("Mount", always)
    wait_for(lambda: record(d, "kv")["Mounts"] == [always], message="the record")
    state = json.loads(cli(d.url, "inspect", plain))[0]["State"]
    assert not state["Running"]
    assert running_ids(d.url) == [always]
    # a clean shutdown unmounts what runs
    assert d.stop() == 0
    assert mount_count(p.state, "kv") == 0 and record(d, "kv")["Mounts"] == []


def test_a_plugin_down_while_the_daemon_restarts(spawn, plugins) -> None:  # type: ignore[no-untyped-def]
    from tests.runtime.conftest import skip_reason
    if reason := skip_reason():
        import pytest
        pytest.skip(reason)
    d: Daemon = spawn(["--plugin-timeout", "2"])
    import_busybox(d)
    p = volume_plugin(plugins, d, "vplate")
    cid = cli(d.url, "run", "-d", "-v", "lv:/l", "--volume-driver", "vplate", "busybox",
              "sleep", "300").strip()
    d.kill()
    p.kill()
    t = time.monotonic()
    d.start()  # not held up by the plugin it owes an Unmount
    assert time.monotonic() - t < 10
    assert record(d, "lv")["Mounts"] == [cid]
    assert cli(d.url, "ps", "-q") == ""
    # the owed Unmount fails while the plugin is away (after the activation's 2 s)...
    wait_for(lambda: "the Unmount owed for container" in d.log(), timeout=10,
             message="a failed try, logged")
    p.start()  # ...and is sent again until the plugin answers
    wait_for(lambda: mount_count(p.state, "lv") == 0, timeout=30, message="the Unmount")
    wait_for(lambda: record(d, "lv")["Mounts"] == [], message="the record")
    assert bodies(p, "Unmount") == [{"Name": "lv", "ID": cid}]
