"""The two host adapters the network operations lean on, against the real kernel: the bare
address dump (beside pyroute2's) and the firewall's batched, remembered rule changes (on a
bridge name and an owner of this test's own, removed at the end)."""

from __future__ import annotations

import ipaddress
import secrets
import shlex
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from pyroute2 import IPRoute

from svc.network import addr_dump, netrules
from svc.network.firewall import Firewall


def test_the_address_dump_matches_pyroute2() -> None:
    with IPRoute() as ip:
        want = sorted((a["prefixlen"], ipaddress.IPv4Address(a.get_attr("IFA_ADDRESS")).packed)
                      for a in ip.get_addr(family=2))
    assert sorted(addr_dump.ipv4_addresses()) == want


class CountingFirewall(Firewall):
    def __init__(self, owner: str) -> None:
        super().__init__(owner)
        self.saves = 0
        self.restores = 0

    def _run(self, argv: list[str], stdin: str | None = None) -> str:
        self.saves += argv[0].endswith("iptables-save")
        self.restores += argv[0].endswith("iptables-restore")
        return super()._run(argv, stdin)


@pytest.fixture
def fw() -> Iterator[CountingFirewall]:
    if shutil.which("iptables-save") is None:
        pytest.skip("iptables is not installed")
    f = CountingFirewall(secrets.token_hex(5))
    yield f
    f.clear()


def _ours(fw: Firewall) -> list[str]:
    out = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if f"svc:{fw.owner}:" in line]


def _net(fw: Firewall, n: int) -> list[netrules.Rule]:
    bridges = [f"svu{fw.owner[:6]}{i}" for i in range(n)]
    rules: list[netrules.Rule] = []
    for i, b in enumerate(bridges):
        rules += netrules.nat_rules(b, f"10.196.{i}.0/24")
    for b in bridges:
        rules += netrules.bridge_isolation(b, fw.iso1, fw.iso2)
    return rules + [netrules.isolation_jump(fw.iso1)] if bridges else rules


def test_changes_after_a_full_read_need_no_save(fw: CountingFirewall) -> None:
    fw.reconcile({"net": _net(fw, 3)})
    assert fw.saves == 1
    fw.apply("net", _net(fw, 5))
    assert any(f"svu{fw.owner[:6]}4" in line for line in _ours(fw))
    fw.apply("net", _net(fw, 2))
    fw.apply("ports-x", [netrules.rule("nat", "OUTPUT", "-p", "tcp", "--dport", "9", "-j",
                                       "RETURN")])
    assert fw.saves == 1  # known since the reconcile
    assert not any(f"svu{fw.owner[:6]}{i}" in line for line in _ours(fw) for i in (2, 3, 4))
    fw.apply("ports-x", [])
    fresh = CountingFirewall(fw.owner)  # what a restart would read
    assert fresh.reconcile({"net": _net(fw, 2)}) == 0  # nothing to remove: all as known


def test_a_rule_removed_behind_its_back_is_handled_by_reading_again(
        fw: CountingFirewall) -> None:
    fw.reconcile({"net": _net(fw, 2)})
    victim = next(line for line in _ours(fw)
                  if "MASQUERADE" in line and f"svu{fw.owner[:6]}1" in line)
    subprocess.run(["iptables", "-t", "nat", "-D", *shlex.split(victim)[1:]], check=True)
    fw.apply("net", _net(fw, 1))  # its -D fails, so the change is made from a fresh read
    assert fw.saves == 2
    assert CountingFirewall(fw.owner).reconcile({"net": _net(fw, 1)}) == 0
    assert fw.clear() > 0 and _ours(fw) == []


def test_kept_scopes_survive_a_restart_once_and_the_others_can_be_dropped(
        fw: CountingFirewall) -> None:
    """Live restore: a restarted daemon keeps the published ports' rules at its start,
    applies those of the containers it takes back again without making them twice, and
    drops the others'."""
    def port(n: int) -> list[netrules.Rule]:
        return [netrules.rule("nat", "OUTPUT", "-p", "tcp", "--dport", str(n), "-j", "RETURN")]

    fw.reconcile({"net": _net(fw, 1)})
    fw.apply("ports-a", port(9001))
    fw.apply("ports-b", port(9002))
    before = sorted(_ours(fw))
    fresh = CountingFirewall(fw.owner)  # what a restart would read
    assert fresh.reconcile({"net": _net(fw, 1)}, keep=lambda s: s.startswith("ports-")) == 0
    assert sorted(_ours(fw)) == before
    fresh.apply("ports-a", port(9001))  # the container taken back: the same rules again
    assert sorted(_ours(fw)) == before
    assert fresh.drop(lambda s: s.startswith("ports-") and s != "ports-a") == 1
    assert not any("9002" in line for line in _ours(fw))
    assert any("9001" in line for line in _ours(fw))


def test_a_change_of_several_scopes_is_one_restore_that_leaves_the_others_in_place(
        fw: CountingFirewall) -> None:
    """A network's create touches its own scope and the jump's, in one restore: no read of
    the tables, and every other network's rules stay where they were."""
    def scope(i: int) -> list[netrules.Rule]:
        b = f"svu{fw.owner[:6]}{i}"
        return [*netrules.nat_rules(b, f"10.196.{i}.0/24"),
                *netrules.bridge_isolation(b, fw.iso1, fw.iso2)]

    fw.reconcile({f"net-{i}": scope(i) for i in range(3)} | {"iso": []})
    before = _ours(fw)
    saves, restores = fw.saves, fw.restores
    fw.change({"net-3": scope(3), "iso": [netrules.isolation_jump(fw.iso1)]})
    assert (fw.saves, fw.restores) == (saves, restores + 1)
    after = _ours(fw)
    assert [line for line in after if line in before] == before  # (in their order)
    assert len(after) == len(before) + 7  # 4 of the network's own, 2 isolation, the jump
    fw.change({"net-3": [], "iso": []})
    assert _ours(fw) == before
    assert CountingFirewall(fw.owner).reconcile(
        {f"net-{i}": scope(i) for i in range(3)}) == 0  # as known: nothing left behind
