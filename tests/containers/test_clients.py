"""The docker CLI and the SDKs (API 1.23) driving svc's container endpoints."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

from tests.conftest import docker_cli, run_sdk
from tests.support.daemon import Daemon


def ok(host: str, *args: str, timeout: float = 60) -> str:
    out = docker_cli(host, *args, timeout=timeout)
    assert out.returncode == 0, f"docker {' '.join(args)}: {out.stderr}"
    return out.stdout


def test_cli_lifecycle(host: str) -> None:
    cid = ok(host, "create", "--name", "web", "-l", "role=web", "busybox", "sleep", "300")
    cid = cid.strip()
    assert len(cid) == 64
    assert ok(host, "ps", "-a", "-q", "--no-trunc", "-f", "status=created").split() == [cid]
    ok(host, "start", "web")
    assert ok(host, "ps", "-q", "--no-trunc").split() == [cid]
    assert ok(host, "ps", "-q", "-f", "label=role=web", "--no-trunc").split() == [cid]
    assert ok(host, "inspect", "-f", "{{.State.Running}} {{.Name}}", "web").split() == \
        ["true", "/web"]
    ok(host, "pause", "web")
    assert "Paused" in ok(host, "ps", "-f", "status=paused")
    ok(host, "unpause", "web")
    top = ok(host, "top", "web")
    assert "sleep 300" in top and "PID" in top
    ok(host, "update", "--memory", "64m", "--memory-swap", "128m", "web")
    assert ok(host, "inspect", "-f", "{{.HostConfig.Memory}}", "web").strip() == \
        str(64 << 20)
    ok(host, "rename", "web", "web2")
    t0 = time.monotonic()
    ok(host, "restart", "-t", "1", "web2")
    assert time.monotonic() - t0 < 15
    assert ok(host, "inspect", "-f", "{{.State.Running}}", "web2").strip() == "true"
    ok(host, "kill", "-s", "KILL", "web2")
    assert ok(host, "wait", "web2").strip() == "137"
    ok(host, "start", "web2")
    ok(host, "stop", "-t", "1", "web2")
    assert "Exited (137)" in ok(host, "ps", "-a", "-f", "name=web2")
    ok(host, "rm", "web2")
    assert ok(host, "ps", "-aq") == ""
    bad = docker_cli(host, "start", "nope")
    assert bad.returncode != 0 and "No such container: nope" in bad.stderr


def test_cli_run_detached_and_logs(host: str) -> None:
    cid = ok(host, "run", "-d", "busybox", "sh", "-c",
             "for i in 1 2 3; do echo line$i; done; sleep 1; echo late >&2").strip()
    out = docker_cli(host, "logs", "-f", cid, timeout=30)
    assert out.stdout == "line1\nline2\nline3\n" and out.stderr == "late\n"
    tail = docker_cli(host, "logs", "--tail", "2", cid)  # counts both streams, as dockerd
    assert (tail.stdout, tail.stderr) == ("line3\n", "late\n")
    stamped = ok(host, "logs", "-t", cid).splitlines()
    assert stamped[0].endswith(" line1") and stamped[0][:4].isdigit()
    assert ok(host, "logs", "--since", str(int(time.time()) + 60), cid) == ""
    # "run --rm -d": below API 1.25 the CLI drops AutoRemove and would remove the container
    # itself only while attached (attach is another issue's); the container runs detached
    rm_cid = ok(host, "run", "--rm", "-d", "busybox", "true").strip()
    assert ok(host, "wait", rm_cid).strip() == "0"
    failed = docker_cli(host, "run", "-d", "busybox", "/no/such/binary")
    assert failed.returncode == 127 and "no such file or directory" in failed.stderr


def test_cli_cp_diff_export_commit(host: str, tmp_path: Path) -> None:
    ok(host, "run", "-d", "--name", "fs", "busybox", "sh", "-c",
       "mkdir /data && echo inside > /data/f && sleep 300")
    time.sleep(0.3)
    ok(host, "cp", "fs:/data/f", str(tmp_path / "out"))
    assert (tmp_path / "out").read_text() == "inside\n"
    (tmp_path / "in.txt").write_text("from host\n")
    ok(host, "cp", str(tmp_path / "in.txt"), "fs:/data/")
    ok(host, "cp", "fs:/data", str(tmp_path / "dir"))
    assert (tmp_path / "dir" / "in.txt").read_text() == "from host\n"
    diff = ok(host, "diff", "fs").splitlines()
    assert "A /data" in diff and "A /data/f" in diff
    ok(host, "export", "-o", str(tmp_path / "fs.tar"), "fs")
    with tarfile.open(tmp_path / "fs.tar") as t:
        assert "data/in.txt" in t.getnames()
    image_id = ok(host, "commit", "-c", 'CMD ["cat", "/data/f"]', "-m", "snap", "fs",
                  "fs-image:1").strip()
    assert image_id.startswith("sha256:")
    out = ok(host, "run", "-d", "fs-image:1").strip()
    assert ok(host, "wait", out).strip() == "0"
    assert ok(host, "logs", out) == "inside\n"


SDK7 = """
import io, json, sys, tarfile, docker
c = docker.APIClient(base_url=sys.argv[1], version="1.23")
ctr = c.create_container("busybox", ["sh", "-c", "echo hi; echo there >&2; exit 4"],
                         name="sdk7", host_config=c.create_host_config(mem_limit="32m"),
                         labels={"k": "v"})
