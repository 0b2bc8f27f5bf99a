"""What the daemon takes from conmon's log in one step: records joined into chunks, and
conmon's environment."""

from svc.runtime.conmon.k8sfile import Record
from svc.runtime.conmon.logtail import Batch, Chunk
from tests.support.conmon import monitor_env

MS = 1_000_000


def test_records_of_one_stream_read_close_together_are_one_chunk() -> None:
    """Stamped with the last one's time, and the cursor goes after the last one."""
    records = [Record(10 * MS, "stdout", b"a\n"), Record(11 * MS, "stdout", b"b"),
               Record(12 * MS, "stdout", b"c\n"), Record(12 * MS, "stderr", b"e\n"),
               Record(13 * MS, "stdout", b"d\n")]
    batch = Batch(7, records, [3, 5, 8, 11, 14])
    chunks = list(batch.chunks())
    assert chunks == [Chunk("stdout", b"a\nbc\n", 12 * MS, 2), Chunk("stderr", b"e\n", 12 * MS, 3),
                      Chunk("stdout", b"d\n", 13 * MS, 4)]
    assert batch.cursor_after(chunks[0].last).offset == 8


def test_records_read_apart_keep_their_own_times() -> None:
    """Lines written while the daemon was away were read by conmon at their own times."""
    records = [Record(i * 500 * MS, "stdout", b"%d\n" % i) for i in range(3)]
    chunks = list(Batch(1, records, [1, 2, 3]).chunks())
    assert [(c.data, c.ts_ns, c.last) for c in chunks] == [
        (b"0\n", 0, 0), (b"1\n", 500 * MS, 1), (b"2\n", 1000 * MS, 2)]


def test_a_window_is_measured_from_the_first_record() -> None:
    records = [Record(i * MS, "stdout", b"x") for i in range(6)]
    chunks = list(Batch(1, records, list(range(1, 7))).chunks(window_ns=2 * MS))
    assert [(c.data, c.ts_ns) for c in chunks] == [(b"xxx", 2 * MS), (b"xxx", 5 * MS)]


def test_conmon_gets_none_of_the_daemons_environment(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("SECRET_TOKEN", "x")
    monkeypatch.setenv("TZ", "UTC")
    env = monitor_env(9)
    assert env["_OCI_SYNCPIPE"] == "9" and env["TZ"] == "UTC" and env["PATH"]
    assert "LANG" not in env and "SECRET_TOKEN" not in env
