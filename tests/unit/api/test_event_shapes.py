"""The hand-laid event dicts agree byte for byte with the pydantic models of the wire shapes."""

from __future__ import annotations

import time

import pytest

from svc.api.routes.events import encode
from svc.engine.events import Event
from svc.models.events import EventMessage, LegacyEventMessage

EVENTS = [
    Event("container", "die", "c" * 64, {"image": "busybox", "name": "x", "exitCode": "3"},
          time.time_ns()),
    Event("container", "create", "c" * 64, {"name": "noimage"}, time.time_ns()),
    Event("image", "tag", "sha256:" + "a" * 64, {"name": "busybox:1"}, time.time_ns()),
    Event("network", "connect", "n" * 64, {"container": "c", "type": "bridge"}, time.time_ns()),
    Event("volume", "create", "data", {"driver": "local"}, time.time_ns()),
]


@pytest.mark.parametrize("ev", EVENTS, ids=lambda e: f"{e.type}-{e.action}")
def test_v122_matches_model(ev: Event) -> None:
    data = encode(ev, "v122")
    model = EventMessage.model_validate_json(data)
    assert model.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n" == data
    assert model.time == ev.time and model.timeNano == ev.time_nano


@pytest.mark.parametrize("shape", ["v121", "legacy"])
@pytest.mark.parametrize("ev", EVENTS[:3], ids=lambda e: f"{e.type}-{e.action}")
def test_legacy_matches_model(ev: Event, shape: str) -> None:
    data = encode(ev, shape)
    model = LegacyEventMessage.model_validate_json(data)
    assert model.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n" == data
    assert (model.timeNano is None) == (shape == "legacy")


def test_encoding_is_cached_per_shape() -> None:
    ev = Event("container", "start", "x", {}, time.time_ns())
    assert encode(ev, "v122") is encode(ev, "v122")
    assert encode(ev, "legacy") != encode(ev, "v122")
