"""A layer another pull commits between this pull's look at the store and its download is
taken from the store: the blob is not fetched again (issue 10's "each blob once", which a
loaded CI machine once broke)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio

from svc.engine.images.pulllayers import LayerPlan, LayerPuller, expected_chains
from svc.storage.layers import chain_id_of

DIFF = ["sha256:" + c * 64 for c in "abc"]


def _plans(*diff_ids: str | None) -> list[LayerPlan]:
    return [LayerPlan("sha256:" + str(i) * 64, 10, d) for i, d in enumerate(diff_ids)]


def test_expected_chains_stop_at_the_first_unknown_diff_id() -> None:
    first = chain_id_of(None, DIFF[0])
    assert expected_chains(_plans(*DIFF)) == [
        first, chain_id_of(first, DIFF[1]), chain_id_of(chain_id_of(first, DIFF[1]), DIFF[2])]
    assert expected_chains(_plans(DIFF[0], None, DIFF[2])) == [first, None, None]
    assert expected_chains(_plans(None, DIFF[1])) == [None, None]
    assert expected_chains([]) == []


class _LateLayers:
    """A store in which every layer appears right after the pull's first look (another
    pull committed them)."""

    def __init__(self) -> None:
        self.looks = 0

    def get(self, chain_id: str) -> object | None:
        self.looks += 1
        return object() if self.looks > 1 else None


class _Images:
    def __init__(self) -> None:
        self.layers = _LateLayers()
        self.pins: Counter[str] = Counter()

    def pin(self, chain: list[str]) -> None:
        self.pins.update(chain)


class _NoDownloads:
    def use(self, *args: Any) -> Any:
        raise AssertionError(f"fetched although the store has it: {args}")


async def test_a_layer_committed_meanwhile_is_taken_from_the_store() -> None:
    send, recv = trio.open_memory_channel[dict[str, object]](100)
    images = _Images()
    puller = LayerPuller(images, _NoDownloads(), None, send)  # type: ignore[arg-type]
    plans = _plans(*DIFF)
    diff_ids, chain = await puller.run(plans)
    assert diff_ids == DIFF
    assert chain == expected_chains(plans)
    assert sorted(puller.pinned) == sorted(chain)
    assert images.pins == Counter(chain)
    send.close()
    statuses = [(m["id"], m["status"]) async for m in recv]
    idents = [p.digest[7:19] for p in plans]
    assert statuses[:3] == [(i, "Pulling fs layer") for i in idents]
    assert sorted(statuses[3:]) == [(i, "Already exists") for i in idents]
