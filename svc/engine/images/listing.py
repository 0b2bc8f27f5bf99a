"""What ``docker images`` and ``docker history`` show of the image service's state."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from svc.engine.images.service import Image, ImageService
from svc.errors import InvalidParameter
from svc.models.imageconfig import HistoryItem
from svc.wire.timefmt import parse_timestamp_ns


def summaries(svc: ImageService, *, all_images: bool, filters: Mapping[str, list[str]],
              name_pattern: str | None) -> list[Image]:
    """The images ``docker images`` lists, newest first, filtered as the API asks."""
    dangling = filters.get("dangling")
    want_dangling: bool | None = None
    if dangling:
        values = {v.lower() for v in dangling}
        if not values <= {"true", "false", "1", "0"} or len(values) > 1:
            raise InvalidParameter(f"Invalid filter 'dangling={dangling[0]}'")
        want_dangling = values <= {"true", "1"}
    out = []
    for img in sorted(svc.images.values(), key=lambda i: -i.created_ns):
        tags = svc.refs_of(img.id)
        has_children = bool(svc.children(img.id))
        if want_dangling is True:
            if tags or has_children:
                continue
        elif want_dangling is False and not tags:
            continue
        elif not all_images and not tags and has_children:
            continue  # an intermediate image
        if not _labels_match(filters.get("label", []), img.config.run.Labels):
            continue
        if name_pattern and not any(name_matches(name_pattern, t) for t in tags):
            continue
        out.append(img)
    return out


def history(svc: ImageService, image: Image) -> list[dict[str, Any]]:
    """Newest first; entries of images in the parent chain carry their id and tags."""
    hist = image.config.entries
    sizes = svc.layer_sizes(image)
    if not hist:
        hist = [HistoryItem(created=image.config.created) for _ in image.chain]
    entries, layer = [], 0
    for h in hist:
        size = 0 if h.empty_layer or layer >= len(sizes) else sizes[layer]
        layer += 0 if h.empty_layer else 1
        try:
            created = parse_timestamp_ns(h.created or "0") // 10**9
        except ValueError:
            created = 0
        entries.append({"Id": "<missing>", "Created": created,
                        "CreatedBy": h.created_by, "Tags": None,
                        "Size": size, "Comment": h.comment})
    entries.reverse()
    img: Image | None = image
    while img is not None:
        n = len(img.config.entries) or len(img.chain)
        idx = len(entries) - n
        if 0 <= idx < len(entries):
            entries[idx]["Id"] = img.id
            entries[idx]["Tags"] = svc.repo_tags(img.id) or None
        img = svc.images.get(img.parent) if img.parent else None
    return entries


def _labels_match(wanted: list[str], labels: object) -> bool:
    have = labels if isinstance(labels, dict) else {}
    for w in wanted:
        key, eq, value = w.partition("=")
        if key not in have or (eq and have[key] != value):
            return False
    return True


def name_matches(pattern: str, ref: str) -> bool:
    """The old ``filter=`` parameter (the CLI sends it below API 1.25 for ``docker images
    REPO``): a glob over the repository (or repository:tag)."""
    if "@" in ref:
        return False
    repo, _, _tag = ref.rpartition(":")
    tagged = ":" in pattern.rpartition("/")[2]  # a registry's port is not a tag
    return fnmatch.fnmatchcase(ref if tagged else repo, pattern)
