"""Where COPY puts things in an image that has symlinks, missing parents, existing files and
directories (dockerd 1.11's rules: paths resolve inside the image, symlinks followed there;
missing parents made 0755 root; owner root or ``--chown``; modes and symlinks of the context
kept; files sharing an inode in one COPY stay hard links), whichever way the layer is made."""

from __future__ import annotations

import tarfile

import httpx

from tests.builds.conftest import BASE, build, built_id
from tests.builds.test_build_context import _file, _link, _run, _tar

PREP = ("RUN mkdir -p /real/sub && ln -s /real /lnk && ln -s real /rel && "
        "echo old > /real/old && ln -s /real/tgt /real/dangling && chmod 0700 /real && "
        "chown 5:6 /real && echo f > /afile\n")


async def test_copy_follows_the_image_and_keeps_the_rules(api: httpx.AsyncClient) -> None:
    files: dict[str, bytes | str] = {
        "Dockerfile": (f"FROM {BASE}\n{PREP}COPY f /lnk/f\nCOPY f /rel/new/deep/\n"
                       "COPY d /lnk/\nCOPY --chown=7:8 f /own/f\nCOPY f /real/old\n"
                       "COPY f /real/dangling\nCOPY d /fresh\nCOPY x.sh /real/sub/\n"),
        "f": "new\n", "d/": b"", "d/sub2/": b"", "d/sub2/x": "x\n", "x.sh": "#!/bin/sh\n"}
    image = built_id(await build(api, files))
    script = ("cat /real/f /real/new/deep/f /real/sub2/x /own/f /real/old /real/tgt; "
              "stat -c '%n %F %a %u:%g' /real /real/f /real/new /real/new/deep "
              "/real/new/deep/f /real/sub2 /real/sub2/x /own /own/f /real/old /fresh "
              "/fresh/sub2 /real/sub/x.sh /lnk /rel /real/dangling; ls /real; ls /fresh")
    out = await _run(api, image, script)
    assert out.splitlines() == [
        "new", "new", "x", "new", "new", "new",
        "/real directory 700 5:6", "/real/f regular file 644 0:0",
        "/real/new directory 755 0:0", "/real/new/deep directory 755 0:0",
        "/real/new/deep/f regular file 644 0:0", "/real/sub2 directory 755 0:0",
        "/real/sub2/x regular file 644 0:0", "/own directory 755 0:0",
        "/own/f regular file 644 7:8", "/real/old regular file 644 0:0",
        "/fresh directory 755 0:0", "/fresh/sub2 directory 755 0:0",
        "/real/sub/x.sh regular file 644 0:0", "/lnk symbolic link 777 0:0",
        "/rel symbolic link 777 0:0", "/real/dangling symbolic link 777 0:0",
        "dangling", "f", "new", "old", "sub", "sub2", "tgt", "sub2"]


async def test_copy_of_symlinks_and_hard_links(api: httpx.AsyncClient) -> None:
    df = f"FROM {BASE}\nCOPY src /s/\nCOPY src/a /again\nCOPY --chown=3:3 src/a /owned\n"
    entries = [_file("Dockerfile", df.encode())[0], _file("src/a", b"A\n")[0],
               _link("src/b", "src/a", tarfile.LNKTYPE), _link("src/l", "a"),
               _link("src/abs", "/etc/passwd")]
    body = _tar(entries, {"Dockerfile": df.encode(), "src/a": b"A\n"})
    image = built_id(await build(api, body))
    out = await _run(api, image, "stat -c '%n %h %u:%g' /s/a /s/b /again /owned; "
                                 "readlink /s/l; readlink /s/abs; cat /s/b /again /owned")
    assert out.splitlines() == ["/s/a 2 0:0", "/s/b 2 0:0", "/again 1 0:0", "/owned 1 3:3",
                                "a", "/etc/passwd", "A", "A", "A"]
