"""Builds by the real clients: the docker CLI 28 with the legacy builder
(``DOCKER_BUILDKIT=0``: -t, -f, --build-arg, --no-cache, --label, -q, --iidfile, a
.dockerignore), docker SDK 7.0.0 and docker-py 1.10.6 ``build()`` (path, fileobj, gzip,
custom instructions file, buildargs, labels (SDK 7 only: docker-py 1.10 has none), shmsize)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import trio

from tests.builds.conftest import BASE
from tests.conftest import docker_cli, run_sdk
from tests.support.daemon import Daemon

LEGACY = {"DOCKER_BUILDKIT": "0"}


def _context(tmp: Path) -> Path:
    (tmp / "Dockerfile").write_text(f"FROM {BASE}\nARG WHO\nRUN echo hello $WHO; echo oops >&2"
                                    "\nCOPY . /ctx/\n")
    (tmp / "Other").write_text(f"FROM {BASE}\nLABEL other=1\n")
    (tmp / "data.txt").write_text("data\n")
    (tmp / "junk.log").write_text("junk\n")
    (tmp / ".dockerignore").write_text("*.log\n")
    return tmp


async def test_docker_cli_builds(api: httpx.AsyncClient, bdaemon: Daemon,
                                 tmp_path: Path) -> None:
    (tmp_path / "ctx").mkdir()
    ctx = _context(tmp_path / "ctx")
    iid = tmp_path / "iid"

    def cli(*args: str) -> tuple[int, str, str]:
        p = docker_cli(bdaemon.url, *args, timeout=120, extra_env=LEGACY)
        return p.returncode, p.stdout, p.stderr

    code, out, err = await trio.to_thread.run_sync(
        cli, "build", "-t", "cli:1", "-t", "cli:2", "--build-arg", "WHO=cli", "--label",
        "made.by=cli", "--iidfile", str(iid), str(ctx))
    assert code == 0, err
    assert "Step 3 : RUN echo hello $WHO; echo oops >&2" in out and "hello cli" in out
    assert "\x1b[91moops\n\x1b[0m" in out
    assert out.rstrip().endswith("Successfully tagged cli:1\nSuccessfully tagged cli:2")
    image_id = iid.read_text().strip()
    assert out.count(f"Successfully built {image_id[7:19]}") == 1
    inspect = (await api.get("/images/cli:2/json")).json()
    assert inspect["Id"] == image_id and inspect["Config"]["Labels"] == {"made.by": "cli"}
    listing = await _files(api, "cli:1")
    assert "data.txt" in listing and "junk.log" not in listing

    code, out, err = await trio.to_thread.run_sync(
        cli, "build", "--build-arg", "WHO=cli", "--label", "made.by=cli", str(ctx))
    assert code == 0 and out.count(" ---> Using cache") == 4, out
    code, quiet, err = await trio.to_thread.run_sync(
        cli, "build", "-q", "--build-arg", "WHO=cli", "--label", "made.by=cli", str(ctx))
    assert code == 0 and quiet.strip() == image_id, (quiet, err)
    code, out, err = await trio.to_thread.run_sync(
        cli, "build", "--no-cache", "--build-arg", "WHO=cli", str(ctx))
    assert code == 0 and "Using cache" not in out
    code, out, err = await trio.to_thread.run_sync(cli, "build", "-f", str(ctx / "Other"),
                                                   "-t", "cli:other", str(ctx))
    assert code == 0, err
    labels = (await api.get("/images/cli:other/json")).json()["Config"]["Labels"]
    assert labels == {"other": "1"}
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nRUN exit 7\n")
    code, out, err = await trio.to_thread.run_sync(cli, "build", str(ctx))
    assert code != 0
    assert "The command '/bin/sh -c exit 7' returned a non-zero code: 7" in err


async def _files(api: httpx.AsyncClient, image: str) -> str:
    r = await api.post("/containers/create", json={"Image": image, "Cmd": ["ls", "/ctx"]})
    cid = r.json()["Id"]
    await api.post(f"/containers/{cid}/start")
    await api.post(f"/containers/{cid}/wait")
    data = (await api.get(f"/containers/{cid}/logs", params={"stdout": "1"})).content
    out = bytearray()
    while len(data) >= 8:  # stdcopy frames
        size = int.from_bytes(data[4:8], "big")
        out += data[8:8 + size]
        data = data[8 + size:]
    return out.decode()


SDK7 = """
import io, json, sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
out = {}
image, logs = c.images.build(path=sys.argv[2], tag="sdk7:path", buildargs={"WHO": "sdk7"},
                             labels={"by": "sdk7"}, shmsize=64 << 20)
out["path"] = {"id": image.id, "tags": image.tags, "labels": image.labels,
               "logs": list(logs)}
df = io.BytesIO(b"FROM busybox:latest\\nRUN echo from fileobj\\n")
image, logs = c.images.build(fileobj=df, tag="sdk7:fileobj")
out["fileobj"] = {"id": image.id, "logs": list(logs)}
image, logs = c.images.build(path=sys.argv[2], dockerfile="Other", tag="sdk7:other",
                             gzip=True)
