"""The daemon's handle on a container's conmon (``engine/containers/monitored``)."""

from pathlib import Path

import pytest

from svc.engine.containers.monitored import open_handle
from svc.runtime.conmon.monitor import MonitorFiles
from svc.runtime.protocol import RuntimeFailure


def _files(tmp_path: Path) -> MonitorFiles:
    (tmp_path / "monitor").mkdir()
    (tmp_path / "bundle").mkdir()  # no attach socket in it: conmon does not listen
    return MonitorFiles(tmp_path / "monitor", tmp_path / "bundle", "c" * 64)


async def test_a_start_whose_stdin_cannot_be_reached_fails_saying_so(tmp_path: Path) -> None:
    """Not a container running with its input going nowhere (its client's attach hung)."""
    with pytest.raises(RuntimeFailure, match="attach socket"):
        await open_handle(1, _files(tmp_path), wants_input=True, required=True)


async def test_a_taken_back_container_whose_conmon_is_gone_has_no_stdin(tmp_path: Path) -> None:
    """It has exited: its supervisor finds that out, and its handle has no input."""
    handle = await open_handle(1, _files(tmp_path), wants_input=True)
    try:
        assert handle.input is None
    finally:
        handle.close()
