"""Container states and the transition table (spec: States and transitions).

The table is the single source of truth: every verb checks ``require(state, verb)``, which
raises the error kind (and the dockerd message) the API maps to 304/409. ``Status`` texts for
the list's human-readable column are derived here too.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Protocol

from svc.errors import Conflict, NotModified

log = logging.getLogger("svc.engine.containers")


class State(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    REMOVING = "removing"
    EXITED = "exited"
    DEAD = "dead"


# verb -> states it is allowed from
ALLOWED: dict[str, frozenset[State]] = {
    "start": frozenset({State.CREATED, State.EXITED}),
    "stop": frozenset({State.RUNNING, State.PAUSED, State.RESTARTING}),
    "restart": frozenset({State.CREATED, State.RUNNING, State.PAUSED, State.RESTARTING,
                          State.EXITED}),
    "kill": frozenset({State.RUNNING, State.PAUSED, State.RESTARTING}),
    "pause": frozenset({State.RUNNING}),
    "unpause": frozenset({State.PAUSED}),
    "remove": frozenset({State.CREATED, State.EXITED, State.DEAD}),
    "force_remove": frozenset(State) - {State.REMOVING},
    "exec": frozenset({State.RUNNING}),
    "attach": frozenset(State) - {State.REMOVING, State.DEAD},
    "update": frozenset(State) - {State.REMOVING, State.DEAD},
    "rename": frozenset(State) - {State.REMOVING},
}

# What happens to a container -> (the states it can happen in, the state it leads to). The one
# writer of a container's status is ``transition``; verbs check ``ALLOWED`` first.
_ANY = frozenset(State)
TRANSITIONS: dict[str, tuple[frozenset[State], State]] = {
    "started": (frozenset({State.CREATED, State.EXITED, State.RESTARTING, State.DEAD}),
                State.RUNNING),
    "paused": (frozenset({State.RUNNING}), State.PAUSED),
    "unpaused": (frozenset({State.PAUSED}), State.RUNNING),
    "thawed": (frozenset({State.PAUSED}), State.RUNNING),  # a kill thaws a paused container
    "exited": (frozenset({State.RUNNING, State.PAUSED, State.RESTARTING}), State.EXITED),
    "restarting": (frozenset({State.RUNNING, State.PAUSED, State.EXITED}), State.RESTARTING),
    "restart_abandoned": (frozenset({State.RESTARTING}), State.EXITED),
    "removing": (_ANY - {State.REMOVING}, State.REMOVING),
}


class Transitioned(Protocol):
    status: State


def transition(st: Transitioned, event: str) -> State:
    """Move ``st`` (a container's state) on ``event``, as the table says; the only place a
    container's status is written. An event in a state the table does not expect is logged
    (it would be a bug of the engine's) and applied, so that the record follows what the
    runtime did."""
    sources, target = TRANSITIONS[event]
    if st.status not in sources:
        log.error("container state: %s while %s (expected in %s)", event, st.status.value,
                  ", ".join(sorted(s.value for s in sources)))
    st.status = target
    return target


def can(state: State, verb: str) -> bool:
    return state in ALLOWED[verb]


def require(state: State, verb: str, cid: str) -> None:
    """Raise the error dockerd gives when ``verb`` is not possible in ``state``."""
    if can(state, verb):
        return
    if state is State.REMOVING:
        raise Conflict(f"removal of container {cid} is already in progress")
    if verb == "start":
        if state is State.PAUSED:
            raise Conflict(f"Cannot start a paused container {cid}, try unpause instead.")
        raise NotModified(f"Container {cid} is already running")
    if verb == "stop":
        raise NotModified(f"Container {cid} is already stopped")
    if verb == "pause" and state is State.PAUSED:
        raise Conflict(f"Container {cid} is already paused")
    if verb == "unpause":
        raise Conflict(f"Container {cid} is not paused")
    if verb == "exec" and state is State.PAUSED:
        raise Conflict(f"Container {cid} is paused, unpause the container before exec")
    if verb == "remove":
        what = "paused" if state is State.PAUSED else "running"
        raise Conflict(f"You cannot remove a {what} container {cid}. Stop the container "
                       "before attempting removal or force remove")
    raise Conflict(f"Container {cid} is not running")


def status_text(state: State, *, exit_code: int, since: str, restarting_in: str = "") -> str:
    """The list's Status column: "Up 5 minutes", "Exited (0) 2 hours ago", ..."""
    if state is State.RUNNING:
        return f"Up {since}"
    if state is State.PAUSED:
        return f"Up {since} (Paused)"
    if state is State.RESTARTING:
        return f"Restarting ({exit_code}) {since} ago"
    if state is State.EXITED:
        return f"Exited ({exit_code}) {since} ago"
    if state is State.DEAD:
        return "Dead"
    if state is State.REMOVING:
        return "Removal In Progress"
    return "Created"


def human_duration(seconds: float) -> str:
    """Go's units.HumanDuration, as dockerd uses for Status."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return f"{s} seconds"
    minutes = s // 60
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = round(s / 3600)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{hours // 24 // 365} years"
