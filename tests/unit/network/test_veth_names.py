"""The host ends of a container's veths: one name per interface, within 15 characters."""

from svc.network.bridge import host_veth_name

CID = "0123456789abcdef" * 4


def test_first_interfaces_keep_their_names() -> None:
    assert host_veth_name("eth0", CID) == "s00123456789abh"
    assert host_veth_name("eth1", CID) == "s10123456789abh"


def test_eth1_and_eth11_differ_and_fit_the_kernel() -> None:
    names = {host_veth_name(f"eth{n}", CID) for n in range(120)}
    assert len(names) == 120
    assert max(len(n) for n in names) <= 15
    assert host_veth_name("eth11", CID) == "s110123456789ah"
