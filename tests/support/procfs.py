"""What /proc tells the tests about the daemon's processes."""

from __future__ import annotations

from pathlib import Path


def zombie_children(pid: int) -> list[int]:
    """Exited, unreaped children of ``pid`` (read from every process's status)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found
