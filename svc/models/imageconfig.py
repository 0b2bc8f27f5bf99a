"""The image config document, typed: the JSON whose sha256 is an image's id.

An image carries two container configurations (``config``: what a container of it runs;
``container_config``: what made it), a history and its layers' diff ids. These records give
them the fields of moby's ``image.Image`` and ``container.Config`` of this API generation,
so that the engine reads ``image.config.run.Env`` rather than digging through dicts.

Fields newer engines added (``Healthcheck``, ``Shell``, ``ArgsEscaped``, ``os.version``...)
are kept as they came (``extra="allow"``): a build or commit on top of a newer image passes
them on, and inspect shows them. ``encode`` writes what dockerd writes: the document's keys
sorted (dockerd marshals it through a map), a container configuration's fields in
``container.Config``'s order, and the fields dockerd marks ``omitempty`` only when set.
The bytes of a stored config are never re-encoded: an image's id stays the hash of the
document as it was pulled, loaded or made.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ConfigDict, ValidationError

from svc.errors import InvalidParameter
from svc.models.base import WireModel
from svc.models.containers import ContainerConfig

# container.Config fields tagged ``omitempty`` in dockerd 1.10
_RUN_OMIT_EMPTY = frozenset({"ExposedPorts", "NetworkDisabled", "MacAddress", "StopSignal"})
# image.Image fields that are always written (``created`` is a time, never omitted)
_DOC_ALWAYS = frozenset({"created"})
_HISTORY_ALWAYS = frozenset({"created"})


def _empty(value: Any) -> bool:
    """Go's ``omitempty``: false, 0, "", null, and empty lists and maps."""
    return value is None or value is False or value == 0 or value in ("", [], {})


class RunConfig(ContainerConfig):
    """A container configuration as an image records it (``config``, ``container_config``)."""

    model_config = ConfigDict(extra="allow")

    def doc(self) -> dict[str, Any]:
        """The configuration as dockerd writes it: every field in declaration order, the
        ``omitempty`` ones only when set, then fields of later engines as they came."""
        data = self.model_dump()
        return {k: v for k, v in data.items() if not (k in _RUN_OMIT_EMPTY and _empty(v))}

    def comparable(self) -> str:
        """A canonical form for the build cache's equality: empty values are one value
        (``null``, ``[]``, ``{}``, ``""`` and false compare equal, as engines' compare did)."""
        norm = {k: v for k, v in self.model_dump().items() if not _empty(v)}
        return json.dumps(norm, sort_keys=True)


class HistoryItem(WireModel):
    """One entry of an image's history (one per build step, layer or not)."""

    model_config = ConfigDict(extra="allow")

    created: str = ""
    author: str = ""
    created_by: str = ""
    comment: str = ""
    empty_layer: bool = False

    def doc(self) -> dict[str, Any]:
        data = self.model_dump()
        return {k: v for k, v in data.items()
                if k in _HISTORY_ALWAYS or k in (self.model_extra or {}) or not _empty(v)}


class RootFSConfig(WireModel):
    model_config = ConfigDict(extra="allow")

    type: str = ""
    diff_ids: list[str] | None = None


class ImageConfig(WireModel):
    """An image config document (moby ``image.Image``)."""

    model_config = ConfigDict(extra="allow")

    architecture: str = ""
    author: str = ""
    comment: str = ""
    config: RunConfig | None = None
    container: str = ""
    container_config: RunConfig | None = None
    created: str = ""
    docker_version: str = ""
    history: list[HistoryItem] | None = None
    os: str = ""
    parent: str = ""
    rootfs: RootFSConfig | None = None

    @classmethod
    def parse(cls, raw: bytes | str) -> ImageConfig:
        """The document of ``raw``; a 400 that names what is wrong when it is not one."""
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidParameter(f"invalid image config: not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise InvalidParameter("invalid image config: not a JSON object")
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise InvalidParameter(f"invalid image config: {where}: {err['msg']}") from None

    @property
    def run(self) -> RunConfig:
        """What a container of this image runs (an empty configuration if none)."""
        return self.config if self.config is not None else RunConfig()

    @property
    def diff_ids(self) -> list[str]:
        return list(self.rootfs.diff_ids or []) if self.rootfs is not None else []

    @property
    def entries(self) -> list[HistoryItem]:
        return list(self.history or [])

    def check_rootfs(self) -> list[str]:
        """The layers' diff ids; a 400 unless the rootfs is of type layers with digests."""
        if self.rootfs is None or self.rootfs.type != "layers":
            raise InvalidParameter("invalid image config: rootfs must be of type layers")
        ids = self.diff_ids
        if not all(i.startswith("sha256:") for i in ids):
            raise InvalidParameter("invalid image config: rootfs.diff_ids must be sha256 "
                                   "digests")
        return ids

    def doc(self) -> dict[str, Any]:
        """The document as dockerd writes it (keys sorted, ``omitempty`` fields left out)."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, (RunConfig, HistoryItem)):
                value = value.doc()
            elif isinstance(value, RootFSConfig):
                value = value.model_dump()
            elif isinstance(value, list):
                value = [v.doc() for v in value]
            if name in _DOC_ALWAYS or not _empty(value):
                out[name] = value
        out.update(self.model_extra or {})
        return dict(sorted(out.items()))

    def encode(self) -> bytes:
        """The compact bytes whose sha256 is the id of an image made from this document."""
        return json.dumps(self.doc(), separators=(",", ":")).encode()


def parse_lenient(raw: bytes | str) -> tuple[ImageConfig, list[str]]:
    """The document of a config already stored: a field of a type this generation does not
    know is left out (and named in the list returned) rather than losing the image; the
    stored bytes, and so the id, stay as they were."""
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    dropped: list[str] = []
    for _ in range(64):
        try:
            return ImageConfig.model_validate(value), dropped
        except ValidationError as exc:
            loc = exc.errors()[0]["loc"]
            if not _drop(value, loc):
                raise ValueError(f"{'.'.join(map(str, loc))}: {exc.errors()[0]['msg']}") \
                    from None
            dropped.append(".".join(map(str, loc)))
    raise ValueError("too many fields of unknown types")


def _drop(doc: Any, loc: tuple[int | str, ...]) -> bool:
    """Remove the value at ``loc`` (as pydantic names it; keys may differ in case)."""
    for depth in range(len(loc), 0, -1):
        parent, key = _walk(doc, loc[:depth - 1]), loc[depth - 1]
        if isinstance(parent, dict):
            match = next((k for k in parent if k.lower() == str(key).lower()), None)
            if match is not None:
                del parent[match]
                return True
        elif isinstance(parent, list) and isinstance(key, int) and key < len(parent):
            del parent[key]
            return True
    return False


def _walk(doc: Any, path: tuple[int | str, ...]) -> Any:
    for key in path:
        if isinstance(doc, dict):
            doc = next((v for k, v in doc.items() if k.lower() == str(key).lower()), None)
        elif isinstance(doc, list) and isinstance(key, int) and key < len(doc):
            doc = doc[key]
        else:
            return None
    return doc
