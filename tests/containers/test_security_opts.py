"""Seccomp (Docker's default profile, unconfined, a custom profile), no-new-privileges, and
AppArmor/SELinux options on a host without them."""

from __future__ import annotations

import json

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
