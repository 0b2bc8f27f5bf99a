"""Seccomp (Docker's default profile, unconfined, a custom profile), no-new-privileges, and
AppArmor/SELinux options on a host without them."""

from __future__ import annotations

import errno
import json
import platform
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from svc.runtime import seccomp
from tests.containers.conftest import create, output, run

needs_seccomp = pytest.mark.skipif(not seccomp.supported(),
                                   reason="this kernel does not filter system calls (no "
                                          "Seccomp: line in /proc/self/status)")


def _status_field(text: str, field: str) -> str:
    return next(line.split()[1] for line in text.splitlines() if line.startswith(field + ":"))


@needs_seccomp
async def test_the_default_profile_applies(api: httpx.AsyncClient) -> None:
    cid, code = await run(api, ["cat", "/proc/self/status"])
    assert code == 0
    assert _status_field(await output(api, cid), "Seccomp") == "2"  # a filter is on
    # unshare is only allowed with CAP_SYS_ADMIN in Docker's profile: EPERM without it
    cid, code = await run(api, ["unshare", "-n", "true"])
    assert code != 0 and "Operation not permitted" in await output(api, cid, stderr=True)
    # ... and allowed to a container holding the capability (the profile's includes)
    cid, code = await run(api, ["unshare", "-n", "true"], HostConfig={"CapAdd": ["SYS_ADMIN"]})
    assert code == 0, await output(api, cid, stderr=True)


@needs_seccomp
async def test_unconfined_and_privileged_have_no_filter(api: httpx.AsyncClient) -> None:
    for hc in ({"SecurityOpt": ["seccomp=unconfined"]}, {"SecurityOpt": ["seccomp:unconfined"]},
               {"Privileged": True}):
        cid, code = await run(api, ["cat", "/proc/self/status"], HostConfig=hc)
        assert code == 0 and _status_field(await output(api, cid), "Seccomp") == "0", hc


@needs_seccomp
async def test_a_custom_profile(api: httpx.AsyncClient) -> None:
    profile = {"defaultAction": "SCMP_ACT_ALLOW",
               "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}
    cid, code = await run(api, ["mkdir", "/x"],
                          HostConfig={"SecurityOpt": [f"seccomp={json.dumps(profile)}"]})
    assert code != 0 and "Operation not permitted" in await output(api, cid, stderr=True)
    for bad in ("seccomp={", 'seccomp={"defaultAction": "NOPE"}', "bogus=1", "apparmor"):
        r = await api.post("/containers/create", json={
            "Image": "busybox", "Cmd": ["true"], "HostConfig": {"SecurityOpt": [bad]}})
        assert r.status_code == 400, (bad, r.text)


async def test_no_new_privileges(api: httpx.AsyncClient) -> None:
    for opt in ("no-new-privileges", "no-new-privileges:true", "no-new-privileges=true"):
        cid, code = await run(api, ["cat", "/proc/self/status"],
                              HostConfig={"SecurityOpt": [opt]})
        assert code == 0 and _status_field(await output(api, cid), "NoNewPrivs") == "1", opt
    cid, _ = await run(api, ["cat", "/proc/self/status"])
    assert _status_field(await output(api, cid), "NoNewPrivs") == "0"


async def test_apparmor_and_labels_on_a_host_without_them(api: httpx.AsyncClient) -> None:
    from svc.runtime import host

    if host.apparmor_enabled() or host.selinux_enabled():
        pytest.skip("this host runs AppArmor or SELinux: the options would apply")
    opts = ["apparmor=docker-default", "label=level:s0:c100,c200"]
    body = await create(api, ["true"], HostConfig={"SecurityOpt": opts})
    assert any("AppArmor is not enabled" in w for w in body["Warnings"])
    assert any("SELinux is not enabled" in w for w in body["Warnings"])
    r = await api.get(f"/containers/{body['Id']}/json")
    assert r.json()["HostConfig"]["SecurityOpt"] == opts
    assert (await api.post(f"/containers/{body['Id']}/start")).status_code == 204


X32_PROBE = r"""
#include <errno.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    long r = syscall(0x40000000L | SYS_getpid);
    printf("x32 getpid: %ld errno %d\n", r, errno);
    return 0;
}
"""


def _x32_probe(tmp_path: Path) -> Path:
    """A static program that makes an x32 ``getpid``; skips where it cannot be built."""
    if platform.machine() != "x86_64":
        pytest.skip(f"x32 is an x86_64 ABI; this machine is {platform.machine()}")
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc on this machine to build the x32 probe")
    src, exe = tmp_path / "x32.c", tmp_path / "x32"
    src.write_text(X32_PROBE)
    built = subprocess.run([gcc, "-static", "-O2", "-o", str(exe), str(src)],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"gcc cannot build a static program here: {built.stderr.strip()[-200:]}")
    return exe


@needs_seccomp
async def test_the_default_profile_and_x32(api: httpx.AsyncClient, tmp_path: Path) -> None:
    """Where the kernel has no x32 ABI the default profile leaves x32 out (runc's create is
    faster for it): an x32 system call, ENOSYS unconfined, is answered by the filter's
    bad-architecture action instead (SIGSYS). Where the kernel runs x32, the profile keeps
    it and the call goes through."""
    exe = _x32_probe(tmp_path)
    binds = {"Binds": [f"{exe}:/x32:ro"]}
    cid, code = await run(api, ["/x32"], HostConfig={**binds,
                                                     "SecurityOpt": ["seccomp=unconfined"]})
    assert code == 0
    unconfined = await output(api, cid)
    cid, code = await run(api, ["/x32"], HostConfig=binds)
    if seccomp.x32_abi():
        assert code == 0 and "errno 0" in unconfined and "x32 getpid: 1 " in \
            await output(api, cid)
    else:
        assert f"errno {errno.ENOSYS}" in unconfined
        assert code == 128 + signal.SIGSYS
