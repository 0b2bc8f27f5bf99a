"""Versions svc reports: its own release and the Engine API versions it speaks."""

from __future__ import annotations

from importlib import metadata

API_VERSION = (1, 23)
MIN_API_VERSION = (1, 14)
API_VERSION_STR = "1.23"
MIN_API_VERSION_STR = "1.14"

try:
    SVC_VERSION = metadata.version("svc")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    SVC_VERSION = "0.0.0+source"

SERVER_HEADER = f"svc/{SVC_VERSION} (linux)"
