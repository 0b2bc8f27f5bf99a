"""What the layer store's modules share: its directory names, a committed layer's record
(``LayerInfo``), chain ids."""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from svc.storage.fsutil import remove_tree

LINK_DIR = "l"
STALE = "stale"  # payloads of files the layer's own archive replaced (for a byte-exact save)
TEMP_PREFIX = "tmp-"
HEX = re.compile(r"[0-9a-f]{64}")
LINK_NAME = re.compile(r"[A-Z2-7]{26}")


@dataclass(frozen=True)
class LayerInfo:
    """One committed layer."""

    chain_id: str  # "sha256:..."; = diff_id for a base layer
    diff_id: str  # sha256 of the uncompressed layer tar
    parent: str | None  # the parent's chain id
    size: int  # bytes of regular file content
    link: str  # short name under <root>/l/, a symlink to ../<chain hex>/diff
    tar_size: int = 0  # bytes of the layer tar that write_tar produces


def chain_id_of(parent: str | None, diff_id: str) -> str:
    """Docker's chain id: the diff id for a base layer, else sha256 of "<parent> <diff id>"."""
    if parent is None:
        return diff_id
    return "sha256:" + hashlib.sha256(f"{parent} {diff_id}".encode()).hexdigest()


def hex_of(chain_id: str) -> str:
    return chain_id.removeprefix("sha256:")


def remove_tree_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        remove_tree(path)
