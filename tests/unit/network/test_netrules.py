"""The rules of a bridge network as data: inter-container communication on and off."""

from __future__ import annotations

from svc.network import netrules


def _forward_between(rules: list[netrules.Rule], bridge: str) -> list[str]:
    return [" ".join(r.spec) for r in rules if r.chain == "FORWARD"
            and f"-i {bridge} -o {bridge}" in " ".join(r.spec)]


def test_icc_on_accepts_and_off_drops_between_a_bridges_containers() -> None:
    on = netrules.nat_rules("br-x", "10.9.0.0/24")
    off = netrules.nat_rules("br-x", "10.9.0.0/24", icc=False)
    assert _forward_between(on, "br-x") == ["-i br-x -o br-x -j ACCEPT"]
    assert _forward_between(off, "br-x") == ["-i br-x -o br-x -j DROP"]
    # the way out is the same
    assert [r for r in on if "MASQUERADE" in r.spec] == [r for r in off if "MASQUERADE" in r.spec]
