"""Layer tars: apply (metadata, whiteouts, safety), byte-exact rebuild, produce round trip."""

from __future__ import annotations

import bz2
import errno
import gzip
import hashlib
import io
import lzma
import os
import random
import stat
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from svc.errors import InvalidParameter, SystemError_
from svc.storage.compression import open_decompressed
from svc.storage.tarlayer import apply_layer, produce_layer, write_layer_from_skeleton
from tests.unit.support_layers import (
    CAPABILITY,
    MTIME,
    ShortReads,
    directory,
    file,
    hardlink,
    header,
    member,
    raw_tar,
    snapshot,
    symlink,
    tar,
    xattrs_of,
)


def apply(data: bytes, dest: Path, *, chunk: int = 0) -> tuple[str, bytes]:
    """Apply ``data``; returns the diff id and the skeleton."""
    dest.mkdir(exist_ok=True)
    skeleton = io.BytesIO()
    stream = io.BufferedReader(ShortReads(data, chunk)) if chunk else io.BytesIO(data)
    result = apply_layer(stream, dest, skeleton, _stale(dest))  # type: ignore[arg-type]
    assert result.tar_size == len(data)
    return result.diff_id, skeleton.getvalue()


def _stale(diff: Path) -> Path:
    return diff.parent / (diff.name + ".stale")


def rebuild(skeleton: bytes, diff: Path) -> bytes:
    out = io.BytesIO()
    write_layer_from_skeleton(io.BytesIO(skeleton), diff, out, _stale(diff))
    return out.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- metadata ---------------------------------------------------------------------------------


def test_every_kind_of_metadata_survives(tmp_path: Path) -> None:
    data = tar(
        directory("d", mode=0o750, uid=1000, gid=1001, mtime=MTIME + 1),
        file("d/suid", b"#!/bin/sh\n", mode=0o4755, uid=5, gid=6, mtime=MTIME + 2),
        file("d/cap", b"ping", mode=0o755, uid=1000, gid=1000,  # chown would drop the caps
             xattrs={"security.capability": CAPABILITY, "user.note": b"\xff\x00bin"}),
        directory("tmp", mode=0o1777, xattrs={"trusted.svc": b"y"}),
        symlink("d/link", "/etc/passwd", uid=7, gid=8, mtime=MTIME + 3),
        hardlink("d/hard", "d/suid"),
        member("dev/null", tarfile.CHRTYPE, mode=0o666, dev=(1, 3)),
        member("dev/loop0", tarfile.BLKTYPE, mode=0o660, gid=6, dev=(7, 0)),
        member("run/fifo", tarfile.FIFOTYPE, mode=0o620, uid=3),
    )
    root = tmp_path / "root"
    diff_id, _ = apply(data, root)
    assert diff_id == sha(data)

    def st(rel: str) -> os.stat_result:
        return (root / rel).lstat()

    d = st("d")
    assert (stat.S_IMODE(d.st_mode), d.st_uid, d.st_gid) == (0o750, 1000, 1001)
    assert d.st_mtime_ns == d.st_atime_ns == (MTIME + 1) * 10**9  # set after its children
    suid = st("d/suid")
    assert (stat.S_IMODE(suid.st_mode), suid.st_uid, suid.st_gid) == (0o4755, 5, 6)
    assert suid.st_mtime_ns == suid.st_atime_ns == (MTIME + 2) * 10**9
    assert (root / "d/suid").read_bytes() == b"#!/bin/sh\n"
    assert st("d/hard").st_ino == suid.st_ino and suid.st_nlink == 2
    assert xattrs_of(root / "d/cap") == {"security.capability": CAPABILITY,
                                         "user.note": b"\xff\x00bin"}
    assert stat.S_IMODE(st("tmp").st_mode) == 0o1777
    assert xattrs_of(root / "tmp") == {"trusted.svc": b"y"}
    link = st("d/link")
    assert stat.S_ISLNK(link.st_mode) and os.readlink(root / "d/link") == "/etc/passwd"
    assert (link.st_uid, link.st_gid, link.st_mtime_ns) == (7, 8, (MTIME + 3) * 10**9)
    null, loop = st("dev/null"), st("dev/loop0")
    assert stat.S_ISCHR(null.st_mode) and (os.major(null.st_rdev), os.minor(null.st_rdev)) == (1, 3)
    assert stat.S_IMODE(null.st_mode) == 0o666
    assert stat.S_ISBLK(loop.st_mode) and loop.st_rdev == os.makedev(7, 0) and loop.st_gid == 6
    fifo = st("run/fifo")
    assert stat.S_ISFIFO(fifo.st_mode) and stat.S_IMODE(fifo.st_mode) == 0o620
    assert fifo.st_uid == 3
    assert stat.S_IMODE(st("run").st_mode) == 0o755  # implicit parents: 0755, root-owned


