from __future__ import annotations

import pytest

from svc.api.versioning import parse_version, resolve
from svc.errors import InvalidParameter


def test_resolve() -> None:
    assert resolve(None) == (1, 23)
    assert resolve("1.14") == (1, 14)
    assert resolve("1.23") == (1, 23)


def test_bounds() -> None:
    with pytest.raises(InvalidParameter, match="1.24 is too new.*is 1.23"):
        resolve("1.24")
    with pytest.raises(InvalidParameter, match="1.13 is too old.*is 1.14"):
        resolve("1.13")
    with pytest.raises(InvalidParameter, match="too new"):
        resolve("2.0")


@pytest.mark.parametrize("raw", ["1", "1.", "1.x", "a.b", "1.2.3", ""])
def test_malformed(raw: str) -> None:
    with pytest.raises(InvalidParameter, match="malformed API version"):
        parse_version(raw)
