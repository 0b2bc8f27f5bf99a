"""Docker's seccomp profile format turned into OCI for one container."""

from __future__ import annotations

import platform

import pytest

from svc.runtime import seccomp


def _allowed(oci: dict[str, object], name: str) -> list[dict[str, object]]:
    return [r for r in oci["syscalls"] if name in r["names"]]  # type: ignore[attr-defined,index]


def test_capability_conditions() -> None:
    profile = seccomp.default_profile()
    plain = seccomp.to_oci(profile, ["CAP_CHOWN", "CAP_KILL"])
    admin = seccomp.to_oci(profile, ["CAP_CHOWN", "CAP_SYS_ADMIN"])
    assert not _allowed(plain, "mount") and _allowed(admin, "mount")
    assert not _allowed(plain, "ptrace") or all("args" not in r for r in _allowed(plain, "ptrace"))
    # clone is only allowed without namespace flags unless CAP_SYS_ADMIN (an excludes rule)
    assert any("args" in r for r in _allowed(plain, "clone"))
    assert not any("args" in r for r in _allowed(admin, "clone"))
    assert plain["defaultAction"] == "SCMP_ACT_ERRNO" and plain["defaultErrnoRet"] == 1
    assert _allowed(plain, "read") and _allowed(plain, "execve")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="checks the x86_64 arch map")
def test_architectures_and_arch_conditions() -> None:
    oci = seccomp.to_oci(seccomp.default_profile(), [])
    assert oci["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    assert _allowed(oci, "arch_prctl") and not _allowed(oci, "s390_runtime_instr")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="checks the x86_64 arch map")
@pytest.mark.parametrize("x32, want", [
    (True, ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]),
    (False, ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"]),
])
def test_x32_only_where_the_kernel_runs_it(monkeypatch: pytest.MonkeyPatch, x32: bool,
                                           want: list[str]) -> None:
    monkeypatch.setattr(seccomp, "x32_abi", lambda: x32)
    oci = seccomp.to_oci(seccomp.default_profile(), [], kernel_abis_only=True)
    assert oci["architectures"] == want
    # the rules are the same either way; a user's profile is never tailored
    assert oci["syscalls"] == seccomp.to_oci(seccomp.default_profile(), [])["syscalls"]
    assert seccomp.to_oci(seccomp.default_profile(), [])["architectures"][-1] == \
        "SCMP_ARCH_X32"


def test_the_x32_probe_answers() -> None:
    """The probe runs here (an x32 getpid: ENOSYS where the kernel has no x32 ABI)."""
    assert seccomp.x32_abi() in (True, False)
    if platform.machine() != "x86_64":
        assert seccomp.x32_abi() is False


@pytest.mark.parametrize("text", ["{", "[]", '{"defaultAction": "X"}',
                                  '{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{}]}'])
def test_bad_profiles(text: str) -> None:
    with pytest.raises(seccomp.ProfileError):
        seccomp.parse_profile(text)