def test_whiteouts_and_opaque_directories(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/old").write_text("in the way")
    (root / "gone").mkdir()
    (root / "gone/deep").write_text("x")
    data = tar(
        directory("etc"),
        file("etc/.wh.old", uid=4, gid=5),
        file(".wh.gone"),
        file("new/sub/.wh.missing"),  # parents of a whiteout are created
        directory("opq", mode=0o700),
        file("opq/.wh..wh..opq"),
        file("opq/kept", b"k"),
        file(".wh..wh.plnk", b"aufs metadata"),
        file("nested/dir/.wh..wh..opq"),
    )
    apply(data, root)
    for rel, owner in (("etc/old", (4, 5)), ("gone", (0, 0)), ("new/sub/missing", (0, 0))):
        st = (root / rel).lstat()
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0, rel
        assert (st.st_uid, st.st_gid) == owner
    assert os.getxattr(root / "opq", "trusted.overlay.opaque") == b"y"
    assert os.getxattr(root / "nested/dir", "trusted.overlay.opaque") == b"y"
    assert (root / "opq/kept").read_bytes() == b"k"
    names = [n for _, dirs, files in os.walk(root) for n in dirs + files]
    assert not [n for n in names if n.startswith(".wh.")]


# -- byte-exact rebuild -------------------------------------------------------------------------

LONG = "very-long-directory-name-" * 5 + "/" + "and-a-long-file-name-" * 6


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_skeleton_rebuilds_the_exact_archive(tmp_path: Path, fmt: int) -> None:
    big = random.Random(1).randbytes(3 * (1 << 20) + 1234)  # crosses read-chunk boundaries
    long_name = "a" * 90 + "/" + "b" * 90 if fmt == tarfile.USTAR_FORMAT else LONG
    members = [
        directory("usr"), file("usr/empty"), file("usr/big", big, mode=0o600),
        file(long_name, b"long"), symlink("usr/sl", "../" + "t" * 80),
        hardlink("usr/hl", "usr/big"), file("usr/.wh.x"), file(".wh..wh.plnk", b"meta"),
    ]
    if fmt != tarfile.USTAR_FORMAT:
        members.append(symlink("usr/longlink", "/" + "target/" * 30))
    if fmt == tarfile.PAX_FORMAT:
        members.append(file("usr/x", b"x", xattrs={"user.a": b"1",
                                                   "security.capability": CAPABILITY}))
        members.append(file("ünïcode/naïve", b"u", uid=3_000_000, mtime=2**34))
    data = tar(*members, fmt=fmt) + b"trailing junk after the end blocks"
    for chunk in (0, 4093):
        diff = tmp_path / f"diff-{chunk}"
        diff_id, skeleton = apply(data, diff, chunk=chunk)
        assert diff_id == sha(data)
        assert rebuild(skeleton, diff) == data
        assert len(skeleton) < 4096  # payload is referenced, not copied


def test_rebuilds_a_gnu_tar_archive_to_a_real_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "dir" / ("n" * 150)).mkdir(parents=True)
    (src / "dir" / ("n" * 150) / "f").write_bytes(os.urandom(200_000))
    (src / "dir/small").write_text("s")
    os.symlink("small", src / "dir/sym")
    os.link(src / "dir/small", src / "dir/hard")
    data = subprocess.run(["tar", "-C", str(src), "-cf", "-", "."], check=True,
                          capture_output=True).stdout
    diff_id, skeleton = apply(data, tmp_path / "diff")
    out = tmp_path / "out.tar"
    with open(out, "wb") as f:  # a real fd: payloads go out with sendfile(2)
        f.write(b"prefix")
        write_layer_from_skeleton(io.BytesIO(skeleton), tmp_path / "diff", f)
        f.write(b"suffix")
    assert out.read_bytes() == b"prefix" + data + b"suffix"
    assert diff_id == sha(data)


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compressed_layers_have_the_diff_id_of_the_plain_tar(tmp_path: Path, compress: object
                                                              ) -> None:
    data = tar(directory("a"), file("a/f", os.urandom(100_000)))
    assert callable(compress)
    blob = compress(data[:5000]) + compress(data[5000:])  # multi-member / multi-stream
    result = apply_layer(open_decompressed(io.BytesIO(blob)), tmp_path, io.BytesIO())
    assert result.diff_id == sha(data)
    assert result.size == 100_000


