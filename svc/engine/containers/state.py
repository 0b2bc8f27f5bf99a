"""Container states and the transition table (spec: States and transitions).

The table is the single source of truth: every verb checks ``require(state, verb)``, which
raises the error kind (and the dockerd message) the API maps to 304/409. ``Status`` texts for
the list's human-readable column are derived here too.
"""

from __future__ import annotations

from enum import StrEnum

from svc.errors import Conflict, NotModified


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

# the state a successful verb leads to (exits and restarts are driven by the supervisor)
RESULT: dict[str, State] = {
    "start": State.RUNNING,
    "stop": State.EXITED,
    "kill": State.EXITED,
    "pause": State.PAUSED,
    "unpause": State.RUNNING,
    "restart": State.RUNNING,
}


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
