"""Docker image manifest schema 1: parsing and the image config the engines derive from it.

A schema 1 manifest lists ``fsLayers`` (``blobSum`` digests) and ``history`` entries
(``v1Compatibility``: the JSON of a v1 image) side by side, *newest first*. The signed form
(``+prettyjws``) embeds a JWS ``signatures`` array; its digest is that of the *canonical*
payload (the document without the signatures, rebuilt from the protected header's
``formatLength``/``formatTail``), which is what registries report.

This module checks and orders the layers as moby's puller did (``fixManifestLayers``: v1 ids
valid, each entry's parent the next one, consecutive duplicates dropped, no other repeats),
and builds the image config (``MakeConfigFromV1Config``) once the caller has the diff ids of
the downloaded layers: the newest v1 document without ``id``, ``parent``, ``Size``,
``parent_id``, ``layer_id`` and ``throwaway``, plus ``rootfs`` and ``history``, keys sorted and
values compacted as Go's ``json.Marshal`` writes them (so the image id comes out the same).
Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from svc.registry import digests
from svc.registry.errors import InvalidManifest

_ID_RE = re.compile(r"[a-f0-9]{64}")
_WS = " \t\n\r"
_DROPPED = ("id", "parent", "Size", "parent_id", "layer_id", "throwaway")
_TIME_RE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


class FSLayer(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    blob_sum: str = Field(alias="blobSum")


class V1History(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    v1_compatibility: str = Field(alias="v1Compatibility")


class Schema1Manifest(BaseModel):
    """The fields of a schema 1 manifest (signatures are checked for form only)."""

    model_config = ConfigDict(populate_by_name=True)
    schema_version: Literal[1] = Field(alias="schemaVersion")
    name: str = ""
    tag: str = ""
    architecture: str = ""
    fs_layers: list[FSLayer] = Field(alias="fsLayers")
    history: list[V1History]


@dataclass(frozen=True)
class Schema1Layer:
    """One layer in application order: its blob, its v1 document, and whether it is empty
    (``throwaway``: a metadata step, nothing to download)."""

    blob_sum: str
    v1_compatibility: str
    v1: dict[str, Any]
    throwaway: bool


def parse(raw: bytes) -> Schema1Manifest:
    """Parse a schema 1 document (signed or not).

    Raises:
        InvalidManifest: not JSON, or not the schema 1 shape.
    """
    try:
        return Schema1Manifest.model_validate_json(raw)
    except ValidationError as exc:
        raise InvalidManifest(f"invalid schema 1 manifest: {exc.errors()[0]['msg']}") from None


def canonical_payload(raw: bytes) -> bytes:
    """The signed payload of a ``prettyjws`` manifest (``raw`` itself when unsigned).

    Raises:
        InvalidManifest: the signatures' protected headers are missing or disagree.
    """
    try:
        doc = json.loads(raw)
        signatures = doc.get("signatures") if isinstance(doc, dict) else None
        if not signatures:
            return raw
        payloads = set()
        for signature in signatures:
            protected = json.loads(_b64url(signature["protected"]))
            length = protected["formatLength"]
            if not isinstance(length, int) or not 0 < length <= len(raw):
                raise ValueError("formatLength out of range")
            payloads.add(raw[:length] + _b64url(protected["formatTail"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidManifest(f"invalid schema 1 signature: {exc}") from None
    if len(payloads) != 1:
        raise InvalidManifest("schema 1 signatures sign different payloads")
    return payloads.pop()


def digest(raw: bytes) -> str:
    """The digest a registry gives this schema 1 manifest (of its canonical payload)."""
    return digests.of(canonical_payload(raw))


def layers(manifest: Schema1Manifest) -> list[Schema1Layer]:
    """The layers in application order (base first), checked and de-duplicated.

    Raises:
        InvalidManifest: no layers, lists of different lengths, a v1 document that is not a
            JSON object or has an invalid id, a broken parent chain, or a repeated id.
    """
    if not manifest.fs_layers or len(manifest.fs_layers) != len(manifest.history):
        raise InvalidManifest("schema 1 manifest: fsLayers and history do not match")
    entries = []
    for fs, hist in zip(manifest.fs_layers, manifest.history, strict=True):
        try:
            v1 = json.loads(hist.v1_compatibility)
        except ValueError:
            v1 = None
        if not isinstance(v1, dict):
            raise InvalidManifest("schema 1 manifest: v1Compatibility is not a JSON object")
        v1_id = v1.get("id")
        if not isinstance(v1_id, str) or not _ID_RE.fullmatch(v1_id):
            raise InvalidManifest(f"schema 1 manifest: invalid v1 id {v1_id!r}")
        digests.check(fs.blob_sum)
        entries.append(Schema1Layer(fs.blob_sum, hist.v1_compatibility, v1,
                                    v1.get("throwaway") is True))
    if entries[-1].v1.get("parent"):
        raise InvalidManifest("Invalid parent ID in the base layer of the image.")
    seen: set[str] = set()
    last = ""
    for entry in entries:
        if entry.v1["id"] != last and entry.v1["id"] in seen:
            raise InvalidManifest(f"ID {entry.v1['id']} appears multiple times in manifest")
        last = entry.v1["id"]
        seen.add(last)
    kept = [entries[-1]]
    for entry in reversed(entries[:-1]):
        if entry.v1["id"] == kept[-1].v1["id"]:
            continue
        if entry.v1.get("parent") != kept[-1].v1["id"]:
            raise InvalidManifest(f"Invalid parent ID. Expected {kept[-1].v1['id']}, "
                                  f"got {entry.v1.get('parent')}.")
        kept.append(entry)
    return kept


def history(layers: list[Schema1Layer]) -> list[dict[str, Any]]:
    """The image config's ``history`` (base first), as moby's ``HistoryFromConfig``."""
    out = []
    for layer in layers:
        v1 = layer.v1
        container_config = _field(v1, "container_config")
        cmd = _field(container_config, "Cmd") if isinstance(container_config, dict) else None
        if isinstance(cmd, str):
            cmd = [cmd]
        created_by = " ".join(c for c in cmd if isinstance(c, str)) \
            if isinstance(cmd, list) else ""
        entry: dict[str, Any] = {"created": _go_time(_field(v1, "created"))}
        for key, value in (("author", _field(v1, "author")), ("created_by", created_by),
                           ("comment", _field(v1, "comment")),
                           ("empty_layer", layer.throwaway)):
            if value:
                entry[key] = value
        out.append(entry)
    return out


def image_config(layers: list[Schema1Layer], diff_ids: list[str]) -> bytes:
    """The image config bytes for these layers; ``diff_ids`` are the uncompressed digests of
    the non-empty layers, base first. The image id is the sha256 of the result.

    Raises:
        InvalidManifest: the number of diff ids is not the number of non-empty layers.
    """
    if len(diff_ids) != sum(1 for layer in layers if not layer.throwaway):
        raise InvalidManifest("schema 1 manifest: diff ids do not match the layers")
    members = _raw_members(layers[-1].v1_compatibility)
    for key in _DROPPED:
        members.pop(key, None)
    members["rootfs"] = _go_json({"type": "layers", "diff_ids": diff_ids})
    members["history"] = _go_json(history(layers))
    body = ",".join(f"{_go_json(key)}:{members[key]}" for key in sorted(members))
    return ("{" + body + "}").encode()


def _field(doc: dict[str, Any], name: str) -> Any:
    """A field read the way Go fills a struct: exact name, else case-insensitively."""
    if name in doc:
        return doc[name]
    return next((v for k, v in doc.items() if k.lower() == name.lower()), None)


def _go_time(value: Any) -> str:
    """An RFC 3339 time as Go re-marshals it (fraction without trailing zeros)."""
    match = _TIME_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return "0001-01-01T00:00:00Z"
    fraction = (match[2] or "")[:9].rstrip("0")
    return match[1] + (f".{fraction}" if fraction else "") + match[3]


def _go_json(value: Any) -> str:
    """JSON as Go's ``json.Marshal`` writes it: compact, HTML characters escaped."""
    return _escape_html(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _escape_html(text: str) -> str:
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def _raw_members(text: str) -> dict[str, str]:
    """The members of a JSON object as compacted raw text (Go's ``map[string]RawMessage``):
    values keep their spelling (number forms, string escapes), insignificant whitespace
    goes, HTML characters are escaped. The last of repeated keys wins."""
    decoder = json.JSONDecoder()
    members: dict[str, str] = {}
    pos = _skip(text, 0)
    if text[pos:pos + 1] != "{":
        raise InvalidManifest("schema 1 manifest: v1Compatibility is not a JSON object")
    pos = _skip(text, pos + 1)
    while text[pos:pos + 1] == '"':
        key, pos = scanstring(text, pos + 1)
        pos = _skip(text, pos)
        pos = _skip(text, pos + 1)  # the ':'
        _, end = decoder.raw_decode(text, pos)
        members[key] = _compact(text[pos:end])
        pos = _skip(text, end)
        if text[pos:pos + 1] == ",":
            pos = _skip(text, pos + 1)
    return members


def _compact(raw: str) -> str:
    out, in_string, escaped = [], False, False
    for char in raw:
        if in_string:
            out.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char not in _WS:
            out.append(char)
            in_string = char == '"'
    return _escape_html("".join(out))


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _b64url(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
