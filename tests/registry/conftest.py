"""Registries for the registry adapter's tests: one of each flavour per session.

Tests share them and keep apart by repository name (``unique()``); every process and
temporary directory is removed at the end of the session, also after failures.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry.registryd import Registry, htpasswd_line
from tests.registry.tokenserver import TokenServer

USER, PASSWORD = "alice", "secret"


def unique(prefix: str = "repo") -> str:
    """A repository name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def open_registry() -> Iterator[Registry]:
    registry = Registry()
    try:
        yield registry.start()
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def basic_registry() -> Iterator[Registry]:
    work = Path(tempfile.mkdtemp(prefix="svc-htpasswd-"))
    try:
        htpasswd = work / "htpasswd"
        htpasswd.write_text(htpasswd_line(USER, PASSWORD))
        registry = Registry(f"  htpasswd:\n    realm: basic-realm\n    path: {htpasswd}")
        try:
            yield registry.start()
        finally:
            registry.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def token_server() -> Iterator[TokenServer]:
    work = Path(tempfile.mkdtemp(prefix="svc-token-"))
    server = TokenServer(work / "token.pem")
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def token_registry(token_server: TokenServer) -> Iterator[Registry]:
    registry = Registry(token_server.registry_auth())
    try:
        yield registry.start()
    finally:
        registry.stop()
