"""A COPY's image is made (its layer hashed) while the RUN after it already runs on the staged
layer: what a user sees must not change. The stream keeps its order (the COPY's `` ---> <id>``
before the next ``Step``), the RUN sees the copied files, its container names the COPY's image
once that exists, a failed RUN leaves the COPY as cache, and nothing staged is left behind:
not when the same layer was in the store already (a second build without cache), not when the
client goes away."""

from __future__ import annotations

import os
import re

import httpx
import trio

from tests.builds.conftest import BASE, build, built_id, context_tar, stream_text
from tests.builds.test_build_context import _run
from tests.builds.test_build_disconnect import _state, start_build
from tests.support.daemon import Daemon

BIG = os.urandom(8 << 20)  # a few ms of hashing: the RUN starts before the COPY's image exists


async def _full_id(api: httpx.AsyncClient, short: str) -> str:
    r = await api.get(f"/images/{short}/json")
    assert r.status_code == 200, r.text
    return str(r.json()["Id"])


def _store_clean(d: Daemon) -> None:
    """No staged layer left in the layer store, and every short link leads to a layer."""
    store = d.root / "overlay2"
    assert [p.name for p in store.iterdir() if p.name.startswith("tmp-")] == []
    dangling = [p.name for p in (store / "l").iterdir() if not p.exists()]
    assert dangling == []


async def test_run_after_copy_sees_it_and_names_its_image(api: httpx.AsyncClient,
                                                          bdaemon: Daemon) -> None:
    files: dict[str, bytes | str] = {
        "Dockerfile": f"FROM {BASE}\nCOPY big /data/big\nRUN wc -c /data/big; echo ran > /g\n",
        "big": BIG}
    msgs = await build(api, files, rm="0", nocache="1")
    image = built_id(msgs)
    text = stream_text(msgs)
    m = re.search(r"Step 2 : COPY big /data/big\n ---> ([0-9a-f]{12})\n"
                  r"Step 3 : RUN wc -c /data/big; echo ran > /g\n"
                  r" ---> Running in ([0-9a-f]{12})\n"
                  rf"{len(BIG)} /data/big\n ---> ([0-9a-f]{{12}})\n", text)
    assert m is not None, text
    copy_id = await _full_id(api, m.group(1))
    run_id = await _full_id(api, m.group(3))
    assert run_id == image
    # the RUN's container (kept: rm=0) names the COPY's image, as if it had been made on it
    c = (await api.get(f"/containers/{m.group(2)}/json")).json()
    assert (c["Image"], c["Config"]["Image"]) == (copy_id, copy_id)
    assert (await api.get(f"/images/{run_id}/json")).json()["Parent"] == copy_id
    history = (await api.get(f"/images/{run_id}/history")).json()
    assert [h["Id"] for h in history[:2]] == [run_id, copy_id]
    assert await _run(api, image, "wc -c < /data/big; cat /g") == f"{len(BIG)}\nran\n"
    _store_clean(bdaemon)


async def test_the_same_layer_twice_leaves_nothing_staged(api: httpx.AsyncClient,
                                                          bdaemon: Daemon) -> None:
    """A file copied to the root makes the same layer each time (the same diff id): the
    second build's staged copy is not moved into the store, and goes when the build ends."""
    files: dict[str, bytes | str] = {
        "Dockerfile": f"FROM {BASE}\nCOPY big /big\nRUN wc -c /big > /count\n", "big": BIG}
    first = built_id(await build(api, files, nocache="1"))
    msgs = await build(api, files, nocache="1")
    second = built_id(msgs)
    assert second != first
    assert "Using cache" not in stream_text(msgs)
    layers = [(await api.get(f"/images/{i}/json")).json()["RootFS"]["Layers"]
              for i in (first, second)]
    assert layers[0][:-1] == layers[1][:-1]  # the COPY's layer is the same one
    assert await _run(api, second, "cat /count") == f"{len(BIG)} /big\n"
    _store_clean(bdaemon)


async def test_a_failed_run_after_copy_keeps_the_copy_as_cache(api: httpx.AsyncClient,
                                                               bdaemon: Daemon) -> None:
    base: dict[str, bytes | str] = {"big": BIG}
    files = {**base, "Dockerfile": f"FROM {BASE}\nCOPY big /x/big\nRUN echo seen; exit 3\n"}
    msgs = await build(api, files, nocache="1")
    assert msgs[-1]["errorDetail"] == {
        "code": 3, "message": "The command '/bin/sh -c echo seen; exit 3' returned a non-zero "
                              "code: 3"}, msgs
    text = stream_text(msgs)
    m = re.search(r"Step 2 : COPY big /x/big\n ---> ([0-9a-f]{12})\n"
                  r"Removing intermediate container [0-9a-f]{12}\n"
                  r"Step 3 : RUN echo seen; exit 3\n ---> Running in ([0-9a-f]{12})\nseen\n$",
                  text)
    assert m is not None, text
    c = (await api.get(f"/containers/{m.group(2)}/json")).json()  # a failed step's: kept
    assert c["Image"] == await _full_id(api, m.group(1))
    again = {**base, "Dockerfile": f"FROM {BASE}\nCOPY big /x/big\nRUN wc -c /x/big\n"}
    text = stream_text(await build(api, again))
    assert f"Step 2 : COPY big /x/big\n ---> Using cache\n ---> {m.group(1)}\n" in text, text
    _store_clean(bdaemon)


async def test_disconnect_while_the_copy_is_made(api: httpx.AsyncClient,
                                                 bdaemon: Daemon) -> None:
    """The client goes once the RUN after a COPY runs (its image maybe not made yet):
    containers, images and the staged layer all go."""
    before = await _state(api)
    body = context_tar({"Dockerfile": f"FROM {BASE}\nCOPY big /big\nRUN sleep 60\n",
                        "big": BIG})
    s, _ = await start_build(bdaemon.sock, body, "nocache=1")
    with trio.fail_after(30):
        while not (await api.get("/containers/json")).json():  # the RUN's container runs
            await trio.sleep(0.01)
    await s.aclose()
    with trio.fail_after(20):
        while await _state(api) != before:
            await trio.sleep(0.1)
    _store_clean(bdaemon)
    built_id(await build(api, {"Dockerfile": f"FROM {BASE}\nCOPY big /big\nRUN true\n",
                               "big": b"small"}))

