"""GET /events messages: the v1.22 shape (both spellings) and the legacy shape."""

from __future__ import annotations

from pydantic import Field

from svc.models.base import WireModel


class EventActor(WireModel):
    ID: str
    Attributes: dict[str, str]


class EventActorLower(WireModel):
    id: str
    attributes: dict[str, str]


class EventMessage(WireModel):
    """v1.22+: the spec's lower-case fields, the spellings dockerd sends, and for container
    and image events the legacy ``status``/``id``/``from`` that older clients still read."""

    status: str | None = None
    id: str | None = None
    from_: str | None = Field(None, alias="from")
    Type: str
    Action: str
    Actor: EventActor
    type: str
    action: str
    actor: EventActorLower
    scope: str = "local"
    time: int
    timeNano: int


class LegacyEventMessage(WireModel):
    """Before v1.22: ``status``/``id``/``from``/``time``; ``timeNano`` from v1.21."""

    status: str
    id: str
    from_: str | None = Field(None, alias="from")
    time: int
    timeNano: int | None = None


class StreamError(WireModel):
    """The final object of a stream that the daemon had to end early."""

    error: str
    errorDetail: dict[str, str]