@pytest.mark.parametrize("entries", [
    [file("f", b"first"), file("f", b"secnd")],  # same size: only tracking can tell
    [file("f", b"1"), file("f", b"22"), file("f", b"333")],
    [directory("d"), file("d/a", b"a" * 700), file("d/b", b"b"), file("d", b"now a file")],
    [file("w", b"gone"), file(".wh.w")],
    [file("h", b"orig"), hardlink("h2", "h"), file("h", b"new")],
], ids=["twice", "thrice", "tree", "whiteout", "hardlinked"])
def test_a_path_written_twice_rebuilds_byte_for_byte(tmp_path: Path, entries: list[Any]
                                                     ) -> None:
    """Legal in tar (the last entry wins): the earlier payloads are kept aside, and the
    rebuilt archive equals what was applied."""
    data = tar(*entries)
    diff_id, skeleton = apply(data, tmp_path / "d")
    out = rebuild(skeleton, tmp_path / "d")
    assert out == data and sha(out) == diff_id
    assert not any(p.name.startswith(".wh.") for p in (tmp_path / "d").iterdir())


def test_the_last_entry_wins(tmp_path: Path) -> None:
    apply(tar(file("f", b"first"), file("f", b"secnd")), tmp_path / "d")
    assert (tmp_path / "d/f").read_bytes() == b"secnd"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["f"]


def test_a_path_written_twice_with_nowhere_to_keep_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match='"f" appears twice'):
        apply_layer(io.BytesIO(tar(file("f", b"1"), file("f", b"2"))), tmp_path,
                    io.BytesIO())  # type: ignore[arg-type]


def test_a_lost_earlier_copy_is_a_clear_error(tmp_path: Path) -> None:
    _, skeleton = apply(tar(file("f", b"first"), file("f", b"secnd")), tmp_path / "d")
    (_stale(tmp_path / "d") / "0").unlink()
    with pytest.raises(SystemError_, match='"0" cannot be read'):
        rebuild(skeleton, tmp_path / "d")


