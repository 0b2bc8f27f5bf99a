"""``GET /containers/json``: which containers, in which order (dockerd's ``reduceContainers``).

Newest first. Without ``all`` only running ones (paused and restarting included); ``limit``,
``since``, ``before`` and a ``status`` filter imply ``all``. Filters: ``id`` (prefix), ``name``
(regular expression on the name), ``label`` (key or key=value), ``status``, ``exited`` (exit
code of exited containers), ``ancestor`` (an image, by any of its names, or any descendant),
``volume`` (a mount's source or destination), ``network`` (its NetworkMode's network).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from svc.engine.containers.container import Container
from svc.engine.containers.state import State
from svc.engine.images.service import ImageService
from svc.errors import InvalidParameter, NotFound

FILTERS = ("id", "name", "label", "status", "exited", "ancestor", "volume", "network",
           "before", "since")
STATUSES = tuple(s.value for s in State if s is not State.REMOVING)


def _labels_ok(c: Container, wanted: list[str]) -> bool:
    labels = c.config.Labels or {}
    for w in wanted:
        key, eq, value = w.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


def _ancestors(images: ImageService, refs: list[str]) -> set[str]:
    """Image ids matching ``refs`` and every image descending from them."""
    roots = set()
    for ref in refs:
        try:
            roots.add(images.resolve(ref).id)
        except (NotFound, InvalidParameter):
            continue
    found = set(roots)
    frontier = list(roots)
    while frontier:
        for child in images.children(frontier.pop()):
            if child.id not in found:
                found.add(child.id)
                frontier.append(child.id)
    return found


def select(containers: Iterable[Container], images: ImageService,
           resolve: Callable[[str], Container],
           *, all_: bool, limit: int | None, since: str | None, before: str | None,
           filters: Mapping[str, list[str]],
           networks_of: Callable[[Container], set[str]] | None = None) -> list[Container]:
    for status in filters.get("status", []):
        if status not in STATUSES:
            raise InvalidParameter(f"Unrecognised filter value for status: {status}")
    exited_codes = set()
    for code in filters.get("exited", []):
        try:
            exited_codes.add(int(code))
        except ValueError:
            raise InvalidParameter(f"invalid exited filter value {code!r}: an exit code "
                                   "(integer)") from None
    name_res = []
    for pattern in filters.get("name", []):
        try:
            name_res.append(re.compile(pattern))
        except re.error as exc:
            raise InvalidParameter(f"invalid name filter {pattern!r}: {exc}") from None
    since = since or next(iter(filters.get("since") or []), None)
    before = before or next(iter(filters.get("before") or []), None)
    since_c = resolve(since) if since else None
    before_c = resolve(before) if before else None
    ancestors = _ancestors(images, filters["ancestor"]) if "ancestor" in filters else None
    show_all = all_ or bool(limit and limit > 0) or bool(since_c) or bool(before_c) or \
        "status" in filters or "exited" in filters
    out = []
    for c in sorted(containers, key=lambda c: c.created_ns, reverse=True):
        st = c.state.status
        if st is State.REMOVING:
            continue
        if not show_all and st not in (State.RUNNING, State.PAUSED, State.RESTARTING):
            continue
        if since_c is not None and c.created_ns <= since_c.created_ns:
            continue
        if before_c is not None and c.created_ns >= before_c.created_ns:
            continue
        if "id" in filters and not any(c.id.startswith(x) for x in filters["id"]):
            continue
        if name_res and not any(r.search(c.bare_name) or r.search(c.name) for r in name_res):
            continue
        if "label" in filters and not _labels_ok(c, filters["label"]):
            continue
        if "status" in filters and st.value not in filters["status"]:
            continue
        if exited_codes and (st is not State.EXITED or c.state.exit_code not in exited_codes):
            continue
        if ancestors is not None and c.image_id not in ancestors:
            continue
        if "volume" in filters and not _has_volume(c, filters["volume"]):
            continue
        if "network" in filters and not (
                (networks_of(c) if networks_of is not None else {_network(c)})
                & set(filters["network"])):
            continue
        out.append(c)
        if limit and limit > 0 and len(out) >= limit:
            break
    return out


def _has_volume(c: Container, wanted: list[str]) -> bool:
    """A mount point whose volume name, host source or destination is wanted."""
    return any(m.Name in wanted or m.Source in wanted or m.Destination in wanted
               for m in c.mounts)


def _network(c: Container) -> str:
    mode = c.host_config.NetworkMode or "default"
    return "bridge" if mode == "default" else mode
