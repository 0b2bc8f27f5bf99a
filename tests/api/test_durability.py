"""Durable state: SIGKILL in the middle of writes loses nothing acknowledged, and damaged
records are reported and skipped at start, never crashing the daemon."""

from __future__ import annotations

import json
import random

import httpx
import trio

from tests.conftest import http_client
from tests.support.daemon import Daemon

ROUNDS = 6
WRITERS = 8


async def _write_until_killed(d: Daemon, round_no: int,
                              acked: dict[str, dict[str, object]]) -> None:
    """Concurrent writers record every acknowledged (200) write; the daemon is SIGKILLed at a
    random moment while they run."""

    async def writer(w: int) -> None:
        async with http_client(d.sock) as c:
            i = 0
            while True:
                oid = f"r{round_no}-w{w}-{i}"
                record = {"round": round_no, "writer": w, "seq": i, "pad": "x" * (i % 700)}
                try:
                    r = await c.put(f"/_probe/store/containers/{oid}", json=record)
                except (httpx.TransportError, OSError):
                    return  # the daemon died mid-request: this write was never acknowledged
                if r.status_code == 200:
                    acked[oid] = record
                i += 1

    async with trio.open_nursery() as n:
        for w in range(WRITERS):
            n.start_soon(writer, w)
        await trio.sleep(random.uniform(0.2, 0.8))
        d.kill()


async def test_sigkill_loses_no_acknowledged_write() -> None:
    d = Daemon()
    acked: dict[str, dict[str, object]] = {}
    try:
        for round_no in range(ROUNDS):
            d.start()
            if round_no:  # everything acknowledged so far survived the previous kill
                async with http_client(d.sock) as c:
                    stored = (await c.get("/_probe/store/containers")).json()
                missing = [k for k in acked if stored.get(k) != acked[k]]
                assert not missing, f"lost after SIGKILL: {missing[:5]}"
            await _write_until_killed(d, round_no, acked)
        assert len(acked) > 50, "the loop must have made real progress"
        d.start()
        async with http_client(d.sock) as c:
            stored = (await c.get("/_probe/store/containers")).json()
        assert all(stored.get(k) == v for k, v in acked.items())
        assert "damaged" not in d.log()  # atomic writes never leave a torn record
    finally:
        d.cleanup()


async def test_damaged_records_are_reported_and_skipped() -> None:
    d = Daemon()
    try:
        d.start()
        async with http_client(d.sock) as c:
            r = await c.put("/_probe/store/volumes/good", json={"ok": True})
            assert r.status_code == 200
        assert d.stop() == 0
        store = d.root / "store" / "volumes"
        (store / "torn.json").write_bytes(b'{"half": "writ')
        (store / "list.json").write_text("[1, 2]")
        (store / ".interrupted.json.tmp-123").write_text('{"x": 1}')
        with open(d.root / "events.jsonl", "ab") as f:  # a torn last event line
            f.write(b'{"type": "container", "act')
        d.start()
        async with http_client(d.sock) as c:
            stored = (await c.get("/_probe/store/volumes")).json()
            assert stored == {"good": {"ok": True}}
            r = await c.get("/events", params={"since": "0", "until": "1"})
            assert r.status_code == 200
        log = d.log()
        assert "skipping damaged volumes record" in log and "torn.json" in log
        assert "event log" in log and "damaged line" in log
        assert (store / "torn.json.corrupt").exists() and (store / "list.json.corrupt").exists()
        assert not (store / ".interrupted.json.tmp-123").exists()
        assert json.loads((store / "good.json").read_text()) == {"ok": True}
    finally:
        d.cleanup()
