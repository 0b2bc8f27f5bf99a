"""``User`` and ``GroupAdd`` resolved in the container's own /etc/passwd and /etc/group.

As runc/libcontainer's ``user.GetExecUser`` does: ``name``, ``uid``, ``name:group``,
``uid:gid`` (numbers need no entry; names must exist); the primary group defaults to the
passwd entry's (0 for a bare uid without one); supplementary groups are every group listing
the user, plus ``GroupAdd`` (names or numbers). The files are read with ``read_in_root``, so a
symlinked /etc/passwd can only point inside the container.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from svc.errors import InvalidParameter
from svc.storage.securejoin import read_in_root


@dataclass(frozen=True)
class ExecUser:
    uid: int
    gid: int
    additional_gids: tuple[int, ...]
    home: str


def _rows(data: bytes | None) -> list[list[str]]:
    if data is None:
        return []
    rows = []
    for line in data.decode(errors="replace").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rows.append(line.split(":"))
    return rows


def _num(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def resolve_user(rootfs: Path, user: str, group_add: list[str] | None = None) -> ExecUser:
    """The ids a process started as ``user`` gets (``InvalidParameter`` names what is missing)."""
    passwd = _rows(read_in_root(rootfs, "/etc/passwd"))
    groups = _rows(read_in_root(rootfs, "/etc/group"))
    name, _, group = (user or "0").partition(":")
    uid_num = _num(name)
    entry = next((r for r in passwd if len(r) >= 4 and (
        r[0] == name or (uid_num is not None and _num(r[2]) == uid_num))), None)
    if entry is None and uid_num is None:
        raise InvalidParameter(f"unable to find user {name}: no matching entries in passwd file")
    uid = uid_num if uid_num is not None else int(entry[2])  # type: ignore[index]
    gid = _num(entry[3]) or 0 if entry is not None else 0
    home = entry[5] if entry is not None and len(entry) > 5 else "/"
    user_name = entry[0] if entry is not None else None
    if group:
        gid = _group_id(groups, group)
    extra: list[int] = []
    if user_name is not None and not group:
        for r in groups:
            if len(r) >= 4 and user_name in r[3].split(",") and _num(r[2]) is not None:
                extra.append(int(r[2]))
    for g in group_add or []:
        extra.append(_group_id(groups, g))
    return ExecUser(uid, gid, tuple(dict.fromkeys(x for x in extra if x != gid)), home)


def _group_id(groups: list[list[str]], group: str) -> int:
    num = _num(group)
    if num is not None:
        return num
    for r in groups:
        if len(r) >= 3 and r[0] == group and _num(r[2]) is not None:
            return int(r[2])
    raise InvalidParameter(f"unable to find group {group}: no matching entries in group file")
