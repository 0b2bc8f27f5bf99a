"""Seccomp profiles in Docker's format, turned into the OCI ``linux.seccomp`` object.

The default profile is Docker's own, kept as data in ``seccomp_default.json`` (from
``github.com/moby/profiles/seccomp`` v0.2.3 as vendored by moby at b985e2313a; Apache-2.0): it
allows about 370 system calls, some only to containers holding a capability (``mount`` with
``CAP_SYS_ADMIN``, ``ptrace`` with ``CAP_SYS_PTRACE``...), some only on an architecture or from
a kernel version, and answers ``EPERM`` to the rest. A user's profile (``--security-opt
seccomp=<file>``, which the CLI sends inline as JSON) has the same format.

Docker's format has, per rule, ``includes``/``excludes`` conditions on capabilities,
architectures and the kernel; the OCI format has none, so ``to_oci`` evaluates them for one
container (its bounding capabilities, this machine's architecture and kernel) as moby's
``setupSeccomp`` does, and keeps the rules that apply. Syscall names unknown to the host's
libseccomp are skipped by runc.

The default profile's x32 sub-architecture is left out on a kernel that has no x32 ABI
(``x32_abi()``: most distribution kernels build it disabled or leave it off at boot): no
program can run in it there (an x32 binary does not execute), and runc's filter for each
architecture costs its ``create`` time (x32 about 10 of its 40 ms here). The one difference a
process can see: an x32 system call, which fails with ENOSYS on such a kernel, is then
answered by the filter's bad-architecture action (the process is killed). A user's profile is
taken as written.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import platform
from pathlib import Path
from typing import Any

DEFAULT_PROFILE = Path(__file__).with_name("seccomp_default.json")
_ARCHES = {"x86_64": ("amd64", "SCMP_ARCH_X86_64"), "aarch64": ("arm64", "SCMP_ARCH_AARCH64"),
           "s390x": ("s390x", "SCMP_ARCH_S390X"), "ppc64le": ("ppc64le", "SCMP_ARCH_PPC64LE"),
           "riscv64": ("riscv64", "SCMP_ARCH_RISCV64")}
_ACTIONS = {"SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP",
            "SCMP_ACT_ERRNO", "SCMP_ACT_TRACE", "SCMP_ACT_ALLOW", "SCMP_ACT_LOG",
            "SCMP_ACT_NOTIFY"}


class ProfileError(ValueError):
    """A seccomp profile that cannot be used; the message says why."""


def supported() -> bool:
    """Whether this kernel filters system calls (``Seccomp:`` in /proc/self/status)."""
    try:
        return any(line.startswith("Seccomp:")
                   for line in Path("/proc/self/status").read_text().splitlines())
    except OSError:
        return False


X32_SYSCALL_BIT = 0x40000000
_SYS_GETPID_X86_64 = 39


@functools.cache
def x32_abi() -> bool:
    """Whether this kernel runs x32 system calls: ``getpid`` made with the x32 bit answers
    ENOSYS where it does not (a kernel built without it, or ``syscall.x32=n``). Anything else
    (a pid, or EPERM from a filter the daemon itself runs under) counts as yes."""
    if platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(X32_SYSCALL_BIT | _SYS_GETPID_X86_64))
    return not (ret == -1 and ctypes.get_errno() == errno.ENOSYS)


@functools.cache
def default_profile() -> dict[str, Any]:
    return dict(json.loads(DEFAULT_PROFILE.read_text()))


def parse_profile(text: str) -> dict[str, Any]:
    """A user's profile (Docker's format), checked enough that runc will take it.

    Raises:
        ProfileError: not JSON, not an object, an unknown action, a rule without names.
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProfileError(f"decoding seccomp profile failed: {exc}") from None
    if not isinstance(doc, dict):
        raise ProfileError("decoding seccomp profile failed: not a JSON object")
    if doc.get("defaultAction") not in _ACTIONS:
        raise ProfileError(f"seccomp profile: invalid defaultAction "
                           f"{doc.get('defaultAction')!r}")
    for i, rule in enumerate(doc.get("syscalls") or []):
        if not isinstance(rule, dict) or rule.get("action") not in _ACTIONS:
            raise ProfileError(f"seccomp profile: syscall rule {i} has no valid action")
        names = rule.get("names") or ([rule["name"]] if rule.get("name") else [])
        if not names or not all(isinstance(n, str) for n in names):
            raise ProfileError(f"seccomp profile: syscall rule {i} names no system call")
    return doc


def _kernel() -> tuple[int, int]:
    parts = os.uname().release.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


def _version(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major or 0), int((minor.split(".")[0]) or 0)


def _applies(rule: dict[str, Any], caps: set[str], arch: str) -> bool:
    inc = rule.get("includes") or {}
    exc = rule.get("excludes") or {}
    if inc.get("arches") and arch not in inc["arches"]:
        return False
    if inc.get("caps") and not set(inc["caps"]) <= caps:
        return False
    if inc.get("minKernel") and _kernel() < _version(str(inc["minKernel"])):
        return False
    if exc.get("arches") and arch in exc["arches"]:
        return False
    return not (exc.get("caps") and set(exc["caps"]) & caps)


def _architectures(profile: dict[str, Any], native: str) -> list[str]:
    for entry in profile.get("archMap") or []:
        if entry.get("architecture") == native:
            return [native, *(entry.get("subArchitectures") or [])]
    return list(profile.get("architectures") or [])


def to_oci(profile: dict[str, Any], caps: list[str], *,
           kernel_abis_only: bool = False) -> dict[str, Any]:
    """The OCI ``linux.seccomp`` object for a container with bounding set ``caps``;
    ``kernel_abis_only`` (the default profile) leaves out x32 where the kernel has no x32."""
    arch, native = _ARCHES.get(platform.machine(), (platform.machine(), ""))
    arches = _architectures(profile, native)
    if kernel_abis_only and not x32_abi():
        arches = [a for a in arches if a != "SCMP_ARCH_X32"]
    out: dict[str, Any] = {"defaultAction": profile["defaultAction"],
                           "architectures": arches, "syscalls": []}
    if "defaultErrnoRet" in profile:
        out["defaultErrnoRet"] = profile["defaultErrnoRet"]
    have = set(caps)
    for rule in profile.get("syscalls") or []:
        if not _applies(rule, have, arch):
            continue
        names = rule.get("names") or [rule["name"]]
        oci: dict[str, Any] = {"names": list(names), "action": rule["action"]}
        if rule.get("errnoRet") is not None:
            oci["errnoRet"] = rule["errnoRet"]
        if rule.get("args"):
            oci["args"] = [{"index": a["index"], "value": a.get("value", 0),
                            "valueTwo": a.get("valueTwo", 0), "op": a["op"]}
                           for a in rule["args"]]
        out["syscalls"].append(oci)
    return out
