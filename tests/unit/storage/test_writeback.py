"""start_writeback queues a file's pages for the disk and changes nothing in the file."""

from __future__ import annotations

import os
from pathlib import Path

from svc.storage.writeback import start_writeback


def test_writeback_leaves_the_content_as_written(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = os.urandom(3 << 20)
    with open(path, "wb") as f:
        f.write(data[: 1 << 20])
        f.flush()
        start_writeback(f.fileno(), 0, 1 << 20)
        f.write(data[1 << 20:])
        f.flush()
        start_writeback(f.fileno(), 1 << 20, 0)  # 0: to the end
    assert path.read_bytes() == data


def test_writeback_on_a_pipe_is_ignored() -> None:
    r, w = os.pipe()
    try:
        start_writeback(w, 0, 0)  # ESPIPE from the kernel: best effort, no exception
    finally:
        os.close(r)
        os.close(w)
