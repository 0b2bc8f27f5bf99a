"""Which events a subscriber asked for: the v1.22 ``filters`` of ``GET /events``, matched as
dockerd matches them (``EventFilter``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from svc.engine.events import Event


class EventFilter:
    """The v1.22 event filters, as dockerd applies them.

    container/volume/network: prefix of the actor id, or its name attribute; event and type:
    exact; image: the image event's id or name, or a container event's image attribute, with
    or without tag; label: ``key`` or ``key=value`` among the actor's attributes.
    """

    def __init__(self, filters: Mapping[str, Iterable[str]] | None = None) -> None:
        self.f = {k: list(v) for k, v in (filters or {}).items() if list(v)}

    def __bool__(self) -> bool:
        return bool(self.f)

    def match(self, ev: Event) -> bool:
        f = self.f
        if not f:
            return True
        if "event" in f and ev.action not in f["event"]:
            return False
        if "type" in f and ev.type not in f["type"]:
            return False
        for kind in ("container", "volume", "network"):
            if kind in f and not self._fuzzy(f[kind], ev, kind):
                return False
        if "image" in f and not self._image(f["image"], ev):
            return False
        return not ("label" in f and not self._labels(f["label"], ev.attributes))

    @staticmethod
    def _fuzzy(values: list[str], ev: Event, kind: str) -> bool:
        if ev.type != kind:
            return False
        name = ev.attributes.get("name", "")
        return any(ev.actor_id.startswith(v) or (name and (name == v or name == v.lstrip("/")))
                   for v in values)

    @staticmethod
    def _image(values: list[str], ev: Event) -> bool:
        if ev.type == "image":
            cands = [ev.actor_id, ev.attributes.get("name", "")]
        elif ev.type == "container":
            cands = [ev.attributes.get("image", "")]
        else:
            return False
        cands += [_strip_tag(c) for c in cands]
        return any(c and c in values for c in cands)

    @staticmethod
    def _labels(values: list[str], attrs: Mapping[str, str]) -> bool:
        for v in values:
            key, eq, want = v.partition("=")
            if key not in attrs or (eq and attrs[key] != want):
                return False
        return True


def _strip_tag(ref: str) -> str:
    if "@" in ref:
        return ref.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return ref[:colon] if colon > slash else ref
