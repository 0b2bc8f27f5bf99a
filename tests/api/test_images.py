"""Image endpoints over the socket: import, load, save, list, inspect, history, tag, remove,
name resolution, events, and the store left unchanged by bad archives."""

from __future__ import annotations

import http.server
import io
import json
import os
import socketserver
import stat
import tarfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.conftest import http_client
from tests.support import images as timg
from tests.support.daemon import Daemon
from tests.support.http import connect


@pytest.fixture
async def api(spawn) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:  # type: ignore[no-untyped-def]
    """A fresh daemon per test: image tests change the store."""
    d = spawn()
    async with http_client(d.sock) as c:
        yield d, c


def lines(resp: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(x) for x in resp.text.splitlines() if x.strip()]


async def import_tar(c: httpx.AsyncClient, data: bytes, **params: str) -> httpx.Response:
    return await c.post("/images/create", params={"fromSrc": "-", **params}, content=data,
                        headers={"Content-Type": "application/x-tar"})


async def load(c: httpx.AsyncClient, data: bytes) -> httpx.Response:
    return await c.post("/images/load", content=data,
                        headers={"Content-Type": "application/x-tar"})


def store_state(d: Daemon) -> tuple[list[str], list[str], str]:
    """What the store holds on disk: layer dirs, configs, names."""
    layers = sorted(os.listdir(d.root / "overlay2")) if (d.root / "overlay2").exists() else []
    configs = sorted(os.listdir(d.root / "image" / "sha256"))
    refs = (d.root / "repositories.json").read_text() if (
        d.root / "repositories.json").exists() else ""
    return [x for x in layers if x != "l"], configs, refs


