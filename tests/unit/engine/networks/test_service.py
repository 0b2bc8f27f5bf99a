"""NetworkService's checks of the daemon's bridge flags."""

from __future__ import annotations

import pytest

from svc.engine.events import EventBus
from svc.engine.networks.service import NetworkService
from svc.errors import InvalidParameter


@pytest.mark.parametrize("name", ["none", "", "a-name-of-16-chr"])
def test_a_bridge_name_svc_cannot_use_is_refused(name: str) -> None:
    with pytest.raises(InvalidParameter, match="--bridge"):
        NetworkService(EventBus(), name, "172.17.0.1/16")
