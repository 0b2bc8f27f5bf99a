"""changes, export, archive HEAD/GET/PUT, copy and commit; hostile layouts stay inside."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import time
from pathlib import Path

import httpx
import pytest
import trio

from tests.containers.conftest import create, inspect, output, run


def tar_of(files: dict[str, bytes | None], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            else:
                info.size, info.mode = len(data), 0o640
                t.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            t.addfile(info)
    return buf.getvalue()


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: m for m in t.getmembers()}


def read_member(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        f = t.extractfile(name)
        assert f is not None
        return f.read()


async def test_changes(api: httpx.AsyncClient) -> None:
    cid, code = await run(api, ["sh", "-c", "mkdir /newdir && echo x > /newdir/f && "
                                            "rm /bin/ls && echo y >> /etc/passwd"])
    assert code == 0
    r = await api.get(f"/containers/{cid}/changes")
    assert r.status_code == 200
    got = {(c["Path"], c["Kind"]) for c in r.json()}
    assert got == {("/newdir", 1), ("/newdir/f", 1), ("/bin", 0), ("/bin/ls", 2),
                   ("/etc", 0), ("/etc/passwd", 0)}
    assert (await api.get("/containers/nope/changes")).status_code == 404


async def test_export(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "echo exported > /mark"])
    r = await api.get(f"/containers/{cid}/export")
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    names = members(r.content)
    assert "mark" in names and "bin/busybox" in names and "etc/passwd" in names
    assert read_member(r.content, "mark") == b"exported\n"
    assert (await inspect(api, cid))["State"]["Status"] == "exited"


async def test_archive_head_get_and_errors(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "mkdir -p /d/sub && echo one > /d/a && "
                                         "echo two > /d/sub/b && ln -s /d/a /link"])
    r = await api.head(f"/containers/{cid}/archive", params={"path": "/d/a"})
    assert r.status_code == 200
    info = json.loads(base64.b64decode(r.headers["X-Docker-Container-Path-Stat"]))
    assert r.headers["X-Svc-Container-Path-Stat"] == r.headers["X-Docker-Container-Path-Stat"]
    assert (info["name"], info["size"], info["mode"] & 0o777) == ("a", 4, 0o644)
    assert info["linkTarget"] == "" and info["mtime"].endswith("Z")
    r = await api.head(f"/containers/{cid}/archive", params={"path": "/d"})
    mode = json.loads(base64.b64decode(r.headers["X-Svc-Container-Path-Stat"]))["mode"]
    assert mode & (1 << 31)  # Go's ModeDir
    r = await api.head(f"/containers/{cid}/archive", params={"path": "/link"})
    info = json.loads(base64.b64decode(r.headers["X-Svc-Container-Path-Stat"]))
    assert info["linkTarget"] == "/d/a" and info["mode"] & (1 << 27)
    # GET a directory, a file, a directory's contents
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/d"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-tar"
    assert set(members(r.content)) == {"d", "d/a", "d/sub", "d/sub/b"}
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/d/sub/b"})
    assert read_member(r.content, "b") == b"two\n"
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/d/."})
    assert set(members(r.content)) == {"a", "sub", "sub/b"}
    # errors: JSON bodies
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/nope"})
    assert r.status_code == 404 and "message" in r.json()
    r = await api.get(f"/containers/{cid}/archive", params={"path": ""})
    assert r.status_code == 400 and r.json()["message"] == "Path cannot be empty"
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/d/a/"})
    assert r.status_code == 400 and "not a directory" in r.json()["message"]
    r = await api.get("/containers/nope/archive", params={"path": "/"})
    assert r.status_code == 404 and "No such container" in r.json()["message"]


async def test_hostile_symlinks_stay_inside(api: httpx.AsyncClient, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host only\n")
    script = (f"ln -s / /rootlink && ln -s ../../../../../../{str(secret)[1:]} /up && "
              f"ln -s {secret} /abs && mkdir -p {tmp_path} && "
              f"echo container > {secret}")
    cid, code = await run(api, ["sh", "-c", script])
    assert code == 0
    for path in ("/up", "/abs", f"/rootlink{secret}", str(secret)):
        r = await api.get(f"/containers/{cid}/archive", params={"path": path})
        if r.status_code == 200:
            data = r.content
            for m in members(data).values():
                if m.isfile():
                    assert read_member(data, m.name) != b"host only\n"
    r = await api.get(f"/containers/{cid}/archive", params={"path": f"/rootlink{secret}"})
    assert read_member(r.content, "host-secret") == b"container\n"
    # PUT through a symlink to a host path writes inside the container
    r = await api.put(f"/containers/{cid}/archive", params={"path": f"/rootlink{tmp_path}"},
                      content=tar_of({"dropped": b"x"}))
    assert r.status_code == 200, r.text
    assert not (tmp_path / "dropped").exists()
    r = await api.get(f"/containers/{cid}/archive", params={"path": f"{tmp_path}/dropped"})
    assert r.status_code == 200
    # entries climbing out of the target are refused
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/tmp"},
                      content=tar_of({"../../../../etc/evil": b"x"}))
    assert r.status_code == 400 and "outside" in r.json()["message"]
    r = await api.head(f"/containers/{cid}/archive", params={"path": "/etc/evil"})
    assert r.status_code == 404


async def test_put_rules(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "mkdir /dst && echo f > /file && mkdir /dst/sub"])
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/dst"},
                      content=tar_of({"new": b"hello", "newdir": None}))
    assert r.status_code == 200, r.text
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/dst/new"})
    assert read_member(r.content, "new") == b"hello"
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/file"},
                      content=tar_of({"x": b""}))
    assert r.status_code == 400 and "not a directory" in r.json()["message"]
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/missing"},
                      content=tar_of({"x": b""}))
    assert r.status_code == 404
    r = await api.put(f"/containers/{cid}/archive",
                      params={"path": "/dst", "noOverwriteDirNonDir": "true"},
                      content=tar_of({"sub": b"file now"}))
    assert r.status_code == 400 and "cannot overwrite directory" in r.json()["message"]
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/dst"},
                      content=b"not a tar at all" * 100)
    assert r.status_code == 400
    ro = (await create(api, ["true"], HostConfig={"ReadonlyRootfs": True}))["Id"]
    r = await api.put(f"/containers/{ro}/archive", params={"path": "/tmp"},
                      content=tar_of({"x": b""}))
    assert r.status_code == 403 and "read-only" in r.json()["message"]


async def test_put_into_a_running_container(api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sh", "-c", "while [ ! -f /tmp/go ]; do sleep 0.05; done; "
                                          "cat /tmp/go"]))["Id"]
    await api.post(f"/containers/{cid}/start")
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/tmp"},
                      content=tar_of({"go": b"delivered\n"}))
    assert r.status_code == 200, r.text
    with trio.fail_after(10):
        assert (await api.post(f"/containers/{cid}/wait")).json() == {"StatusCode": 0}
    assert await output(api, cid) == "delivered\n"


async def test_deprecated_copy(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "echo c > /copied"])
    r = await api.post(f"/containers/{cid}/copy", json={"Resource": "/copied"})
    assert r.status_code == 200 and read_member(r.content, "copied") == b"c\n"
    r = await api.post(f"/containers/{cid}/copy", json={"Resource": "/nope"})
    assert r.status_code == 404


async def test_commit(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "echo committed > /hello"])
    since = str(time.time() - 1)
    r = await api.post("/commit", params={"container": cid, "repo": "snap", "tag": "v1",
                                          "comment": "a note", "author": "me",
                                          "changes": 'CMD ["cat", "/hello"]'})
    assert r.status_code == 201, r.text
    image_id = r.json()["Id"]
    img = (await api.get("/images/snap:v1/json")).json()
    assert img["Id"] == image_id and img["Comment"] == "a note" and img["Author"] == "me"
    assert img["Container"] == cid and img["Config"]["Cmd"] == ["cat", "/hello"]
    base = (await api.get("/images/busybox/json")).json()
    assert img["Parent"] == base["Id"]
    assert img["RootFS"]["Layers"][:-1] == base["RootFS"]["Layers"]
    history = (await api.get("/images/snap:v1/history")).json()
    assert history[0]["Comment"] == "a note" and "echo committed" in history[0]["CreatedBy"]
    new, code = await run(api, [], Image="snap:v1")
    assert code == 0 and await output(api, new) == "committed\n"
    evs = (await api.get("/events", params={"since": since, "until": str(time.time() + 1),
                                            "filters": json.dumps({"event": ["commit"]})}))
    assert [json.loads(x)["id"] for x in evs.text.splitlines()] == [cid]
    r = await api.delete("/images/snap:v1")
    assert r.status_code == 409  # a container uses it
    await api.delete(f"/containers/{new}")
    assert (await api.delete("/images/snap:v1")).status_code == 200


@pytest.mark.parametrize("params", [{"container": "nope"}, {}])
async def test_commit_errors(api: httpx.AsyncClient, params: dict[str, str]) -> None:
    r = await api.post("/commit", params=params)
    assert r.status_code == (404 if params else 400)


@pytest.mark.parametrize("running", [True, False], ids=["running", "stopped"])
async def test_archive_sees_volumes_and_binds(api: httpx.AsyncClient, tmp_path: Path,
                                              running: bool) -> None:
    """A path inside a volume or a bind mount is the mount's, for HEAD, GET, PUT and copy,
    whether the container runs or not (as dockerd mounts them for docker cp)."""
    host_dir = tmp_path / "bound"
    host_dir.mkdir()
    (host_dir / "from-host").write_text("host side\n")
    cmd = ["sh", "-c", "echo in-volume > /vol1/v; sleep 300" if running
           else "echo in-volume > /vol1/v"]
    cid = (await create(api, cmd, Volumes={"/vol1": {}},
                        HostConfig={"Binds": [f"{host_dir}:/bound", f"{host_dir}:/robound:ro"]}
                        ))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    if not running:
        assert (await api.post(f"/containers/{cid}/wait")).json()["StatusCode"] == 0
    else:
        with trio.fail_after(10):
            while (await api.head(f"/containers/{cid}/archive",
                                  params={"path": "/vol1/v"})).status_code != 200:
                await trio.sleep(0.05)
    r = await api.head(f"/containers/{cid}/archive", params={"path": "/vol1/v"})
    assert r.status_code == 200, r.text
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/vol1/v"})
    assert r.status_code == 200 and read_member(r.content, "v") == b"in-volume\n"
    r = await api.get(f"/containers/{cid}/archive", params={"path": "/bound/from-host"})
    assert r.status_code == 200 and read_member(r.content, "from-host") == b"host side\n"
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/bound"},
                      content=tar_of({"put-in": b"via the api\n"}))
    assert r.status_code == 200, r.text
    assert (host_dir / "put-in").read_text() == "via the api\n"
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/robound"},
                      content=tar_of({"nope": b"x"}))
    assert r.status_code == 403, r.text
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/vol1"},
                      content=tar_of({"added": b"to the volume\n"}))
    assert r.status_code == 200, r.text
    vol = next(m for m in (await inspect(api, cid))["Mounts"] if m["Destination"] == "/vol1")
    assert Path(vol["Source"], "added").read_text() == "to the volume\n"
    r = await api.post(f"/containers/{cid}/copy", json={"Resource": "/vol1/v"})
    assert r.status_code == 200 and read_member(r.content, "v") == b"in-volume\n"
    # export is the container's own filesystem: no volume content in it
    if not running:
        assert "vol1/v" not in members((await api.get(f"/containers/{cid}/export")).content)


async def test_a_missing_path_names_the_container_as_the_client_did(
        api: httpx.AsyncClient) -> None:
    """dockerd's text: ``Could not find the file <path> in container <name as given>``, on
    every verb that reads or writes a path (the CLI and docker-py show it)."""
    cid = (await create(api, ["true"], name="pathless"))["Id"]
    for ref in ("pathless", cid[:12]):
        want = f"Could not find the file /nope in container {ref}"
        r = await api.get(f"/containers/{ref}/archive", params={"path": "/nope"})
        assert r.status_code == 404 and r.json()["message"] == want, r.text
        r = await api.head(f"/containers/{ref}/archive", params={"path": "/nope"})
        assert r.status_code == 404
        r = await api.put(f"/containers/{ref}/archive", params={"path": "/nope"},
                          content=tar_of({"f": b"x"}))
        assert r.status_code == 404 and r.json()["message"] == want, r.text
        r = await api.post(f"/containers/{ref}/copy", json={"Resource": "/nope"})
        assert r.status_code == 404 and want in r.text, r.text


async def test_concurrent_reads_of_a_stopped_container(api: httpx.AsyncClient) -> None:
    """Ten archive reads at once mount the stopped container's overlay once (a second mount
    of one upper dir fails with EBUSY: it was a 500) and the last one unmounts it."""
    cid, _ = await run(api, ["true"])
    statuses: list[int] = []

    async def one() -> None:
        r = await api.head(f"/containers/{cid}/archive", params={"path": "/etc"})
        statuses.append(r.status_code)

    for _ in range(3):
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(one)
    assert statuses == [200] * 30
    rootfs = Path((await inspect(api, cid))["GraphDriver"]["Data"]["MergedDir"])
    assert not os.path.ismount(rootfs)
