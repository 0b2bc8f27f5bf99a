"""What a context may hold and where COPY/ADD put it: directories, wildcards, a relative
destination, ADD of a local archive and of a URL, FROM scratch, the ignore file, and the
hostile contexts refused in-stream with nothing left behind."""

from __future__ import annotations

import gzip
import io
import os
import tarfile

import httpx
import trio

from tests.builds.conftest import BASE, build, built_id, context_tar, refused
from tests.support.daemon import Daemon


async def _run(api: httpx.AsyncClient, image: str, script: str) -> str:
    r = await api.post("/containers/create", json={"Image": image, "Entrypoint": [],
                                                   "Cmd": ["/bin/sh", "-c", script]})
    assert r.status_code == 201, r.text
    cid = r.json()["Id"]
    await api.post(f"/containers/{cid}/start")
    with trio.fail_after(30):
        await api.post(f"/containers/{cid}/wait")
    logs = await api.get(f"/containers/{cid}/logs", params={"stdout": "1", "stderr": "1"})
    out = bytearray()
    data = logs.content
    while len(data) >= 8:  # stdcopy frames
        size = int.from_bytes(data[4:8], "big")
        out += data[8:8 + size]
        data = data[8 + size:]
    return out.decode()


def _tar(entries: list[tarfile.TarInfo], data: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info in entries:
            payload = (data or {}).get(info.name)
            if payload is not None:
                info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return buf.getvalue()


def sparse_bomb(size: int, files: dict[str, bytes] | None = None) -> bytes:
    """A tar of ``files`` and ``holes``, a sparse file of ``size`` bytes (one byte at its end)
    stored in a few KiB."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (files or {}).items():
            tar.addfile(_file(name, data)[0], io.BytesIO(data))
        info = tarfile.TarInfo("holes")
        info.size = 1
        info.pax_headers = {"GNU.sparse.size": str(size), "GNU.sparse.map": f"{size - 1},1",
                            "GNU.sparse.name": "holes"}
        tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


async def test_copy_and_add_placement(api: httpx.AsyncClient) -> None:
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as t:
        info, data = _file("unpacked/in.txt", b"from the archive\n")
        t.addfile(info, io.BytesIO(data))
    files: dict[str, bytes | str] = {
        "Dockerfile": (f"FROM {BASE}\nWORKDIR /w\nCOPY dir rel/\nCOPY a.txt b.txt /multi/\n"
                       "COPY *.txt /glob/\nCOPY a.txt /renamed\nADD arch.tar.gz /x/\n"
                       "COPY arch.tar.gz /kept/\n"),
        "dir/": b"", "dir/sub/": b"", "dir/sub/deep": "deep\n", "a.txt": "a\n",
        "b.txt": "b\n", "arch.tar.gz": inner.getvalue()}
    image = built_id(await build(api, files))
    out = await _run(api, image, "cat /w/rel/sub/deep /multi/a.txt /multi/b.txt "
                                 "/glob/a.txt /renamed /x/unpacked/in.txt; ls /kept; "
                                 "stat -c '%u:%g' /multi/a.txt")
    assert out == "deep\na\nb\na\na\nfrom the archive\narch.tar.gz\n0:0\n"


async def test_multiple_sources_need_a_directory(api: httpx.AsyncClient) -> None:
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nCOPY a b /dest\n", "a": "", "b": ""})
    assert "must be a directory and end with a /" in msgs[-1]["error"]
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nCOPY missing /\n"})
    assert "stat missing: no such file or directory" in msgs[-1]["error"]


async def test_add_url(api: httpx.AsyncClient, web: str) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nADD {web}/served.txt /u/\nADD {web}/served.txt /f\n"}
    image = built_id(await build(api, files))
    assert await _run(api, image, "cat /u/served.txt /f; stat -c %a /f") == \
        "over http\nover http\n600\n"
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nCOPY {web}/served.txt /\n"})
    assert msgs[-1]["error"] == "Source can't be a URL for COPY"
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nADD {web}/nothing /\n"})
    assert "HTTP 404" in msgs[-1]["error"]


async def test_from_scratch(api: httpx.AsyncClient) -> None:
    files = {"Dockerfile": "FROM scratch\nCOPY f /f\nCMD [\"/f\"]\n", "f": "x"}
    msgs = await build(api, files)
    image = (await api.get(f"/images/{built_id(msgs)}/json")).json()
    assert len(image["RootFS"]["Layers"]) == 1 and image["Config"]["Cmd"] == ["/f"]
    assert built_id(await build(api, files)) == built_id(msgs)
    empty = await build(api, {"Dockerfile": "FROM scratch\n"})
    assert empty[-1]["error"] == "No image was generated. Is your Dockerfile empty?"


async def test_ignore_file(api: httpx.AsyncClient) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nCOPY . /ctx/\n", "keep.txt": "k",
             "skip.log": "s", "d/skip.log": "nested", "d/deeper/x.log": "x",
             "build/out": "o", "build/keep": "k2",
             ".dockerignore": "*.log\n**/x.log\nbuild\n!build/keep\nDockerfile\n.dockerignore\n"}
    image = built_id(await build(api, files))
    listing = await _run(api, image, "cd /ctx && find . | sort")
    assert listing.split() == [".", "./build", "./build/keep", "./d", "./d/deeper",
                               "./d/skip.log",
                               "./keep.txt"]
    svcignore = {**files, ".svcignore": "keep.txt\n"}
    image = built_id(await build(api, svcignore))
    listing = await _run(api, image, "cd /ctx && find . -type f | sort")
    assert "./keep.txt" not in listing.split() and "./skip.log" in listing.split()


async def _refused(api: httpx.AsyncClient, daemon: Daemon, body: bytes, words: str, *,
                   in_stream: bool = False) -> None:
    images = len((await api.get("/images/json", params={"all": "1"})).json())
    if in_stream:
        msgs = await build(api, body)
        assert "error" in msgs[-1] and words in msgs[-1]["error"], msgs
    else:
        assert words in await refused(api, body)
    assert len((await api.get("/images/json", params={"all": "1"})).json()) == images
    builds = daemon.root / "builds"
    assert not os.listdir(builds)


async def test_hostile_contexts(api: httpx.AsyncClient, bdaemon: Daemon) -> None:
    df = _file("Dockerfile", f"FROM {BASE}\nCOPY link/ /x/\n".encode())
    await _refused(api, bdaemon, _tar([_file("../evil", b"x")[0]], {"../evil": b"x"}),
                   "points outside the context")
    await _refused(api, bdaemon, _tar([_file("/abs", b"x")[0]], {"/abs": b"x"}),
                   "is an absolute path")
    await _refused(api, bdaemon, _tar([_link("l", "/etc"), _file("l/passwd", b"x")[0]],
                                      {"l/passwd": b"x"}), "lies below the symlink")
    await _refused(api, bdaemon, _tar([_link("h", "/etc/passwd", tarfile.LNKTYPE)]),
                   "is not a file of the context")
    await _refused(api, bdaemon, _tar([df[0], _link("link", "/etc")], {"Dockerfile": df[1]}),
                   "forbidden path outside the build context", in_stream=True)
    up = _file("Dockerfile", f"FROM {BASE}\nCOPY ../../etc/passwd /x\n".encode())
    await _refused(api, bdaemon, _tar([up[0]], {"Dockerfile": up[1]}),
                   "forbidden path outside the build context", in_stream=True)
    await _refused(api, bdaemon, gzip.compress(sparse_bomb(1 << 50)), "decompression bomb")
    assert "not a valid tar archive" in await refused(api, b"no tar archive at all" * 100)
    # symlinks inside the context are fine, and copied as symlinks
    ok = _tar([_file("Dockerfile", f"FROM {BASE}\nCOPY . /c/\n".encode())[0],
               _file("real", b"r")[0], _link("alias", "real")],
              {"Dockerfile": f"FROM {BASE}\nCOPY . /c/\n".encode(), "real": b"r"})
    image = built_id(await build(api, ok))
    assert await _run(api, image, "readlink /c/alias; cat /c/alias") == "real\nr"


async def test_compressible_contexts_are_no_bombs(api: httpx.AsyncClient) -> None:
    """100 MB of zeros (gzip'd to 100 KB) and a sparse file of 64 MiB are ordinary."""
    files = {"Dockerfile": f"FROM {BASE}\nCOPY zeros holes /in/\n".encode(),
             "zeros": bytes(100 << 20)}
    body = gzip.compress(sparse_bomb(64 << 20, files), compresslevel=6)
    assert len(body) < 200_000
    image = built_id(await build(api, body))
    assert await _run(api, image, "stat -c %s /in/zeros /in/holes") == "104857600\n67108864\n"


async def test_streams_while_the_context_arrives(api: httpx.AsyncClient) -> None:
    """A chunked body (what the CLI sends) works as well as one with a length."""
    body = context_tar({"Dockerfile": f"FROM {BASE}\nCOPY big /big\n",
                        "big": os.urandom(3 << 20)})

    async def chunks() -> object:
        for i in range(0, len(body), 65536):
            yield body[i:i + 65536]

    r = await api.post("/build", content=chunks(),  # type: ignore[arg-type]
                       headers={"Content-Type": "application/x-tar"})
    assert "Successfully built" in r.text, r.text
