"""Layer tars both ways: apply an archive to a directory, re-emit it byte for byte, produce one.

``apply_layer`` unpacks an uncompressed layer tar into a directory the way an overlay lower dir
needs it (aufs ``.wh.`` whiteouts become 0:0 character devices, ``.wh..wh..opq`` becomes the
``trusted.overlay.opaque`` xattr), refuses anything that would write outside that directory, and
records a *skeleton* so ``write_layer_from_skeleton`` can later rebuild the exact bytes, and so
the diff id, as docker's tar-split does. ``produce_layer`` goes the other way for an overlay upper
dir. All of it blocks: the engine calls it from worker threads.

The work is split by job; this module re-exports the entry points:

- ``tarformat``: reading tar headers (ustar, GNU, PAX) and the hashed, recorded input stream.
- ``skeleton``: the skeleton format, its writer, and ``write_layer_from_skeleton``.
- ``layerapply``: ``apply_layer`` (names, safety, whiteouts, metadata).
- ``layerproduce``: ``produce_layer``.
- ``layerworker``: the helper thread that hashes and compresses beside the caller.
"""

from svc.storage.layerapply import ApplyResult, apply_layer
from svc.storage.layerproduce import produce_layer
from svc.storage.skeleton import SKELETON_MAGIC, write_layer_from_skeleton

__all__ = ["SKELETON_MAGIC", "ApplyResult", "apply_layer", "produce_layer",
           "write_layer_from_skeleton"]
