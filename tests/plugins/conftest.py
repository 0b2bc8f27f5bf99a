"""Fixtures of the plugin tests: daemons with busybox for the volume and network plugin
tests, the plugins a test starts (stopped after it), the daemon's address (cleaned after each
test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.plugins.network_helpers import clean_networks
from tests.plugins.volume_helpers import clean
from tests.runtime.conftest import skip_reason
from tests.support.daemon import Daemon, with_busybox
from tests.support.plugins.network import remove_links
from tests.support.plugins.process import PluginProcess


@pytest.fixture(scope="module")
def vdaemon() -> Iterator[Daemon]:
    if reason := skip_reason():
        pytest.skip(reason)
    with with_busybox() as d:
        yield d


@pytest.fixture
def plugins() -> Iterator[list[PluginProcess]]:
    """Plugins a test starts (``volume_plugin``); stopped after it, whatever happened."""
    out: list[PluginProcess] = []
    yield out
    for p in out:
        p.stop()


@pytest.fixture
def vhost(vdaemon: Daemon, plugins: list[PluginProcess]) -> Iterator[str]:
    """The daemon's address; afterwards its containers go, then its volumes (while the
    test's plugins still run), then the plugins."""
    yield vdaemon.url
    clean(vdaemon)


@pytest.fixture(scope="module")
def ndaemon() -> Iterator[Daemon]:
    """A daemon with busybox for the network plugin tests."""
    if reason := skip_reason():
        pytest.skip(reason)
    with with_busybox() as d:
        yield d


@pytest.fixture
def nhost(ndaemon: Daemon, plugins: list[PluginProcess]) -> Iterator[str]:
    """The daemon's address; afterwards its containers and networks go (while the test's
    plugins still run), then whatever interfaces the test's network plugins made."""
    yield ndaemon.url
    clean_networks(ndaemon, plugins)


@pytest.fixture
def netlinks(plugins: list[PluginProcess]) -> Iterator[None]:
    """Whatever interfaces the test's network plugins made are removed after it, whatever
    happened (a daemon the test spawned is gone by then, or cleans its own)."""
    yield
    for p in plugins:
        if p.impl == "network":
            remove_links(p.args["prefix"])