c.start(ctr)
res = c.wait(ctr)
out = {"wait": res, "logs": c.logs(ctr).decode(),
       "stdout": c.logs(ctr, stderr=False).decode(),
       "inspect": c.inspect_container("sdk7"),
       "list": c.containers(all=True, filters={"label": "k=v"})}
ctr2 = c.create_container("busybox", ["sleep", "60"])
c.start(ctr2)
out["top"] = c.top(ctr2)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as t:
    info = tarfile.TarInfo("put.txt"); data = b"sdk"; info.size = len(data)
    t.addfile(info, io.BytesIO(data))
out["put"] = c.put_archive(ctr2, "/tmp", buf.getvalue())
stream, stat = c.get_archive(ctr2, "/tmp/put.txt")
raw = b"".join(stream)
out["stat"] = stat
out["got"] = tarfile.open(fileobj=io.BytesIO(raw)).extractfile("put.txt").read().decode()
out["update"] = c.update_container(ctr2, mem_limit="64m", memswap_limit="128m")
out["diff"] = c.diff(ctr2)
c.stop(ctr2, timeout=1)
out["stopped"] = c.inspect_container(ctr2)["State"]["ExitCode"]
c.remove_container(ctr2)
c.remove_container(ctr)
print(json.dumps(out))
"""


def test_sdk7_containers(cdaemon: Daemon) -> None:
    out = json.loads(run_sdk("sdk7", SDK7, cdaemon.url))
    assert out["wait"] == {"StatusCode": 4}
    # two pipes read concurrently: lines of different streams may swap (as with dockerd)
    assert sorted(out["logs"].splitlines()) == ["hi", "there"] and out["stdout"] == "hi\n"
    assert out["inspect"]["HostConfig"]["Memory"] == 32 << 20
    assert out["inspect"]["Name"] == "/sdk7"
    assert [x["Names"] for x in out["list"]] == [["/sdk7"]]
    assert any("sleep 60" in " ".join(p) for p in out["top"]["Processes"])
    assert out["put"] is True and out["got"] == "sdk"
    assert out["stat"]["name"] == "put.txt" and out["stat"]["size"] == 3
    assert out["update"] == {"Warnings": []}
    assert {"Path": "/tmp/put.txt", "Kind": 1} in out["diff"]
    assert out["stopped"] == 137


DOCKERPY1 = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
ctr = c.create_container("busybox", ["sh", "-c", "echo old-sdk"], name="dpy1")
c.start(ctr)
out = {"wait": c.wait(ctr), "logs": c.logs(ctr).decode(),
       "inspect": c.inspect_container(ctr)["State"]["Status"],
       "ps": [x["Names"] for x in c.containers(all=True)]}
c.rename(ctr, "dpy2")
out["renamed"] = c.inspect_container("dpy2")["Name"]
c.remove_container(ctr)
print(json.dumps(out))
"""


def test_dockerpy1_containers(cdaemon: Daemon) -> None:
    out = json.loads(run_sdk("dockerpy1", DOCKERPY1, cdaemon.url))
    assert out["wait"] == 0 and out["logs"] == "old-sdk\n"
    assert out["inspect"] == "exited" and out["ps"] == [["/dpy1"]]
    assert out["renamed"] == "/dpy2"