out["gzip"] = {"labels": image.labels, "logs": list(logs)}
try:
    c.images.build(fileobj=io.BytesIO(b"FROM busybox:latest\\nRUN exit 4\\n"))
except docker.errors.BuildError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""

DOCKERPY1 = """
import io, json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
out = {}
out["path"] = list(c.build(path=sys.argv[2], tag="dpy:path", buildargs={"WHO": "dpy"},
                           decode=True, rm=True))
out["fileobj"] = list(c.build(fileobj=io.BytesIO(b"FROM busybox:latest\\nRUN echo fo\\n"),
                              decode=True))
out["custom"] = list(c.build(path=sys.argv[2], dockerfile="Other", decode=True))
out["fail"] = list(c.build(fileobj=io.BytesIO(b"FROM busybox:latest\\nRUN exit 5\\n"),
                           decode=True))
print(json.dumps(out))
"""


def _text(logs: list[dict[str, object]]) -> str:
    return "".join(str(m.get("stream", "")) for m in logs)


async def test_sdk_builds(api: httpx.AsyncClient, bdaemon: Daemon, tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    out7 = json.loads(await trio.to_thread.run_sync(
        lambda: run_sdk("sdk7", SDK7, bdaemon.url, str(ctx), timeout=180)))
    path = out7["path"]
    assert path["tags"] == ["sdk7:path"] and path["labels"] == {"by": "sdk7"}
    assert "hello sdk7" in _text(path["logs"])
    assert {"stream": "\x1b[91moops\n\x1b[0m"} in path["logs"]
    assert "from fileobj" in _text(out7["fileobj"]["logs"])
    assert out7["gzip"]["labels"] == {"other": "1"}
    assert "returned a non-zero code: 4" in out7["error"]

    out1 = json.loads(await trio.to_thread.run_sync(
        lambda: run_sdk("dockerpy1", DOCKERPY1, bdaemon.url, str(ctx), timeout=180)))
    assert "hello dpy" in _text(out1["path"])
    assert _text(out1["path"]).endswith("Successfully tagged dpy:path\n")
    assert (await api.get("/images/dpy:path/json")).status_code == 200
    assert "fo\n" in _text(out1["fileobj"]) and "Successfully built" in _text(out1["custom"])
    assert out1["fail"][-1]["errorDetail"]["code"] == 5


async def test_docker_cli_ignore_names_the_instructions(api: httpx.AsyncClient,
                                                        bdaemon: Daemon,
                                                        tmp_path: Path) -> None:
    """The CLI sends the Dockerfile and .dockerignore even when .dockerignore names them;
    the daemon reads the Dockerfile, then keeps both out of COPY. A -f file outside the
    context works too (the CLI adds it under a name of its own)."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nCOPY . /ctx/\n")
    (ctx / ".dockerignore").write_text("Dockerfile\n.dockerignore\n")
    (ctx / "kept").write_text("k\n")
    (tmp_path / "Outside").write_text(f"FROM {BASE}\nLABEL outside=1\nCOPY kept /\n")

    def cli(*args: str) -> tuple[int, str, str]:
        p = docker_cli(bdaemon.url, *args, timeout=120, extra_env=LEGACY)
        return p.returncode, p.stdout, p.stderr

    code, out, err = await trio.to_thread.run_sync(cli, "build", "-t", "cli:ignored", str(ctx))
    assert code == 0, err
    assert (await _files(api, "cli:ignored")).split() == ["kept"]
    code, out, err = await trio.to_thread.run_sync(
        cli, "build", "-t", "cli:outside", "-f", str(tmp_path / "Outside"), str(ctx))
    assert code == 0, err
    labels = (await api.get("/images/cli:outside/json")).json()["Config"]["Labels"]
    assert labels == {"outside": "1"}


async def test_docker_cli_resource_and_cleanup_flags(api: httpx.AsyncClient, bdaemon: Daemon,
                                                     tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nRUN cat /sys/fs/cgroup/cpu/cpu.shares"
                                         "\n")

    def cli(*args: str) -> tuple[int, str, str]:
        p = docker_cli(bdaemon.url, *args, timeout=120, extra_env=LEGACY)
        return p.returncode, p.stdout, p.stderr

    before = {c["Id"] for c in (await api.get("/containers/json?all=1")).json()}
    code, out, err = await trio.to_thread.run_sync(
        cli, "build", "--rm=false", "--memory", "64m", "--cpu-shares", "512",
        "--shm-size", "32m", "--cpuset-cpus", "0", "--no-cache", str(tmp_path))
    assert code == 0, err
    assert "512\n" in out
    kept = {c["Id"] for c in (await api.get("/containers/json?all=1")).json()} - before
    assert len(kept) == 1  # --rm=false keeps the RUN step's container
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nRUN exit 2\n")
    code, out, err = await trio.to_thread.run_sync(cli, "build", "--force-rm", str(tmp_path))
    assert code != 0 and "non-zero code: 2" in err
    after = {c["Id"] for c in (await api.get("/containers/json?all=1")).json()} - before
    assert after == kept  # --force-rm removed the failed step's container
