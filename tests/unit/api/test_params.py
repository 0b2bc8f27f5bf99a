from __future__ import annotations

import pytest

from svc.api.params import parse_bool, parse_filters, parse_int, parse_json_body
from svc.errors import InvalidParameter
from svc.models.base import WireModel


@pytest.mark.parametrize("raw", ["1", "True", "true"])
def test_true(raw: str) -> None:
    assert parse_bool("x", raw) is True


@pytest.mark.parametrize("raw", ["0", "False", "false"])
def test_false(raw: str) -> None:
    assert parse_bool("x", raw, default=True) is False


def test_absent_and_empty_take_the_default() -> None:
    assert parse_bool("x", None, True) is True
    assert parse_bool("x", "", False) is False


@pytest.mark.parametrize("raw", ["yes", "no", "TRUE", "2", " 1"])
def test_bad_bool_names_parameter(raw: str) -> None:
    with pytest.raises(InvalidParameter, match="'stream'"):
        parse_bool("stream", raw)


def test_int() -> None:
    assert parse_int("t", "10") == 10
    assert parse_int("t", None, 3) == 3
    with pytest.raises(InvalidParameter, match="'t'"):
        parse_int("t", "ten")


def test_filters_forms() -> None:
    assert parse_filters(None) == {}
    assert parse_filters("") == {}
    assert parse_filters('{"a": ["1", "2"]}') == {"a": ["1", "2"]}
    assert parse_filters('{"a": {"1": true, "2": false}}') == {"a": ["1"]}
    assert parse_filters('{"a": []}') == {"a": []}


@pytest.mark.parametrize("raw", ["nope", "[]", '"a"', '{"a": "b"}', '{"a": [1]}',
                                 '{"a": {"b": "yes"}}', "{"])
def test_malformed_filters(raw: str) -> None:
    with pytest.raises(InvalidParameter, match="invalid filters parameter"):
        parse_filters(raw)


def test_filter_keys_checked() -> None:
    assert parse_filters('{"label": ["a"]}', {"label"}) == {"label": ["a"]}
    with pytest.raises(InvalidParameter, match="Invalid filter 'bogus'"):
        parse_filters('{"bogus": ["a"]}', {"label"})


class Body(WireModel):
    Name: str
    Size: int = 0


def test_json_body() -> None:
    m = parse_json_body(Body, b'{"Name": "a", "Extra": [1]}', "application/json; charset=utf-8")
    assert m is not None and m.Name == "a" and m.Size == 0
    assert parse_json_body(Body, b"", None, required=False) is None
    assert parse_json_body(Body, b"  \n", "application/json", required=False) is None


def test_json_body_errors() -> None:
    with pytest.raises(InvalidParameter, match=r"Content-Type specified \(text/plain\)"):
        parse_json_body(Body, b'{"Name": "a"}', "text/plain")
    with pytest.raises(InvalidParameter, match="invalid JSON body"):
        parse_json_body(Body, b"{", "application/json")
    with pytest.raises(InvalidParameter, match="Size"):
        parse_json_body(Body, b'{"Name": "a", "Size": "big"}', "application/json")
    with pytest.raises(InvalidParameter, match="required"):
        parse_json_body(Body, b"", "application/json")
