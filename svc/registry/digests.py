"""Content digests (``sha256:<hex>``): checking their form and computing them.

Registries name blobs and manifests by ``algorithm:hex``; go-digest knows sha256, sha384 and
sha512, and so does this module. A digest that is not well formed is refused before it is put
in a URL, so a hostile manifest cannot send the client to ``/v2/x/blobs/../..``.
"""

from __future__ import annotations

import hashlib
import re

from svc.registry.errors import InvalidManifest

_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
_DIGEST_RE = re.compile(r"(sha256|sha384|sha512):([a-f0-9]+)")


def check(digest: str) -> str:
    """Return ``digest`` when it is a well-formed digest of a known algorithm.

    Raises:
        InvalidManifest: it is not (the message names it).
    """
    match = _DIGEST_RE.fullmatch(digest)
    if match is None or len(match[2]) != _LENGTHS[match[1]]:
        raise InvalidManifest(f"invalid digest {digest[:80]!r}")
    return digest


def is_digest(reference: str) -> bool:
    """True when a manifest reference is a digest rather than a tag."""
    return ":" in reference


def hasher(digest: str) -> hashlib._Hash:
    """A fresh hash object of the algorithm ``digest`` names."""
    return hashlib.new(check(digest).split(":", 1)[0])


def of(data: bytes, algorithm: str = "sha256") -> str:
    """The digest of ``data``."""
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def matches(digest: str, data: bytes) -> bool:
    """True when ``data`` hashes to ``digest`` (in the digest's own algorithm)."""
    h = hasher(digest)
    h.update(data)
    return f"{h.name}:{h.hexdigest()}" == digest