async def test_import_busybox_from_body(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    r = await import_tar(c, timg.busybox_rootfs_tar(), repo="busybox", tag="latest")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    msgs = lines(r)
    image_id = msgs[-1]["status"]
    assert image_id.startswith("sha256:") and len(image_id) == 71
    inspect = (await c.get("/images/busybox/json")).json()
    assert inspect["Id"] == image_id
    assert inspect["RepoTags"] == ["busybox:latest"]
    assert inspect["RootFS"]["Type"] == "layers" and len(inspect["RootFS"]["Layers"]) == 1
    assert inspect["RootFS"]["Layers"][0] == timg.diff_id(timg.busybox_rootfs_tar())
    assert inspect["Os"] == "linux" and inspect["Size"] > 1_000_000
    assert inspect["Config"]["Cmd"] is None and "Hostname" in inspect["Config"]
    assert inspect["Comment"] == "Imported from -"
    # the layer is really on disk, busybox and its applets
    upper = Path(inspect["GraphDriver"]["Data"]["UpperDir"])
    assert (upper / "bin" / "busybox").stat().st_size > 500_000
    assert os.path.samefile(upper / "bin" / "sh", upper / "bin" / "busybox")
    listed = (await c.get("/images/json")).json()
    assert [i["Id"] for i in listed] == [image_id]
    assert listed[0]["RepoTags"] == ["busybox:latest"] and listed[0]["Size"] == inspect["Size"]


async def test_import_with_changes_and_message(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    r = await c.post("/images/create", params=[
        ("fromSrc", "-"), ("repo", "127.0.0.1:5000/team/app"), ("tag", "v1"),
        ("message", "hello"), ("changes", 'CMD ["sh", "-c", "echo hi"]'),
        ("changes", "ENV A=1 B=two"), ("changes", "LABEL com.example=yes"),
        ("changes", "EXPOSE 80 53/udp"), ("changes", "WORKDIR /srv"), ("changes", "USER nobody"),
        ("changes", "VOLUME /data"), ("changes", "ENTRYPOINT /bin/sh")],
        content=timg.busybox_rootfs_tar())
    assert "error" not in r.text
    cfg = (await c.get("/images/127.0.0.1:5000/team/app:v1/json")).json()
    assert cfg["Comment"] == "hello"
    conf = cfg["Config"]
    assert conf["Cmd"] == ["sh", "-c", "echo hi"]
    assert conf["Entrypoint"] == ["/bin/sh", "-c", "/bin/sh"]
    assert conf["Env"] == ["A=1", "B=two"] and conf["Labels"] == {"com.example": "yes"}
    assert conf["ExposedPorts"] == {"80/tcp": {}, "53/udp": {}}
    assert conf["WorkingDir"] == "/srv" and conf["User"] == "nobody"
    assert conf["Volumes"] == {"/data": {}}
    listed = (await c.get("/images/json", params={"filters": json.dumps(
        {"label": ["com.example=yes"]})})).json()
    assert listed[0]["Labels"] == {"com.example": "yes"}
    assert "Labels" not in (await c.get("/v1.16/images/json")).json()[0]


@pytest.mark.parametrize("params,msg", [
    ({"changes": "RUN rm -rf /"}, "RUN is not a valid change command"),
    ({"repo": "busybox:1", "tag": "2"}, "repo:tag form and the tag parameter"),
    ({"repo": "UPPER"}, "invalid reference format"),
    ({"repo": "ok", "tag": "bad tag!"}, "tag"),
])
async def test_import_bad_parameters(api, params: dict[str, str], msg: str) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    r = await import_tar(c, timg.busybox_rootfs_tar(), **params)
    assert r.status_code == 400 and msg in r.text


@pytest.mark.parametrize("url", ["http://[::1", "http://x:99999/a", "http:///nohost"])
async def test_import_from_a_malformed_url_is_a_400(api, url: str) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    r = await c.post("/images/create", params={"fromSrc": url, "repo": "x"})
    assert r.status_code == 400 and "fromSrc" in r.text and "Trio" not in r.text


async def test_import_garbage_is_400_and_changes_nothing(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    before = store_state(d)
    for data in (b"", os.urandom(4096), b"\x1f\x8b" + os.urandom(1000)):
        r = await import_tar(c, data, repo="x")
        assert r.status_code == 400, r.text
        assert r.text.startswith("invalid import archive")
    assert store_state(d) == before
    assert (await c.get("/images/json")).json() == []


async def test_import_malicious_archives_fail_and_change_nothing(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    before = store_state(d)
    for name, data in timg.malicious_tars().items():
        r = await import_tar(c, data, repo="evil")
        if r.status_code == 200:  # detected after the stream started: an error object
            last = lines(r)[-1]
            assert "error" in last and last["errorDetail"]["message"] == last["error"], name
        else:
            assert r.status_code == 400, (name, r.text)
        assert store_state(d) == before, name
    assert not list((d.root / "overlay2").glob("tmp-*"))
    assert (await c.get("/images/json")).json() == []


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "rootfs.tar").write_bytes(timg.busybox_rootfs_tar())
    handler = type("H", (http.server.SimpleHTTPRequestHandler,), {
        "__init__": lambda self, *a, **k: http.server.SimpleHTTPRequestHandler.__init__(
            self, *a, directory=str(tmp_path), **k),
        "log_message": lambda *a: None})
    srv = socketserver.TCPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


async def test_import_from_url(api, http_server: str) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    r = await c.post("/images/create", params={"fromSrc": f"{http_server}/rootfs.tar",
                                               "repo": "fromurl"})
    msgs = lines(r)
    progress = [m for m in msgs if m.get("status") == "Importing"]
    assert progress and progress[-1]["progressDetail"]["total"] == len(timg.busybox_rootfs_tar())
    image_id = msgs[-1]["status"]
    assert (await c.get("/images/fromurl:latest/json")).json()["Id"] == image_id
    missing = await c.post("/images/create", params={"fromSrc": f"{http_server}/nope.tar"})
    assert "404" in lines(missing)[-1]["error"]
    bad = await c.post("/images/create", params={"fromSrc": "ftp://x/y"})
    assert bad.status_code == 400


async def test_pull_references_are_checked_first(api) -> None:  # type: ignore[no-untyped-def]
    """Malformed pulls are refused before any registry is asked (tests/registry pulls)."""
    _, c = api
    r = await c.post("/images/create", params={"fromImage": "Busybox"})
    assert r.status_code == 400 and "lowercase" in r.text
    r = await c.post("/images/create", params={"fromImage": "busybox:1", "tag": "2"})
    assert r.status_code == 400 and "tag parameter" in r.text
    r = await c.post("/images/create", params={"fromImage": "busybox",
                                               "tag": "sha256:" + "a" * 40})
    assert r.status_code == 400 and "digest length" in r.text


async def test_load_manifest_layout_and_names(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    base = timg.layer_tar([timg.file("etc/base", b"base\n")])
    top = timg.layer_tar([timg.file("etc/top", b"top\n", mode=0o600, uid=7, gid=8)])
    a = timg.SaveImage([base, top], repo_tags=["app:1", "127.0.0.1:5000/ns/app:2"])
    b = timg.SaveImage([base], repo_tags=["base"], gzip_layers=True)
    r = await load(c, timg.docker_save_tar([a, b]))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    streams = [m["stream"] for m in lines(r)]
    assert "Loaded image: app:1\n" in streams and "Loaded image: base:latest\n" in streams
    ia = (await c.get("/images/app:1/json")).json()
    assert ia["Id"] == a.image_id()
    assert sorted(ia["RepoTags"]) == ["127.0.0.1:5000/ns/app:2", "app:1"]
    assert (await c.get("/images/base/json")).json()["Id"] == b.image_id()
    # name resolution: every form
    short = a.image_id()[7:19]
    for name in ("app:1", "docker.io/library/app:1", "127.0.0.1:5000/ns/app:2", a.image_id(),
                 a.image_id()[7:], short, "sha256:" + short):
        r = await c.get(f"/images/{name}/json")
        assert r.status_code == 200 and r.json()["Id"] == a.image_id(), name
    assert (await c.get("/images/app:9/json")).text == "No such image: app:9\n"
    assert (await c.get("/images/nope/json")).status_code == 404
    assert (await c.get("/images/BAD/json")).status_code == 400
    # layers shared, stored once
    chain = timg.chain_ids(a.diff_ids())
    assert (d.root / "overlay2" / chain[0].removeprefix("sha256:")).is_dir()
    top_dir = Path(ia["GraphDriver"]["Data"]["UpperDir"])
    st = (top_dir / "etc" / "top").stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (7, 8, 0o600)


async def test_load_legacy_layout_with_intermediates(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    layers = [timg.layer_tar([timg.file(f"l{i}", str(i).encode())]) for i in range(3)]
    img = timg.SaveImage(layers, repo_tags=["legacy:old"])
    r = await load(c, timg.docker_save_tar([img], layout="legacy"))
    assert r.status_code == 200, r.text
    top = (await c.get("/images/legacy:old/json")).json()
    assert top["RootFS"]["Layers"] == img.diff_ids()
    assert top["Parent"].startswith("sha256:")
    shown = (await c.get("/images/json")).json()
    assert [i["RepoTags"] for i in shown] == [["legacy:old"]]
    everything = (await c.get("/images/json", params={"all": "1"})).json()
    assert len(everything) == 3
    assert sum(i["RepoTags"] == ["<none>:<none>"] for i in everything) == 2
    hist = (await c.get("/images/legacy:old/history")).json()
    assert [h["Id"] for h in hist] == [top["Id"], top["Parent"], everything[-1]["Id"]] or \
        hist[0]["Id"] == top["Id"]
    assert hist[0]["Tags"] == ["legacy:old"]
    assert all(h["Size"] > 0 for h in hist)
    # deleting the top prunes the untagged parents
    report = (await c.delete("/images/legacy:old")).json()
    assert report[0] == {"Untagged": "legacy:old"}
    assert sum("Deleted" in e and e["Deleted"] in {i["Id"] for i in everything}
               for e in report) == 3
    assert (await c.get("/images/json", params={"all": "1"})).json() == []


async def test_load_bad_archives_are_stream_errors_and_change_nothing(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    good = timg.SaveImage([timg.layer_tar([timg.file("a", b"a")])], repo_tags=["keep"])
    assert (await load(c, timg.docker_save_tar([good]))).status_code == 200
    before = store_state(d)
    bad_config = timg.SaveImage([timg.layer_tar([timg.file("b", b"b")])], repo_tags=["bad"])
    arc = timg.docker_save_tar([bad_config])
    # a manifest whose config lies about the layer digest
    lying = _rewrite(arc, lambda name, data: data.replace(
        bad_config.diff_ids()[0].encode(), b"sha256:" + b"0" * 64) if name.endswith(".json")
        and not name.endswith("/json") and name != "manifest.json" else data)
    cases = {"garbage": os.urandom(3000), "empty": b"", "lying": lying,
             "truncated": arc[: len(arc) // 2]}
    for name, data in timg.malicious_tars().items():
        cases["malicious-" + name] = timg.docker_save_tar(
            [timg.SaveImage([data], repo_tags=["evil"])]) if name not in (
            "truncated", "garbage", "corrupt_gzip") else data
    for name, data in cases.items():
        r = await load(c, data)  # as dockerd: 200, and the error in the JSON stream
        assert r.status_code == 200, (name, r.status_code, r.text)
        doc = json.loads(r.text.strip().splitlines()[-1])
        assert doc["error"] and doc["errorDetail"]["message"] == doc["error"], name
        assert store_state(d) == before, name
    assert [i["RepoTags"] for i in (await c.get("/images/json")).json()] == [["keep:latest"]]


def _rewrite(arc: bytes, fn) -> bytes:  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(arc)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src:
            if m.isfile():
                data = fn(m.name, src.extractfile(m).read())  # type: ignore[union-attr]
                m.size = len(data)
                dst.addfile(m, io.BytesIO(data))
            else:
                dst.addfile(m)
    return out.getvalue()


def tree_of(path: Path) -> dict[str, tuple[Any, ...]]:
    """Every file under a layer dir with its metadata and content digest."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            xattrs = tuple(sorted((k, os.getxattr(p, k, follow_symlinks=False))
                                  for k in os.listxattr(p, follow_symlinks=False)))
            content = (p.read_bytes() if p.is_file() and not p.is_symlink()
                       else os.readlink(p).encode() if p.is_symlink() else b"")
            # directories' mtimes move as entries are added; whiteouts (0:0 char devices) are
            # made by the daemon, not taken from a file of the image
            whiteout = stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
            mtime = 0 if p.is_dir() or whiteout else st.st_mtime_ns
            out[str(p.relative_to(path))] = (st.st_mode, st.st_uid, st.st_gid, st.st_size,
                                              mtime, st.st_rdev, xattrs, hash(content))
    return out


async def test_save_rmi_load_round_trip(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    layers = timg.whiteout_image_layers()
    img = timg.SaveImage(layers, repo_tags=["wh:1"])
    assert (await load(c, timg.docker_save_tar([img]))).status_code == 200
    await import_tar(c, timg.busybox_rootfs_tar(), repo="busybox")
    before = {n: (await c.get(f"/images/{n}/json")).json() for n in ("wh:1", "busybox")}
    trees = {n: [tree_of(Path(p)) for p in [before[n]["GraphDriver"]["Data"]["UpperDir"],
             *before[n]["GraphDriver"]["Data"].get("LowerDir", "").split(":")] if p]
             for n in before}
    r = await c.get("/images/get", params=[("names", "wh:1"), ("names", "busybox")])
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-tar"
    saved = r.content
    assert int(r.headers["content-length"]) == len(saved)
    assert r.headers["api-version"] == "1.23"
    with tarfile.open(fileobj=io.BytesIO(saved)) as t:
        names = t.getnames()
        manifest = json.loads(t.extractfile("manifest.json").read())  # type: ignore[union-attr]
        repos = json.loads(t.extractfile("repositories").read())  # type: ignore[union-attr]
        for entry in manifest:
            cfg = json.loads(t.extractfile(entry["Config"]).read())  # type: ignore[union-attr]
            for path, want in zip(entry["Layers"], cfg["rootfs"]["diff_ids"], strict=True):
                assert timg.diff_id(t.extractfile(path).read()) == want  # type: ignore[union-attr]
                v1dir = path.rsplit("/", 1)[0]
                assert f"{v1dir}/VERSION" in names and f"{v1dir}/json" in names
    assert sorted(e["RepoTags"][0] for e in manifest) == ["busybox:latest", "wh:1"]
    assert set(repos) == {"wh", "busybox"}
    for n in before:
        rm = await c.delete(f"/images/{n}")
        assert rm.status_code == 200
    assert (await c.get("/images/json", params={"all": "1"})).json() == []
    assert store_state(d)[0] == []
    assert (await load(c, saved)).status_code == 200
    for n, want in before.items():
        got = (await c.get(f"/images/{n}/json")).json()
        assert got["Id"] == want["Id"] and got["RootFS"] == want["RootFS"]
        data = got["GraphDriver"]["Data"]
        got_trees = [tree_of(Path(p)) for p in [data["UpperDir"],
                     *data.get("LowerDir", "").split(":")] if p]
        assert got_trees == trees[n]


async def test_save_by_id_and_unknown(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    img = timg.SaveImage([timg.layer_tar([timg.file("x", b"x")])], repo_tags=["one"])
    await load(c, timg.docker_save_tar([img]))
    r = await c.get(f"/images/{img.image_id()[7:19]}/get")
    with tarfile.open(fileobj=io.BytesIO(r.content)) as t:
        assert "repositories" not in t.getnames()
        assert json.loads(t.extractfile("manifest.json").read())[0]["RepoTags"] is None  # type: ignore[union-attr]
    assert (await c.get("/images/nope/get")).status_code == 404
    assert (await c.get("/images/get", params={"names": "nope"})).status_code == 404
    assert (await c.get("/images/get")).status_code == 400


async def test_tag(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    a = timg.SaveImage([timg.layer_tar([timg.file("a", b"a")])], repo_tags=["a"])
    b = timg.SaveImage([timg.layer_tar([timg.file("b", b"b")])], repo_tags=["b"])
    await load(c, timg.docker_save_tar([a, b]))
    r = await c.post("/images/a/tag", params={"repo": "docker.io/library/x", "tag": "1"})
    assert r.status_code == 201 and r.content == b""
    assert (await c.get("/images/x:1/json")).json()["Id"] == a.image_id()
    # moving a tag: 409 before v1.22 without force, allowed with force and from v1.22 (1.10)
    r = await c.post("/v1.21/images/b/tag", params={"repo": "x", "tag": "1"})
    assert r.status_code == 409 and "x:1 is already set" in r.text
    r = await c.post("/v1.21/images/b/tag", params={"repo": "x", "tag": "1", "force": "1"})
    assert r.status_code == 201
    assert (await c.post("/images/a/tag", params={"repo": "x", "tag": "1"})).status_code == 201
    assert (await c.get("/images/x:1/json")).json()["Id"] == a.image_id()
    assert (await c.post("/images/nope/tag", params={"repo": "y"})).status_code == 404
    for params in ({"repo": "Bad"}, {"repo": "x", "tag": "no spaces"}, {},
                   {"repo": "x:1"}):
        r = await c.post("/images/a/tag", params=params)
        assert r.status_code == 400, (params, r.text)


async def test_remove_rules(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    base = timg.layer_tar([timg.file("base", b"1")])
    a = timg.SaveImage([base], repo_tags=["a:1", "a:2", "other:1"])
    await load(c, timg.docker_save_tar([a]))
    short = a.image_id()[7:19]
    r = await c.delete(f"/images/{short}")
    assert r.status_code == 409
    assert r.text == (f"conflict: unable to delete {short} (must be forced) - image is "
                      "referenced in multiple repositories\n")
    assert (await c.delete("/images/a:1")).json() == [{"Untagged": "a:1"}]
    r = await c.delete(f"/images/{short}", params={"force": "1"})
    report = r.json()
    assert {"Untagged": "a:2"} in report and {"Untagged": "other:1"} in report
    assert {"Deleted": a.image_id()} in report
    assert {"Deleted": a.diff_ids()[0]} in report  # the layer went too
    assert (await c.delete("/images/a:2")).status_code == 404


async def test_remove_blocked_by_children_and_noprune(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    layers = [timg.layer_tar([timg.file(f"f{i}", b"x")]) for i in range(2)]
    img = timg.SaveImage(layers, repo_tags=["chain:top"])
    await load(c, timg.docker_save_tar([img], layout="legacy"))
    top = (await c.get("/images/chain:top/json")).json()
    parent = top["Parent"]
    r = await c.delete(f"/images/{parent}", params={"force": "1"})
    assert r.status_code == 409 and "image has dependent child images" in r.text
    report = (await c.delete("/images/chain:top", params={"noprune": "1"})).json()
    assert {"Deleted": top["Id"]} in report and {"Deleted": parent} not in report
    dangling = (await c.get("/images/json", params={"filters": json.dumps(
        {"dangling": ["true"]})})).json()
    assert [i["Id"] for i in dangling] == [parent]
    assert (await c.get("/images/json", params={"filters": json.dumps(
        {"dangling": ["maybe"]})})).status_code == 400
    assert (await c.get("/images/json", params={"filters": json.dumps(
        {"bogus": ["1"]})})).text == "Invalid filter 'bogus'\n"


async def test_list_filter_param_and_digests(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    imgs = [timg.SaveImage([timg.layer_tar([timg.file(n, n.encode())])], repo_tags=[n])
            for n in ("web", "webapp", "db")]
    await load(c, timg.docker_save_tar(imgs))
    names = lambda r: sorted(t for i in r.json() for t in i["RepoTags"])  # noqa: E731
    assert names(await c.get("/images/json", params={"filter": "web*"})) == [
        "web:latest", "webapp:latest"]
    assert names(await c.get("/images/json", params={"filter": "db"})) == ["db:latest"]
    assert names(await c.get("/images/json", params={"filter": "web:latest"})) == ["web:latest"]
    # an image tagged in two repositories shows only the tags the filter matches (the CLI
    # sends filter= for `docker images REPO` below API 1.25)
    assert (await c.post("/images/db/tag", params={"repo": "other", "tag": "v1"})) \
        .status_code == 201
    assert names(await c.get("/images/json", params={"filter": "db"})) == ["db:latest"]
    assert names(await c.get("/images/json", params={"filter": "other"})) == ["other:v1"]
    assert names(await c.get("/images/json")).count("other:v1") == 1
    listed = (await c.get("/images/json", params={"digests": "1"})).json()
    assert all(i["RepoDigests"] == ["<none>@<none>"] for i in listed)


async def test_deep_image_of_64_layers(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    layers = timg.deep_image_layers(64)
    img = timg.SaveImage(layers, repo_tags=["deep"])
    r = await load(c, timg.docker_save_tar([img]))
    assert r.status_code == 200, r.text
    info = (await c.get("/images/deep/json")).json()
    assert len(info["RootFS"]["Layers"]) == 64
    assert len(info["GraphDriver"]["Data"]["LowerDir"].split(":")) == 63
    assert len((await c.get("/images/deep/history")).json()) == 64


async def test_image_events(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    t0 = time.time()
    r = await import_tar(c, timg.busybox_rootfs_tar(), repo="evt")
    image_id = lines(r)[-1]["status"]
    await c.post("/images/evt/tag", params={"repo": "evt2"})
    await c.delete("/images/evt2")
    await c.delete("/images/evt")
    ev = await c.get("/events", params={"since": f"{t0:.9f}", "until": f"{time.time():.9f}",
                                        "filters": json.dumps({"type": ["image"]})})
    got = [(e["Action"], e["Actor"]["Attributes"].get("name")) for e in lines(ev)]
    assert got == [("tag", "evt:latest"), ("import", "evt:latest"), ("tag", "evt2:latest"),
                   ("untag", "evt2:latest"), ("untag", "evt:latest"), ("delete", image_id)]
    assert all(e["id"] == image_id and e["Actor"]["ID"] == image_id for e in lines(ev))


async def test_images_survive_restart_and_half_written_layers_are_discarded(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    async with http_client(d.sock) as c:
        img = timg.SaveImage([timg.layer_tar([timg.file("keep", b"k")])], repo_tags=["keep"])
        await load(c, timg.docker_save_tar([img]))
    d.kill()
    half = d.root / "overlay2" / "tmp-crashed"
    (half / "diff").mkdir(parents=True)
    (half / "diff" / "partial").write_bytes(b"x" * 100)
    uncommitted = d.root / "overlay2" / ("f" * 64)
    (uncommitted / "diff").mkdir(parents=True)
    d.start()
    assert not half.exists() and not uncommitted.exists()
    async with http_client(d.sock) as c:
        assert (await c.get("/images/keep/json")).json()["Id"] == img.image_id()
        assert (await c.get("/info")).json()["Images"] == 1


@pytest.mark.parametrize("compress", ["gzip", "bzip2", "xz"])
async def test_import_compressed_rootfs(api, compress: str) -> None:  # type: ignore[no-untyped-def]
    import bz2
    import gzip
    import lzma

    _, c = api
    raw = timg.busybox_rootfs_tar()
    data = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}[compress](raw)
    assert len(data) > 64 * 1024
    r = await import_tar(c, data, repo=compress)
    assert r.status_code == 200 and "error" not in r.text, r.text
    info = (await c.get(f"/images/{compress}/json")).json()
    assert info["RootFS"]["Layers"] == [timg.diff_id(raw)]  # the digest of the plain tar


async def test_dangling_false_lists_tagged_only(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    layers = [timg.layer_tar([timg.file(f"f{i}", b"x")]) for i in range(3)]
    await load(c, timg.docker_save_tar([timg.SaveImage(layers, repo_tags=["t:1"])],
                                       layout="legacy"))
    r = await c.get("/images/json", params={"all": "1", "filters": json.dumps(
        {"dangling": ["false"]})})
    assert [i["RepoTags"] for i in r.json()] == [["t:1"]]


async def test_import_to_a_digest_name_is_refused(api) -> None:  # type: ignore[no-untyped-def]
    _, c = api
    r = await import_tar(c, timg.busybox_rootfs_tar(), repo="x@sha256:" + "a" * 64)
    assert r.status_code == 400 and "digest" in r.text


async def test_malformed_legacy_metadata_is_a_stream_error(api) -> None:  # type: ignore[no-untyped-def]
    d, c = api
    layer = timg.layer_tar([timg.file("a", b"a")])
    cases = {
        "json-not-object": {"abc/json": b"[1, 2]", "abc/layer.tar": layer},
        "parent-loop": {"a1/json": b'{"id": "a1", "parent": "b2"}', "a1/layer.tar": layer,
                        "b2/json": b'{"id": "b2", "parent": "a1"}', "b2/layer.tar": layer},
        "missing-parent": {"a1/json": b'{"id": "a1", "parent": "zz"}', "a1/layer.tar": layer},
        "repositories-not-object": {"a1/json": b'{"id": "a1"}', "a1/layer.tar": layer,
                                    "repositories": b'{"x": "a1"}'},
        "manifest-layers-not-strings": {"manifest.json": b'[{"Config": "c.json", "Layers": [1]}]',
                                        "c.json": b'{"rootfs": {"type": "layers", '
                                                  b'"diff_ids": []}}'},
    }
    for name, files in cases.items():
        arc = timg.layer_tar([timg.file(p, b) for p, b in files.items()])
        r = await load(c, arc)
        assert r.status_code == 200 and '"error"' in r.text, (name, r.status_code, r.text)
    assert store_state(d)[0] == []


async def test_load_abandoned_mid_body_leaves_nothing(api) -> None:  # type: ignore[no-untyped-def]
    """A client that goes away halfway through a load: the unpacking stops, the staged layers
    are discarded, and the daemon carries on."""
    d, c = api
    big = timg.layer_tar([timg.file(f"data/f{i}", os.urandom(256 << 10)) for i in range(64)])
    archive = timg.docker_save_tar([timg.SaveImage([big], repo_tags=["half:1"])])
    before = store_state(d)
    s = await connect(d.sock)
    await s.send_all(b"POST /images/load HTTP/1.1\r\nHost: svc\r\nContent-Type: "
                     b"application/x-tar\r\nContent-Length: %d\r\n\r\n" % len(archive))
    await s.send_all(archive[: len(archive) // 2])
    with trio.fail_after(10):  # the layer is being unpacked into a staging dir
        while not any(n.startswith("tmp-") for n in os.listdir(d.root / "overlay2")):
            await trio.sleep(0.01)
    await s.aclose()
    with trio.fail_after(10):
        while store_state(d) != before:
            await trio.sleep(0.02)
    assert (await c.get("/images/half:1/json")).status_code == 404
    assert (await c.get("/_ping")).text == "OK"
    # the same archive, sent whole, still loads
    r = await load(c, archive)
    assert r.status_code == 200 and "Loaded image: half:1" in r.text
