"""``ImageService.remove``: an rmi's changes in one step; an untag alone never waits for a
layer's commit (the layer lock), a deletion does."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from svc.engine.events import EventBus
from svc.engine.images.service import Image, ImageService
from svc.models.imageconfig import ImageConfig
from svc.storage.store import ObjectStore
from svc.storage.trash import Trash

CONFIG = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'


def service(root: Path) -> tuple[ImageService, Image]:
    store = ObjectStore(root)
    store.prepare()
    trash = Trash(root / "trash")
    trash.prepare()
    svc = ImageService(root, store, EventBus(), trash)
    svc.open({})
    image_id = svc.configs.put(CONFIG)
    image = Image(image_id, ImageConfig.parse(CONFIG), None, [], 0)
    store.put("images", image_id.removeprefix("sha256:"), image.record())
    svc.images[image_id] = image
    svc.repos = {"a": {"a:latest": image_id}, "b": {"b:latest": image_id}}
    return svc, image


async def test_an_untag_alone_does_not_wait_for_the_layer_lock(tmp_path: Path) -> None:
    svc, image = service(tmp_path)
    async with svc.layer_lock:  # a layer's commit in progress
        svc.forget_ref("a:latest")
        with trio.fail_after(5):
            assert await svc.remove(image, ["a:latest"], delete=False) == []
    names = json.loads((tmp_path / "repositories.json").read_bytes())["Repositories"]
    assert names == {"b": {"b:latest": image.id}}
    assert image.id in svc.images


async def test_a_deletion_takes_names_record_and_config_in_one_step(tmp_path: Path) -> None:
    svc, image = service(tmp_path)
    published: list[tuple[str, str]] = []
    publish = svc.events.publish
    svc.events.publish = lambda t, action, actor, *a, **k: (  # type: ignore[method-assign]
        published.append((action, actor)), publish(t, action, actor, *a, **k))[1]
    svc.forget_ref("a:latest")
    svc.forget_ref("b:latest")
    report = await svc.remove(image, ["a:latest", "b:latest"], delete=True)
    assert report == [{"Deleted": image.id}]
    assert json.loads((tmp_path / "repositories.json").read_bytes()) == {"Repositories": {}}
    assert svc.store.get("images", image.id.removeprefix("sha256:")) is None
    assert not (svc.configs.dir / image.id.removeprefix("sha256:")).exists()
    assert svc.trash is not None and len(svc.trash.entries()) == 2  # renamed, not unlinked
    assert published == [("untag", image.id), ("untag", image.id), ("delete", image.id)]
