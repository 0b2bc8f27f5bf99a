"""``runc start`` that fails only to remove the exec fifo did start the process."""

from __future__ import annotations

import json

from svc.runtime.runc import failure, started_anyway


def _log(msg: str) -> str:
    return json.dumps({"level": "error", "msg": msg, "time": "2026-01-01T00:00:00Z"})


def test_fifo_removed_by_a_teardown_is_a_start() -> None:
    exc = failure("start", 1, _log("remove /run/svc/runc/abc/exec.fifo: no such file or "
                                   "directory"))
    assert started_anyway(exc)


def test_other_start_failures_are_not() -> None:
    assert not started_anyway(failure("start", 1, _log("container abc is not in created "
                                                       "state: stopped")))
    assert not started_anyway(failure("create", 1, _log("remove /x/exec.fifo: no such file "
                                                        "or directory")))