def test_missing_or_changed_payload_is_a_system_error(tmp_path: Path) -> None:
    _, skeleton = apply(tar(file("a", b"12345"), file("b", b"b")), tmp_path / "d")
    (tmp_path / "d/a").write_bytes(b"123")
    with pytest.raises(SystemError_, match='"a" has changed'):
        rebuild(skeleton, tmp_path / "d")
    (tmp_path / "d/a").unlink()
    with pytest.raises(SystemError_, match='"a" cannot be read'):
        rebuild(skeleton, tmp_path / "d")
    with pytest.raises(SystemError_, match="skeleton is damaged"):
        rebuild(skeleton[: len(skeleton) // 2], tmp_path / "d")


# -- produce ----------------------------------------------------------------------------------


def _upper_dir(root: Path) -> None:
    """An overlay upper dir with every kind of entry."""
    (root / "etc").mkdir(parents=True)
    (root / "etc/conf").write_text("conf")
    os.chown(root / "etc/conf", 12, 34)
    os.chmod(root / "etc/conf", 0o4750)
    (root / "bin").mkdir()
    (root / "bin/ping").write_bytes(os.urandom(70_000))
    os.setxattr(root / "bin/ping", "security.capability", CAPABILITY)
    os.link(root / "bin/ping", root / "bin/ping6")
    os.symlink("/etc/conf", root / "bin/abs")
    os.mknod(root / "bin/tty", stat.S_IFCHR | 0o620, os.makedev(5, 0))
    os.mkfifo(root / "bin/fifo", 0o600)
    os.mknod(root / "etc/removed", stat.S_IFCHR, 0)  # a whiteout
    (root / "opq").mkdir(mode=0o711)
    os.setxattr(root / "opq", "trusted.overlay.opaque", b"y")
    os.setxattr(root / "opq", "trusted.overlay.origin", b"junk")
    os.setxattr(root / "opq", "user.keep", b"kept")
    (root / "opq/in").write_text("in")
    (root / ("long" * 40)).mkdir()
    (root / ("long" * 40) / ("name" * 30)).write_text("deep")
    (root / "tmp").mkdir(mode=0o1777)
    os.chmod(root / "tmp", 0o1777)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames + [""]:
            os.utime(os.path.join(dirpath, name), (MTIME, MTIME), follow_symlinks=False)


def test_produce_then_apply_gives_the_same_tree(tmp_path: Path) -> None:
    src, dest = tmp_path / "upper", tmp_path / "applied"
    _upper_dir(src)
    out = io.BytesIO()
    diff_id = produce_layer(src, out)
    data = out.getvalue()
    assert diff_id == sha(data)
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert "etc/.wh.removed" in names and "opq/.wh..wh..opq" in names
    assert names.index("opq/.wh..wh..opq") == names.index("opq") + 1
    assert b"trusted.overlay" not in data
    applied_id, skeleton = apply(data, dest)
    assert applied_id == diff_id
    before, after = snapshot(src), snapshot(dest)
    # Overlay bookkeeping is not layer content, except the opaque marker it turns back into.
    before["opq"][-1].pop("trusted.overlay.origin")
    assert after == before
    assert rebuild(skeleton, dest) == data


def test_unusual_but_valid_headers(tmp_path: Path) -> None:
    """Headers off the reader's fast path (odd checksums and numbers, prefixes, old types)."""
    def entry(name: bytes, data: bytes = b"", kind: bytes = b"0", **kw: Any) -> bytes:
        return header(name, kind, len(data), **kw) + data + bytes(-len(data) % 512)

    data = b"".join((
        entry(b"plain", b"p"),
        entry(b"sum7", b"7", checksum=b"%07o\0"),
        entry(b"sumspace", b"s", checksum=b" %05o\0 "),
        entry(b"signed-\xe9", b"n", signed=True),
        entry(b"spaced", b"sp", fields={100: b"   751 \0", 108: b"  1750 \0",
                                         136: b"%012o" % (MTIME + 5)}),
        entry(b"b256", b"b", fields={108: b"\x80" + (4096).to_bytes(7, "big"),
                                      116: b"\x80" + (70000).to_bytes(7, "big")}),
        entry(b"oldtype", b"o", kind=b"\0"),
        entry(b"contiguous", b"c", kind=b"7"),
        entry(b"file", b"f", fields={345: b"deep/prefix"}),
        entry(b"olddir/", kind=b"\0"),
        entry(b"dirsize", kind=b"5", fields={124: b"%011o\0" % 4}),  # size ignored: no payload
    )) + bytes(1024)
    root = tmp_path / "root"
    diff_id, skeleton = apply(data, root)
    assert diff_id == sha(data)
    assert rebuild(skeleton, root) == data
    for name, content in ((b"plain", b"p"), (b"sum7", b"7"), (b"sumspace", b"s"),
                          (b"signed-\xe9", b"n"), (b"spaced", b"sp"), (b"b256", b"b"),
                          (b"oldtype", b"o"), (b"contiguous", b"c"), (b"deep/prefix/file", b"f")):
        assert (root / os.fsdecode(name)).read_bytes() == content, name
    spaced = (root / "spaced").lstat()
    assert (stat.S_IMODE(spaced.st_mode), spaced.st_uid, spaced.st_mtime) == (0o751, 1000,
                                                                               MTIME + 5)
    b256 = (root / "b256").lstat()
    assert (b256.st_uid, b256.st_gid) == (4096, 70000)
    assert (root / "olddir").is_dir() and (root / "dirsize").is_dir()


# -- malicious and malformed archives -----------------------------------------------------------


def _raw(name: bytes, kind: bytes = b"0", data: bytes = b"", link: bytes = b""
         ) -> tuple[bytes, bytes, bytes, bytes]:
    return name, kind, data, link


def malicious(outside: bytes) -> dict[str, tuple[bytes, str]]:
    """Archive and expected message for each attack; ``outside`` must stay empty."""
    return {
        "dotdot": (raw_tar(_raw(b"../etc/passwd", data=b"x")),
                   r'entry "\.\./etc/passwd" escapes the layer root'),
        "deep dotdot": (raw_tar(_raw(b"a/../../x", data=b"x")), r'entry "a/\.\./\.\./x" escapes'),
        "absolute dotdot": (raw_tar(_raw(b"/../x")), r'entry "/\.\./x" escapes'),
        "hardlink out": (raw_tar(_raw(b"h", b"1", link=b"../../etc/passwd")),
                         r'hard link "h" points outside'),
        "symlink parent": (raw_tar(_raw(b"a", b"2", link=outside), _raw(b"a/passwd", data=b"x")),
                           r'entry "a/passwd" would be written through the symbolic link "a"'),
        "relative symlink parent": (raw_tar(_raw(b"b", b"2", link=b"../outside"),
                                            _raw(b"b/c/d", b"5")),
                                    r'entry "b/c/d" would be written through the symbolic link'),
        "symlink parent of hardlink": (raw_tar(_raw(b"a", b"2", link=outside),
                                               _raw(b"h", b"1", link=b"a/secret")),
                                       r'entry "a/secret" would be written through the symbolic'),
        "symlink parent of whiteout": (raw_tar(_raw(b"a", b"2", link=outside),
                                               _raw(b"a/.wh.secret")),
                                       r'entry "a/\.wh\.secret" would be written through'),
        "hardlink to nothing": (raw_tar(_raw(b"h", b"1", link=b"nothing")),
                                r'hard link target "nothing" of "h" does not exist'),
        "hardlink to dir": (raw_tar(_raw(b"d", b"5"), _raw(b"h", b"1", link=b"d")),
                            r'hard link target "d" of "h" is a directory'),
        "root replaced": (raw_tar(_raw(b"./", b"2", link=b"/")),
                          r'entry "\./" would replace the layer root'),
        "bad whiteout": (raw_tar(_raw(b"a/.wh..")), r'whiteout "a/\.wh\.\." names no file'),
        "unknown type": (raw_tar(_raw(b"v", b"V")), r'entry "v" has unsupported type'),
        "truncated payload": (raw_tar(_raw(b"f", data=b"x" * 2000))[:1024],
                              "unexpected end of data"),
        "truncated header": (raw_tar(_raw(b"f", data=b"x"))[:1500], "unexpected end of data"),
        "half a header": (raw_tar(_raw(b"f"))[:300], "unexpected end of data"),
        "pax header, then the end": (tar(file("p" * 200))[:1024] + bytes(1024),
                                     "extended header without an entry at offset 1024"),
        "huge owner": (tar(file("x", uid=2**40)), r'malformed header .*"x": .*out of range'),
        "huge time": (tar(file("x", mtime=2**66)), r'malformed header .*"x": .*out of range'),
        "garbage size on a directory": (header(b"d", b"5", fields={124: b"zz\0"}) + bytes(1024),
                                        "malformed header at offset 0"),
        "garbage": (random.Random(2).randbytes(4096),
                    r"bad header checksum at offset 0 \(not a tar archive\?\)"),
        "corrupt gzip": (gzip.compress(b"x" * 5000)[:30] + b"\0" * 20, "corrupt gzip data"),
        "truncated gzip": (gzip.compress(os.urandom(5000))[:-100],
                           "corrupt gzip data: unexpected end of data"),
    }


@pytest.mark.parametrize("case", sorted(malicious(b"")))
def test_bad_archives_are_refused(tmp_path: Path, case: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    data, message = malicious(bytes(outside))[case]
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(InvalidParameter, match="^invalid layer archive: " + message):
        apply_layer(open_decompressed(io.BytesIO(data)), dest, io.BytesIO())
    assert list(outside.iterdir()) == []


def test_absolute_names_are_taken_relative_to_the_root(tmp_path: Path) -> None:
    apply(raw_tar(_raw(b"/abs/x", data=b"a"), _raw(b"./rel//y/", b"5"),
                  _raw(b"h", b"1", link=b"/abs/x")), tmp_path / "d")
    assert (tmp_path / "d/abs/x").read_bytes() == b"a"
    assert (tmp_path / "d/rel/y").is_dir()
    assert (tmp_path / "d/h").stat().st_ino == (tmp_path / "d/abs/x").stat().st_ino


def test_entries_replace_what_is_in_their_way(tmp_path: Path) -> None:
    data = tar(directory("x"), file("x/in", b"1"), file("x", b"now a file"),
               symlink("l", "x"), directory("l"), file("l/f", b"2"),
               file("h", b"orig"), hardlink("h2", "h"), file("h2", b"new"))
    apply(data, tmp_path / "d")
    assert (tmp_path / "d/x").read_bytes() == b"now a file"
    assert (tmp_path / "d/l").is_dir() and not (tmp_path / "d/l").is_symlink()
    assert (tmp_path / "d/h").read_bytes() == b"orig"  # never written through a hard link
    assert (tmp_path / "d/h2").read_bytes() == b"new"


class _FullDisk(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failing_skeleton_write_fails_the_apply(tmp_path: Path) -> None:
    """The skeleton is compressed and written by a helper thread; its error is not lost."""
    threads = threading.active_count()
    data = tar(*(file(f"f{i}", os.urandom(3000)) for i in range(400)))
    with pytest.raises(OSError, match="No space left"):
        apply_layer(io.BytesIO(data), tmp_path, _FullDisk())  # type: ignore[arg-type]
    assert threading.active_count() == threads


def test_empty_and_end_only_archives(tmp_path: Path) -> None:
    for i, data in enumerate((b"", bytes(1024), bytes(10240))):
        diff_id, skeleton = apply(data, tmp_path / str(i))
        assert diff_id == sha(data)
        assert rebuild(skeleton, tmp_path / str(i)) == data
