"""``remote=``: a git repository (over HTTP, with ``#ref:subdir``), a tarball URL and a
plain-text URL; through the API and SDK 7's ``build(path=<url>)``; local git paths are
refused."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import httpx
import trio

from tests.builds.conftest import BASE, build, built_id, context_tar, refused
from tests.builds.test_build_context import _run
from tests.conftest import run_sdk
from tests.support.daemon import Daemon


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "t",
                        "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def _repo(served: Path) -> None:
    """A bare repository ``repo.git`` below ``served``, for git's dumb HTTP protocol."""
    work = served / "work"
    (work / "sub").mkdir(parents=True)
    (work / "Dockerfile").write_text(f"FROM {BASE}\nLABEL from=main\nCOPY hello /\n")
    (work / "hello").write_text("hi\n")
    (work / "sub" / "Dockerfile").write_text(f"FROM {BASE}\nLABEL from=sub\nCOPY x /\n")
    (work / "sub" / "x").write_text("x\n")
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    _git("branch", "other", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(served / "repo.git"), cwd=served)
    _git("update-server-info", cwd=served / "repo.git")


def _repo_with_submodule(served: Path, web: str) -> None:
    """``outer.git`` whose ``mod`` is a submodule, ``sub.git``, both over dumb HTTP."""
    sub, outer = served / "subwork", served / "outerwork"
    sub.mkdir()
    (sub / "inner").write_text("from the submodule\n")
    _git("init", "-q", "-b", "main", cwd=sub)
    _git("add", ".", cwd=sub)
    _git("commit", "-q", "-m", "sub", cwd=sub)
    _git("clone", "-q", "--bare", str(sub), str(served / "sub.git"), cwd=served)
    _git("update-server-info", cwd=served / "sub.git")
    outer.mkdir()
    (outer / "Dockerfile").write_text(f"FROM {BASE}\nCOPY mod/ /mod/\n")
    _git("init", "-q", "-b", "main", cwd=outer)
    _git("submodule", "--quiet", "add", f"{web}/sub.git", "mod", cwd=outer)
    _git("add", ".", cwd=outer)
    _git("commit", "-q", "-m", "outer", cwd=outer)
    _git("clone", "-q", "--bare", str(outer), str(served / "outer.git"), cwd=served)
    _git("update-server-info", cwd=served / "outer.git")


async def _label(api: httpx.AsyncClient, msgs: list[dict[str, object]]) -> str:
    r = await api.get(f"/images/{built_id(msgs)}/json")
    return str(r.json()["Config"]["Labels"]["from"])


async def test_remote_contexts(api: httpx.AsyncClient, web: str, tmp_path: Path) -> None:
    await trio.to_thread.run_sync(_repo, tmp_path)
    assert await _label(api, await build(api, b"", remote=f"{web}/repo.git")) == "main"
    assert await _label(api, await build(api, b"", remote=f"{web}/repo.git#other:sub")) \
        == "sub"
    (tmp_path / "ctx.tar.gz").write_bytes(gzip.compress(context_tar(
        {"Dockerfile": f"FROM {BASE}\nLABEL from=tarball\nCOPY f /\n", "f": "f"})))
    assert await _label(api, await build(api, b"", remote=f"{web}/ctx.tar.gz")) == "tarball"
    (tmp_path / "plain").write_text(f"FROM {BASE}\nLABEL from=plain\n")
    assert await _label(api, await build(api, b"", remote=f"{web}/plain",
                                         dockerfile="ignored")) == "plain"
    assert "cannot clone" in await refused(api, b"", remote=f"{web}/nothing.git")
    assert "HTTP 404" in await refused(api, b"", remote=f"{web}/nothing")
    assert "unsupported" in await refused(api, b"", remote="file:///etc")
    assert "unsupported URL" in await refused(api, b"", remote="/etc/x.git")


async def test_git_submodules_are_cloned(api: httpx.AsyncClient, web: str,
                                         tmp_path: Path) -> None:
    await trio.to_thread.run_sync(_repo_with_submodule, tmp_path, web)
    for fragment in ("", "#main"):
        image = built_id(await build(api, b"", remote=f"{web}/outer.git{fragment}"))
        assert await _run(api, image, "ls -A /mod; cat /mod/inner") == \
            "inner\nfrom the submodule\n"


SDK7 = """
import json, sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
image, logs = c.images.build(path=sys.argv[2], tag="sdk7:remote")
print(json.dumps(image.labels))
"""


async def test_sdk_remote(bdaemon: Daemon, web: str, tmp_path: Path) -> None:
    await trio.to_thread.run_sync(_repo, tmp_path)
    out = await trio.to_thread.run_sync(
        lambda: run_sdk("sdk7", SDK7, bdaemon.url, f"{web}/repo.git", timeout=120))
    assert json.loads(out) == {"from": "main"}
