"""DELETE /images/{name}: untag and delete, with dockerd 1.10's conflict rules.

By name (``repo:tag``): that name is removed; if it was the last name, the image is deleted
too when nothing depends on it. By id: all names are removed and the image is deleted; names
in several repositories need ``force``. Dependent child images always block deletion; a
container using the image blocks it unless forced (a running one always). Untagged parents
are pruned unless ``noprune``.
"""

from __future__ import annotations

from svc.engine.images.service import Image, ImageService
from svc.errors import Conflict


def _is_id_prefix(name: str, image: Image) -> bool:
    return image.id.removeprefix("sha256:").startswith(name.removeprefix("sha256:"))


def _repo_of(key: str) -> str:
    return key.split("@", 1)[0] if "@" in key else key.rsplit(":", 1)[0]


async def remove_image(svc: ImageService, name: str, *, force: bool,
                       noprune: bool) -> list[dict[str, str]]:
    async with svc.lock:
        image = svc.resolve(name)
        if not _is_id_prefix(name, image):
            return await _remove_by_name(svc, image, name, force=force, noprune=noprune)
        return await _remove_by_id(svc, image, force=force, noprune=noprune)


async def _remove_by_name(svc: ImageService, image: Image, name: str, *, force: bool,
                          noprune: bool) -> list[dict[str, str]]:
    ref, _ = svc.lookup_ref(name)
    key = ref.familiar_string()
    use = svc.container_use(image.id)
    if use is not None and len(svc.refs_of(image.id)) == 1 and not force:
        raise Conflict(f'conflict: unable to remove repository reference "{key}" (must force) '
                       f"- container {use[0][:12]} is using its referenced image {image.short}")
    untagged = [key]
    svc.forget_ref(key)
    # A removed tag takes the digest names of its repository along when only digest names
    # are left in that repository (dockerd does).
    same_repo = [r for r in svc.refs_of(image.id) if _repo_of(r) == ref.familiar_name]
    if same_repo and all("@" in r for r in same_repo):
        for r in same_repo:
            svc.forget_ref(r)
            untagged.append(r)
    keep = bool(svc.refs_of(image.id) or svc.children(image.id) or use is not None)
    return await _commit(svc, image, untagged, delete=not keep, noprune=noprune)


async def _remove_by_id(svc: ImageService, image: Image, *, force: bool,
                        noprune: bool) -> list[dict[str, str]]:
    refs = svc.refs_of(image.id)
    if len({_repo_of(r) for r in refs}) > 1 and not force:
        raise Conflict(f"conflict: unable to delete {image.short} (must be forced) - image is "
                       "referenced in multiple repositories")
    if svc.children(image.id):
        raise Conflict(f"conflict: unable to delete {image.short} (cannot be forced) - image "
                       "has dependent child images")
    use = svc.container_use(image.id)
    if use is not None and (use[1] or not force):
        how = "cannot be forced" if use[1] else "must be forced"
        state = "running" if use[1] else "stopped"
        raise Conflict(f"conflict: unable to delete {image.short} ({how}) - image is being "
                       f"used by {state} container {use[0][:12]}")
    for r in refs:
        svc.forget_ref(r)
    return await _commit(svc, image, refs, delete=True, noprune=noprune)


async def _commit(svc: ImageService, image: Image, untagged: list[str], *, delete: bool,
                  noprune: bool) -> list[dict[str, str]]:
    """The names and (``delete``) the image gone in one durable step; then the untagged
    parents nothing else holds, unless ``noprune``."""
    report = [{"Untagged": r} for r in untagged]
    report += await svc.remove(image, untagged, delete=delete)
    if not delete:
        return report
    parent = svc.images.get(image.parent) if image.parent else None
    while (not noprune and parent is not None and not svc.refs_of(parent.id)
           and not svc.children(parent.id) and svc.container_use(parent.id) is None):
        report += await svc.delete_image(parent)
        parent = svc.images.get(parent.parent) if parent.parent else None
    return report
