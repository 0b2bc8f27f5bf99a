"""Users of one shared download: however they join and wake up around the producer's
changes, every one of them sees the end (none waits on a signal nobody will give)."""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.testing

from svc.engine.images.downloads import Download
from svc.engine.images.pulllayers import LayerPuller


async def test_every_watcher_of_a_shared_download_sees_its_end(
        autojump_clock: trio.testing.MockClock) -> None:
    rng = random.Random(7)
    for _ in range(20):
        send, recv = trio.open_memory_channel[dict[str, object]](1_000_000)
        puller = LayerPuller(None, None, None, send)  # type: ignore[arg-type]
        download = Download("sha256:" + "0" * 64, 1000, Path("/nonexistent"))
        download.started.set()
        download.path = Path("/dev/null")
        ended: list[int] = []

        async def watch(i: int, puller: LayerPuller = puller, download: Download = download,
                        ended: list[int] = ended) -> None:
            await puller.watch_download(f"w{i}", download)
            ended.append(i)

        async with trio.open_nursery() as nursery:
            for n in range(300):
                if n < 60 and rng.random() < 0.5:
                    nursery.start_soon(watch, n)
                download.progress(n + 1, 1000)
                for _ in range(rng.randrange(4)):
                    await trio.lowlevel.checkpoint()
                if rng.random() < 0.2:
                    await trio.sleep(rng.choice((0.01, 0.125, 0.25)))
            download.done.set()
            download.notify()
            with trio.fail_after(10):
                while len(ended) < len(nursery.child_tasks):
                    await trio.sleep(0.01)
            assert len(ended) > 10
