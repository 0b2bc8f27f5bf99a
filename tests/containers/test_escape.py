"""No code from a container's filesystem ever runs in a daemon process (CVE-2019-14271 class).

The hostile image carries an ``/etc/nsswitch.conf`` naming a module ``evil`` and the module's
library ``libnss_evil.so.2`` in every directory glibc searches. A process that enters the
container's root and then lets glibc look up a user or group name (``getpwuid``, as Python's
``tarfile`` does when it writes member names) loads the library: its constructor writes
``/nss-ran`` where the process stands, and tries the classic double-chroot escape to write a
marker on the host. A control run first proves the trap works on this machine (a plain chroot
plus ``getpwuid`` springs it); then every path of svc that enters or reads a container's
filesystem is driven through the API and neither marker may appear.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.containers.conftest import create, inspect
from tests.support import images as timg
from tests.support.daemon import Daemon

TRAP_C = r"""
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void mark(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { write(fd, "ran\n", 4); close(fd); }
}

__attribute__((constructor)) static void sprung(void) {
    mark("/nss-ran");
    /* the classic escape: chroot into a subdirectory, climb out, chroot to the real root */
    mkdir("/.nss-escape", 0700);
    if (chroot("/.nss-escape") == 0) {
        for (int i = 0; i < 64; i++) chdir("..");
        if (chroot(".") == 0) mark(HOST_MARKER);
    }
}
"""
LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib")
NSSWITCH = b"passwd: evil\ngroup: evil\nshadow: evil\nhosts: evil\n"


@pytest.fixture(scope="module")
def trap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[bytes, Path]]:
    """The compiled library and the host path its escape would write."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: the hostile NSS library cannot be built")
    host_marker = Path(f"/tmp/svc-nss-escaped-{uuid.uuid4().hex[:12]}")
    d = tmp_path_factory.mktemp("nss")
    (d / "trap.c").write_text(TRAP_C)
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", f'-DHOST_MARKER="{host_marker}"',
                    "-o", str(d / "libnss_evil.so.2"), str(d / "trap.c")], check=True)
    yield (d / "libnss_evil.so.2").read_bytes(), host_marker
    host_marker.unlink(missing_ok=True)


