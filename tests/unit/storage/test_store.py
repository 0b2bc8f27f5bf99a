from __future__ import annotations

import json
from pathlib import Path

import pytest

from svc.storage.atomic import atomic_write
from svc.storage.eventlog import EventLog
from svc.storage.store import ObjectStore


def test_put_get_delete_load(tmp_path: Path) -> None:
    s = ObjectStore(tmp_path)
    s.prepare()
    s.put("containers", "abc", {"Name": "/x", "n": 1})
    assert s.get("containers", "abc") == {"Name": "/x", "n": 1}
    assert s.load("containers").records == {"abc": {"Name": "/x", "n": 1}}
    assert s.delete("containers", "abc") is True
    assert s.delete("containers", "abc") is False
    assert s.get("containers", "abc") is None


def test_bad_ids_and_collections(tmp_path: Path) -> None:
    s = ObjectStore(tmp_path)
    s.prepare()
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(ValueError):
            s.put("containers", bad, {})
    with pytest.raises(ValueError):
        s.put("nope", "a", {})


def test_damaged_records_skipped_and_moved_aside(tmp_path: Path) -> None:
    s = ObjectStore(tmp_path)
    s.prepare()
    s.put("volumes", "ok", {"a": 1})
    d = tmp_path / "store" / "volumes"
    (d / "torn.json").write_bytes(b'{"a": ')
    (d / "arr.json").write_text("[]")
    (d / "bin.json").write_bytes(b"\xff\xfe")
    (d / ".x.json.tmp-99").write_text("{}")
    s2 = ObjectStore(tmp_path)
    s2.prepare()
    rep = s2.load("volumes")
    assert rep.records == {"ok": {"a": 1}}
    assert sorted(p.name for p, _ in rep.skipped) == ["arr.json", "bin.json", "torn.json"]
    assert (d / "torn.json.corrupt").exists() and not (d / ".x.json.tmp-99").exists()


def test_atomic_write_replaces(tmp_path: Path) -> None:
    p = tmp_path / "f"
    atomic_write(p, b"one")
    atomic_write(p, b"two")
    assert p.read_bytes() == b"two"
    assert [x.name for x in tmp_path.iterdir()] == ["f"]


def test_eventlog_bounded_and_tolerant(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "ev.jsonl", keep=10)
    assert log.load() == []
    for i in range(100):
        log.append([{"i": i}])
    lines = (tmp_path / "ev.jsonl").read_text().splitlines()
    assert len(lines) <= 41
    assert [r["i"] for r in log.load()] == list(range(90, 100))
    with open(tmp_path / "ev.jsonl", "ab") as f:
        f.write(b'{"i": 1')  # torn tail
    log2 = EventLog(tmp_path / "ev.jsonl", keep=10)
    assert [r["i"] for r in log2.load()] == list(range(90, 100))
    log2.append([{"i": 100}])  # starts on a fresh line after the torn one
    assert [r["i"] for r in EventLog(tmp_path / "ev.jsonl", keep=10).load()][-1] == 100
    assert json.loads((tmp_path / "ev.jsonl").read_text().splitlines()[-1]) == {"i": 100}
