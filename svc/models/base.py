"""The base of every wire model: Docker's field names, unknown fields ignored (open schema),
and field names matched the way the reference engine's Go decoder matches them.

Go's ``encoding/json`` takes each key of an object in document order and looks for the
struct field of exactly that name; failing that, for the first field (in declaration order)
whose name is equal under Unicode case folding. A later key for the same field overwrites the
earlier value, except that an object decoded into a struct (or pointer to one) or a map that
already holds one is decoded *into* it: a struct's fields merge, the later key winning inside;
a map keeps the earlier keys and takes the later values. Clients rely on the folding:
docker-py sends ``HostConfig.CpuSetCpus`` for ``CpusetCpus``, the SDK sends exec's
``detachKeys``. ``WireModel`` renames the keys of its input to its field names by those rules
before pydantic sees them; nested models are WireModels too, so every level is folded, while
the keys of map-typed fields (``Labels``, ``LogConfig.Config``, ``dict[str, Any]``) are data
and stay as sent.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator


class RepeatedKeys(dict[str, Any]):
    """A JSON object in which a key occurs more than once (``svc.wire.jsondoc`` makes one):
    as a dict, the last value of each key (what a Go map decodes to); ``pairs`` keeps every
    key in document order, for a WireModel to decode as Go decodes a struct."""

    def __init__(self, pairs: Iterable[tuple[str, Any]]) -> None:
        self.pairs = list(pairs)
        super().__init__(self.pairs)


def fold(name: str) -> str:
    """The key under which Go compares names case-insensitively: each rune upper(lower(r))
    by its simple (one-rune) case mapping, so the Kelvin sign folds to K and ``ſ`` to S."""
    if name.isascii():
        return name.upper()
    return "".join(_fold_rune(r) for r in name)


def _fold_rune(r: str) -> str:
    lower = r.lower()
    if len(lower) != 1:  # a full (multi-rune) mapping: Go's simple mapping leaves it alone
        lower = r
    upper = lower.upper()
    return upper if len(upper) == 1 else lower


class Kind(Enum):
    """What a second object for the same field does: merge into a struct, add to a map, or
    replace (any other type)."""

    STRUCT = "struct"
    MAP = "map"
    VALUE = "value"


def _kind(annotation: Any) -> Kind:
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) \
        else (annotation,)
    for t in members:
        if isinstance(t, type) and issubclass(t, BaseModel):
            return Kind.STRUCT
        if t is dict or get_origin(t) is dict:
            return Kind.MAP
    return Kind.VALUE


@dataclass(frozen=True)
class Fields:
    """A model's fields as Go's decoder looks them up."""

    exact: frozenset[str]  # wire names: the alias, else the name
    folded: dict[str, str]  # folded name -> the first field (declaration order) folding to it
    kinds: dict[str, Kind]  # wire name -> kind
    # wire names of fields that cannot hold null: Go leaves such a field as it was when the
    # body says null (``"Memory": null``), so the key is dropped
    not_null: frozenset[str] = frozenset()


@cache
def fields_of(model: type[BaseModel]) -> Fields:
    """``model``'s fields, computed once per class."""
    folded: dict[str, str] = {}
    kinds: dict[str, Kind] = {}
    not_null: set[str] = set()
    for name, info in model.model_fields.items():
        wire = info.alias or name
        kinds[wire] = _kind(info.annotation)
        folded.setdefault(fold(wire), wire)
        if not _admits_none(info.annotation):
            not_null.add(wire)
    return Fields(frozenset(kinds), folded, kinds, frozenset(not_null))


def _admits_none(annotation: Any) -> bool:
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    return get_origin(annotation) in (Union, types.UnionType) and \
        type(None) in get_args(annotation)


def _pairs(obj: dict[str, Any]) -> list[tuple[str, Any]]:
    return obj.pairs if isinstance(obj, RepeatedKeys) else list(obj.items())


def _again(kind: Kind, old: Any, new: Any) -> Any:
    """The value of a field that an earlier key already set, when a later key sets it too."""
    if not (isinstance(old, dict) and isinstance(new, dict)) or kind is Kind.VALUE:
        return new
    if kind is Kind.MAP:
        return {**old, **new}
    return RepeatedKeys(_pairs(old) + _pairs(new))  # the nested model folds the whole


def fold_keys(data: dict[str, Any], fields: Fields) -> dict[str, Any]:
    """``data`` with each key renamed to the field it decodes into (exact name first, else
    the first field equal under folding; unknown keys kept, to be ignored); keys that reach
    the same field: the last wins, except that objects for a struct or a map merge; null for
    a field that cannot hold it is dropped, as Go leaves such a field alone."""
    if not isinstance(data, RepeatedKeys) and all(
            key in fields.exact and (value is not None or key not in fields.not_null)
            for key, value in data.items()):
        return data  # the common case: nothing to rename, drop or merge
    out: dict[str, Any] = {}
    for key, value in _pairs(data):
        target = key if key in fields.exact else fields.folded.get(fold(key), key)
        if value is None and target in fields.not_null:
            continue  # Go leaves a non-pointer field as it was

        if target in out:
            value = _again(fields.kinds.get(target, Kind.VALUE), out[target], value)
        out[target] = value
    return out


class WireModel(BaseModel):
    """Request bodies ignore unknown fields and match names case-insensitively; responses
    serialize by alias and keep nulls."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _go_field_names(cls, data: Any) -> Any:
        """Keys renamed to field names as Go's decoder matches them (see the module)."""
        if not isinstance(data, dict):
            return data
        return fold_keys(data, fields_of(cls))

    def wire(self) -> bytes:
        """The JSON body as dockerd writes it: by alias, terminated by a newline."""
        return self.model_dump_json(by_alias=True).encode() + b"\n"
