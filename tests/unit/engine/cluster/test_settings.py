"""The cluster flags: store URLs, options and advertise addresses as dockerd took them."""

from __future__ import annotations

import pytest

from svc.engine.cluster.settings import (
    ClusterConfigError,
    StoreURL,
    parse_duration,
    parse_options,
    parse_store_url,
    resolve_advertise,
)


@pytest.mark.parametrize("text, want", [
    ("etcd://10.0.0.1:2379", StoreURL("etcd", ("10.0.0.1:2379",), "svc")),
    ("etcd://a:1,b:2,[fd00::1]:3/team/x/", StoreURL("etcd", ("a:1", "b:2", "[fd00::1]:3"),
                                                    "team/x")),
])
def test_store_urls(text: str, want: StoreURL) -> None:
    assert parse_store_url(text) == want


@pytest.mark.parametrize("text, says", [
    ("10.0.0.1:2379", "expected etcd://"),
    ("consul://a:1", "unsupported cluster store 'consul'"),
    ("etcd://", "no etcd address"),
    ("etcd://a", "is not host:port"),
    ("etcd://a:0", "is not host:port"),
    ("etcd://a b:1", "is not a host name"),
    ("etcd://a:1/x/../y", "bad key prefix"),
])
def test_bad_store_urls(text: str, says: str) -> None:
    with pytest.raises(ClusterConfigError, match=says):
        parse_store_url(text)


def test_options_and_their_defaults() -> None:
    default = parse_options({})
    assert (default.heartbeat, default.ttl, default.tls()) == (20.0, 60.0, None)
    opts = parse_options({"discovery.heartbeat": "1500ms", "discovery.ttl": "1m"})
    assert (opts.heartbeat, opts.ttl) == (1.5, 60.0)
    assert parse_duration("1h2m3.5s", "x") == 3723.5
    for bad, says in [({"discovery.ttl": "5", "discovery.heartbeat": "5"}, "must be longer"),
                      ({"discovery.ttl": "soon"}, "expected seconds"),
                      ({"kv.certfile": "/c"}, "go together"),
                      ({"kv.cacertfile": "/nonexistent/ca.pem"}, None),
                      ({"x": "1"}, "unknown --cluster-store-opt 'x'")]:
        with pytest.raises(ClusterConfigError, match=says or "TLS files"):
            parse_options(bad).tls()


def test_advertise_addresses() -> None:
    def lookup(name: str) -> str | None:
        return {"eth0": "10.1.2.3", "v6": "fd00::5"}.get(name)

    assert resolve_advertise("10.0.0.1:2376", lookup) == "10.0.0.1:2376"
    assert resolve_advertise("eth0:2376", lookup) == "10.1.2.3:2376"
    for bad, says in [("eth0", "is not host:port"), ("wlan9:1", "no interface 'wlan9'"),
                      ("0.0.0.0:2376", "one other hosts can reach"),
                      ("v6:1", "run over IPv4"), ("[fd00::7]:9", "run over IPv4")]:
        with pytest.raises(ClusterConfigError, match=says):
            resolve_advertise(bad, lookup)
