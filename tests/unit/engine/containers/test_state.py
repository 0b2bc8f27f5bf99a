from __future__ import annotations

import pytest

from svc.engine.containers.state import ALLOWED, State, can, human_duration, require, status_text
from svc.errors import Conflict, NotModified

C = "abc123"


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("verb", sorted(ALLOWED))
def test_table_is_total(state: State, verb: str) -> None:
    if can(state, verb):
        require(state, verb, C)
    else:
        with pytest.raises((Conflict, NotModified)):
            require(state, verb, C)


def test_spec_transitions() -> None:
    # start: 204 from created/exited; 304 when running
    require(State.CREATED, "start", C)
    require(State.EXITED, "start", C)
    with pytest.raises(NotModified):
        require(State.RUNNING, "start", C)
    with pytest.raises(Conflict, match="try unpause instead"):
        require(State.PAUSED, "start", C)
    # stop: 304 when already stopped
    with pytest.raises(NotModified):
        require(State.EXITED, "stop", C)
    require(State.PAUSED, "stop", C)
    # kill of a stopped container: 409 "is not running"
    with pytest.raises(Conflict, match=f"Container {C} is not running"):
        require(State.EXITED, "kill", C)
    with pytest.raises(Conflict, match="already paused"):
        require(State.PAUSED, "pause", C)
    with pytest.raises(Conflict, match="is not paused"):
        require(State.RUNNING, "unpause", C)
    with pytest.raises(Conflict, match="You cannot remove a running container"):
        require(State.RUNNING, "remove", C)
    require(State.RUNNING, "force_remove", C)
    with pytest.raises(Conflict, match="unpause the container before exec"):
        require(State.PAUSED, "exec", C)
    with pytest.raises(Conflict, match="already in progress"):
        require(State.REMOVING, "force_remove", C)


@pytest.mark.parametrize("seconds,text", [(0.5, "Less than a second"), (1, "1 second"),
                                          (59, "59 seconds"), (60, "About a minute"),
                                          (300, "5 minutes"), (3600, "About an hour"),
                                          (7200, "2 hours"), (3 * 86400, "3 days")])
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_status_text() -> None:
    assert status_text(State.RUNNING, exit_code=0, since="5 minutes") == "Up 5 minutes"
    assert status_text(State.PAUSED, exit_code=0, since="1 second") == "Up 1 second (Paused)"
    assert status_text(State.EXITED, exit_code=3, since="2 hours") == "Exited (3) 2 hours ago"
    assert status_text(State.CREATED, exit_code=0, since="") == "Created"


def test_transition_is_the_table() -> None:
    """``transition`` moves a state as TRANSITIONS says and is the only writer of status."""
    from dataclasses import dataclass

    from svc.engine.containers.state import TRANSITIONS, transition

    @dataclass
    class St:
        status: State

    for event, (sources, target) in TRANSITIONS.items():
        for source in sources:
            st = St(source)
            assert transition(st, event) is target and st.status is target, (event, source)


def test_an_unexpected_transition_is_logged_and_applied(caplog) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import dataclass

    from svc.engine.containers.state import transition

    @dataclass
    class St:
        status: State

    st = St(State.CREATED)
    transition(st, "paused")
    assert st.status is State.PAUSED and "paused while created" in caplog.text
