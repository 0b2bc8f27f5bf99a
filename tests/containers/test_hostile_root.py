"""Start-up survives whatever a crash or an attacker leaves in the root.

A daemon with one of each object (image, container, volume, network) is SIGKILLed, then its
root is littered: leftovers of failed imports and commits (a tree 2,000 levels deep, empty
files where directories go, a fifo), symlinks that point out of the root, records of the right
name and the wrong shape in every collection, garbage where metadata files belong. The restart
must succeed, serve every object it had, report what it skipped, and touch nothing outside.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import trio

from tests.conftest import http_client
from tests.containers.conftest import IMAGE
from tests.runtime.conftest import skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon

HEX = "ab" * 32


def _deep(base: Path, levels: int) -> None:
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d" * 16, dir_fd=fd)
        nxt = os.open("d" * 16, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)


def _litter(root: Path, outside: Path) -> None:
    ov = root / "overlay2"
    (ov / "tmp-import-deep").mkdir()
    _deep(ov / "tmp-import-deep", 2000)
    (ov / "tmp-commit-x1").write_bytes(b"")
    (ov / "tmp-commit-x2").write_bytes(b"")
    os.mkfifo(ov / "tmp-fifo")
    (ov / "tmp-link").symlink_to(outside)
    (ov / HEX).write_bytes(b"a file where a layer directory goes")
    (ov / ("cd" * 32)).symlink_to(outside)
    (ov / "l" / "DANGLING").symlink_to("../nowhere")
    (ov / "l" / "PLAIN").write_bytes(b"x")
    for coll, doc in (("containers", b'{"Id": 5, "Config": []}'), ("images", b'{"config": 1}'),
                      ("networks", b'{"Name": 1}'), ("volumes", b'{"Name": []}')):
        (root / "store" / coll / f"{'ef' * 32}.json").write_bytes(doc)
        (root / "store" / coll / "junk.json").write_bytes(b"\x00\xff not json")
        (root / "store" / coll / "adir.json").mkdir()
    (root / "containers" / ("12" * 32)).mkdir()
    (root / "containers" / "a-file").write_bytes(b"x")
    (root / "volumes" / "a-file").write_bytes(b"x")
    (root / "image" / "sha256" / ("34" * 32)).write_bytes(b"not a config")
    with open(root / "events.jsonl", "ab") as f:
        f.write(b"\x00garbage\n{\"time\": \"x\"}\n[]\n")


async def test_start_survives_a_littered_root(spawn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        import pytest
        pytest.skip(reason)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("mine")
    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        await timg.import_busybox(c)
        r = await c.post("/containers/create", params={"name": "kept"},
                         json={"Image": IMAGE, "Cmd": ["true"]})
        assert r.status_code == 201
        assert (await c.post("/volumes/create", json={"Name": "keptvol"})).status_code == 201
        r = await c.post("/networks/create", json={"Name": "keptnet", "CheckDuplicate": True})
        assert r.status_code == 201
    d.kill()
    _litter(d.root, outside)
    d.start()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        assert [i["RepoTags"] for i in (await c.get("/images/json")).json()] == \
            [["busybox:latest"]]
        listed = (await c.get("/containers/json", params={"all": "1"})).json()
        assert [x["Names"] for x in listed] == [["/kept"]]
        vols = (await c.get("/volumes")).json()["Volumes"]
        assert "keptvol" in [v["Name"] for v in vols]  # a misshapen record shows as it can
        nets = {n["Name"] for n in (await c.get("/networks")).json()}
        assert {"bridge", "host", "none", "keptnet"} <= nets
        r = await c.post("/containers/kept/start")
        assert r.status_code == 204, r.text
        assert (await c.post("/containers/kept/wait")).json()["StatusCode"] == 0
        assert (await c.get("/events", params={"since": "0", "until": "1"})).status_code == 200
        assert (await c.delete("/networks/keptnet")).status_code in (200, 204)
    assert (outside / "precious").read_text() == "mine"
    ov = d.root / "overlay2"
    assert not any(p.name.startswith("tmp-") for p in ov.iterdir())
    deadline = time.monotonic() + 60  # the leftovers went to the trash: deleted in the background
    while any((d.root / "trash").iterdir()) and time.monotonic() < deadline:
        await trio.sleep(0.2)
    assert not any((d.root / "trash").iterdir())
    assert "Traceback" not in d.log()