def _with_trap(lib: bytes) -> bytes:
    """The busybox rootfs plus the trap: nsswitch.conf and the library in every lib dir."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(timg.busybox_rootfs_tar())) as src, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in src:
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        entries = []
        for d in LIB_DIRS:
            parts = d.split("/")
            entries += [timg.directory("/".join(parts[:i + 1])) for i in range(len(parts))]
            entries.append(timg.file(f"{d}/libnss_evil.so.2", lib, mode=0o755))
        entries.append(timg.file("etc/nsswitch.conf", NSSWITCH))
        entries.append(timg.file("etc/passwd", timg.PASSWD.encode() +
                                 b"evil:x:4242:4242:evil:/:/bin/sh\n"))
        seen: set[str] = {m.name for m in src.getmembers()}
        with tarfile.open(fileobj=io.BytesIO(timg.layer_tar(entries))) as extra:
            for m in extra:
                if m.name in seen and m.isdir():
                    continue
                dst.addfile(m, extra.extractfile(m) if m.isfile() else None)
    return out.getvalue()


def test_the_trap_is_armed(trap: tuple[bytes, Path], tmp_path: Path) -> None:
    """Control: a plain chroot followed by a name lookup springs the trap on this machine."""
    lib, host_marker = trap
    root = tmp_path / "root"
    for d in LIB_DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / "libnss_evil.so.2").write_bytes(lib)
    (root / "etc").mkdir()
    (root / "etc" / "nsswitch.conf").write_bytes(NSSWITCH)
    subprocess.run([sys.executable, "-c", "import os, pwd, sys\nos.chroot(sys.argv[1])\n"
                    "os.chdir('/')\ntry:\n    pwd.getpwuid(4242)\nexcept KeyError:\n    pass",
                    str(root)], check=True)
    assert (root / "nss-ran").exists(), "glibc did not load the container's NSS module"
    # with the capabilities of host root, the module also climbs out of the chroot
    assert host_marker.exists()
    host_marker.unlink()


@pytest.fixture(scope="module")
def evil_image(cdaemon: Daemon, trap: tuple[bytes, Path]) -> str:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(cdaemon.sock)),
                      base_url="http://svc", timeout=60) as c:
        r = c.post("/images/create", params={"fromSrc": "-", "repo": "evilnss", "tag": "1"},
                   content=_with_trap(trap[0]),
                   headers={"Content-Type": "application/x-tar"})
        assert r.status_code == 200 and "error" not in r.text, r.text
    return "evilnss:1"


def _sprung(upper: Path, host_marker: Path) -> list[str]:
    found = [str(p) for p in (upper / "nss-ran", host_marker) if p.exists()]
    return found


async def _upper(api: httpx.AsyncClient, cid: str) -> Path:
    return Path((await inspect(api, cid))["GraphDriver"]["Data"]["UpperDir"])


def _tar(name: str, data: bytes, uid: int = 4242) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        info = tarfile.TarInfo(name)
        info.size, info.uid, info.gid, info.uname, info.gname = len(data), uid, uid, "evil", "x"
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def _file_paths(api: httpx.AsyncClient, cid: str) -> None:
    """Every archive/copy/export path, as a client drives them."""
    for path in ("/etc/passwd", "/etc", "/"):
        r = await api.head(f"/containers/{cid}/archive", params={"path": path})
        assert r.status_code == 200, r.text
        r = await api.get(f"/containers/{cid}/archive", params={"path": path})
        assert r.status_code == 200, r.text
        with tarfile.open(fileobj=io.BytesIO(r.content)) as t:
            first = t.next()
            assert first is not None
            assert first.uname == "" and first.gname == "", "names must not be looked up"
    r = await api.put(f"/containers/{cid}/archive", params={"path": "/tmp"},
                      content=_tar("dropped", b"data"))
    assert r.status_code == 200, r.text
    r = await api.post(f"/containers/{cid}/copy", json={"Resource": "/etc/passwd"})
    assert r.status_code == 200, r.text


async def test_stopped_container_paths_run_no_container_code(
        api: httpx.AsyncClient, evil_image: str, trap: tuple[bytes, Path]) -> None:
    cid = (await create(api, ["true"], Image=evil_image, User="evil"))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    assert (await api.post(f"/containers/{cid}/wait")).status_code == 200
    upper = await _upper(api, cid)
    await _file_paths(api, cid)
    r = await api.get(f"/containers/{cid}/export")
    assert r.status_code == 200 and len(r.content) > 1024
    assert (await api.get(f"/containers/{cid}/changes")).status_code == 200
    r = await api.post("/commit", params={"container": cid, "repo": "evilnss-commit"})
    assert r.status_code == 201, r.text
    assert _sprung(upper, trap[1]) == []


async def test_running_container_paths_run_no_container_code(
        api: httpx.AsyncClient, evil_image: str, trap: tuple[bytes, Path]) -> None:
    # A volume at a path the image fills is copied up from the image; exec looks the user up.
    cid = (await create(api, ["sleep", "60"], Image=evil_image, User="evil",
                        Volumes={"/lib": {}}))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    upper = await _upper(api, cid)
    await _file_paths(api, cid)
    r = await api.post(f"/containers/{cid}/exec", json={"Cmd": ["true"], "User": "evil"})
    assert r.status_code == 201, r.text
    r = await api.post(f"/exec/{r.json()['Id']}/start", json={"Detach": True})
    assert r.status_code == 200, r.text
    r = await api.post("/commit", params={"container": cid, "repo": "evilnss-commit2"})
    assert r.status_code == 201, r.text
    with trio.fail_after(10):
        await api.post(f"/containers/{cid}/kill")
    assert _sprung(upper, trap[1]) == []
    assert not os.path.exists(upper / ".nss-escape")
