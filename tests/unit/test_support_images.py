"""The test image builders themselves (tests/support/images.py): they must be what they claim."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.support import images as im

needs_busybox = pytest.mark.skipif(not os.path.exists(im.BUSYBOX), reason="no static busybox")


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar}


def read(data: bytes, name: str) -> bytes:
    """A member's content, following docker save's ``layer.tar`` symlinks."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        m = tar.getmember(name)
        if m.issym():
            return read(data, os.path.normpath(os.path.join(os.path.dirname(name), m.linkname)))
        f = tar.extractfile(m)
        assert f is not None
        return f.read()


def read_json(data: bytes, name: str) -> Any:
    return json.loads(read(data, name))


def test_layer_tar_entry_kinds() -> None:
    data = im.layer_tar([
        im.directory("d", mode=0o700, uid=5, gid=6),
        im.file("d/f", b"abc", mode=0o4755, mtime=42, xattrs={"user.k": b"v\xff"}),
        im.symlink("d/s", "/abs/target"),
        im.hardlink("d/h", "d/f"),
        im.fifo("d/p"),
        im.char_device("d/c", 1, 3),
        im.block_device("d/b", 7, 0),
        im.whiteout("d/gone"),
        im.opaque("d"),
    ])
    m = members(data)
    assert list(m) == ["d", "d/f", "d/s", "d/h", "d/p", "d/c", "d/b", "d/.wh.gone",
                       "d/.wh..wh..opq"]
    assert m["d"].isdir() and (m["d"].mode, m["d"].uid, m["d"].gid) == (0o700, 5, 6)
    f = m["d/f"]
    assert f.isfile() and f.size == 3 and f.mode == 0o4755 and f.mtime == 42
    assert f.pax_headers["SCHILY.xattr.user.k"].encode("utf-8", "surrogateescape") == b"v\xff"
    assert m["d/s"].issym() and m["d/s"].linkname == "/abs/target"
    assert m["d/h"].islnk() and m["d/h"].linkname == "d/f"
    assert m["d/p"].isfifo()
    assert m["d/c"].ischr() and (m["d/c"].devmajor, m["d/c"].devminor) == (1, 3)
    assert m["d/b"].isblk() and (m["d/b"].devmajor, m["d/b"].devminor) == (7, 0)
    assert m["d/.wh.gone"].isfile() and m["d/.wh.gone"].size == 0
    assert im.layer_tar([im.file("x", b"1")]) == im.layer_tar([im.file("x", b"1")])


def test_digests() -> None:
    layer = im.layer_tar([im.file("x", b"1")])
    assert im.diff_id(layer) == "sha256:" + hashlib.sha256(layer).hexdigest()
    assert im.diff_id(im.gzip_bytes(layer)) == im.diff_id(layer)
    assert im.gzip_bytes(layer) == im.gzip_bytes(layer)
    d = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    second = "sha256:" + hashlib.sha256(f"{d[0]} {d[1]}".encode()).hexdigest()
    assert im.chain_ids(d) == [d[0], second]


@needs_busybox
def test_busybox_rootfs() -> None:
    data = im.busybox_rootfs_tar()
    m = members(data)
    names = list(m)
    assert m["bin/busybox"].isfile() and m["bin/busybox"].mode == 0o755
    for applet in im.REQUIRED_APPLETS:
        link = m[f"bin/{applet}"]
        assert link.islnk() and link.linkname == "bin/busybox", applet
        assert names.index(f"bin/{applet}") > names.index("bin/busybox")
    for d in ["bin", "dev", "etc", "proc", "sys", "root", "var", "usr/bin", "home/svcuser"]:
        assert m[d].isdir(), d
    assert m["tmp"].mode == 0o1777 and m["home/svcuser"].uid == 1000
    assert all(i.mtime == im.FIXED_MTIME for i in m.values())
    passwd = read(data, "etc/passwd").decode()
    assert "svcuser:x:1000:1000:" in passwd and passwd.startswith("root:x:0:0:")
    assert "nobody:x:65534:" in passwd and "staff:x:50:svcuser" in read(data, "etc/group").decode()
    assert im.busybox_rootfs_tar() is data, "cached in-process"
    assert im.busybox_rootfs_tar.__wrapped__() == data, "deterministic, so the diff id is stable"
    sym = members(im.busybox_rootfs_tar("symlink"))
    assert sym["bin/sh"].issym() and sym["bin/sh"].linkname == "busybox"


def two_images() -> list[im.SaveImage]:
    base = im.layer_tar([im.directory("etc"), im.file("etc/base", b"base")])
    top = im.layer_tar([im.file("etc/top", b"top")])
    return [
        im.SaveImage([base, top], repo_tags=["app", "127.0.0.1:5000/team/app:v1"],
                     config={"Cmd": ["sh"], "Env": [im.PATH_ENV]}, extra={"author": "t"}),
        im.SaveImage([base], repo_tags=["docker.io/library/base:1"], gzip_layers=True),
    ]


def check_manifest(data: bytes, images: list[im.SaveImage]) -> list[dict[str, Any]]:
    """manifest.json, the configs, the layer files and repositories agree with each other."""
    manifest = read_json(data, "manifest.json")
    repos = read_json(data, "repositories")
    assert len(manifest) == len(images)
    for item, img in zip(manifest, images, strict=True):
        raw = read(data, item["Config"])
        assert item["Config"] == hashlib.sha256(raw).hexdigest() + ".json"
        assert "sha256:" + item["Config"].removesuffix(".json") == img.image_id()
        config = json.loads(raw)
        assert (config["architecture"], config["os"]) == ("amd64", "linux")
        assert config["rootfs"] == {"type": "layers", "diff_ids": img.diff_ids()}
        assert len(config["history"]) == len(item["Layers"]) and config["created"]
        stored = [read(data, path) for path in item["Layers"]]
        assert [im.diff_id(s) for s in stored] == config["rootfs"]["diff_ids"]
        assert item["RepoTags"] == (img.repo_tag_strings() or None)
        top = item["Layers"][-1].split("/")[0]
        for tag in item["RepoTags"] or []:
            name, _, t = tag.rpartition(":")
            assert repos[name][t] == top
        check_layer_dirs(data, item["Layers"])
    return list(manifest)


def check_layer_dirs(data: bytes, layers: list[str]) -> None:
    parent = None
    for path in layers:
        v1id = path.split("/")[0]
        assert read(data, f"{v1id}/VERSION") == b"1.0"
        doc = read_json(data, f"{v1id}/json")
        assert doc["id"] == v1id and doc.get("parent") == parent
        parent = v1id


def test_docker_save_manifest_layout() -> None:
    images = two_images()
    data = im.docker_save_tar(images)
    manifest = check_manifest(data, images)
    assert manifest[0]["RepoTags"] == ["app:latest", "127.0.0.1:5000/team/app:v1"]
    assert manifest[1]["RepoTags"] == ["base:1"]
    assert json.loads(images[0].config_json())["author"] == "t"
    base_dir = manifest[0]["Layers"][0].split("/")[0]
    m = members(data)
    # Same base layer: the plain one of image 0 is stored, the gzip one of image 1 is a
    # different v1 id (its json differs) whose layer.tar links to it, as docker does.
    second = manifest[1]["Layers"][0]
    assert m[second].issym() and m[second].linkname == f"../{base_dir}/layer.tar"
    names = list(m)
    assert names.index("manifest.json") > max(names.index(p) for p in manifest[0]["Layers"])
    top = read_json(data, manifest[0]["Layers"][1].replace("layer.tar", "json"))
    assert top["config"] == images[0].config
    below = read_json(data, f"{base_dir}/json")
    assert below["created"] == im.EPOCH and below["container_config"]["Cmd"] is None


def test_docker_save_gzip_and_duplicates() -> None:
    layer = im.layer_tar([im.file("same", b"x")])
    img = im.SaveImage([layer, layer, im.layer_tar([])], repo_tags=["dup:1"], gzip_layers=True)
    data = im.docker_save_tar([img])
    (item,) = check_manifest(data, [img])
    m = members(data)
    first, second, _ = item["Layers"]
    assert read(data, first)[:2] == b"\x1f\x8b"
    assert m[second].issym() and m[second].linkname == "../" + first
    assert m[first].isfile()


def test_docker_save_shared_base_written_once() -> None:
    base = im.layer_tar([im.file("b", b"b")])
    imgs = [im.SaveImage([base, im.layer_tar([im.file(n, n.encode())])], repo_tags=[n])
            for n in ("one", "two")]
    data = im.docker_save_tar(imgs)
    manifest = check_manifest(data, imgs)
    assert manifest[0]["Layers"][0] == manifest[1]["Layers"][0]
    assert sum(1 for n in members(data) if n.endswith("/layer.tar")) == 3


def test_docker_save_legacy_layout() -> None:
    images = two_images()
    data = im.docker_save_tar(images, layout="legacy")
    names = set(members(data))
    assert "manifest.json" not in names and not any(n.endswith(".json") for n in names)
    repos = read_json(data, "repositories")
    assert set(repos) == {"app", "127.0.0.1:5000/team/app", "base"}
    top = repos["app"]["latest"]
    doc = read_json(data, f"{top}/json")
    assert doc["config"] == images[0].config and doc["container_config"]["Cmd"][:2] == [
        "/bin/sh", "-c"]
    parent = read_json(data, f"{doc['parent']}/json")
    assert "parent" not in parent and "config" not in parent
    assert parent["created"] == im.CREATED
    assert im.diff_id(read(data, f"{top}/layer.tar")) == images[0].diff_ids()[1]
    assert im.diff_id(read(data, f"{parent['id']}/layer.tar")) == images[0].diff_ids()[0]


def test_docker_save_both_layout() -> None:
    images = two_images()
    data = im.docker_save_tar(images, layout="both")
    manifest = check_manifest(data, images)
    below = read_json(data, manifest[0]["Layers"][0].replace("layer.tar", "json"))
    assert below["created"] == im.CREATED and below["container_config"]["Cmd"][0] == "/bin/sh"


def test_whiteout_layers_merge_to_expected_tree() -> None:
    layers = im.whiteout_image_layers()
    assert 3 <= len(layers) <= 4
    assert im.merged_tree(layers) == im.whiteout_expected_tree()
    gz = [im.gzip_bytes(layer) for layer in layers]
    assert im.merged_tree(gz) == im.whiteout_expected_tree()
    kinds = {n for layer in layers for n in members(layer)}
    assert {"etc/.wh.b.conf", "data/.wh.old", "opq/.wh..wh..opq"} <= kinds


def test_merged_tree_rules() -> None:
    lower = im.layer_tar([im.directory("o"), im.file("o/old", b"1"), im.file("f", b"f")])
    upper = im.layer_tar([im.file("o/new", b"2"), im.opaque("o"), im.hardlink("g", "f"),
                          im.fifo("p/q")])
    tree = im.merged_tree([lower, upper])
    assert set(tree) == {"o", "o/new", "f", "g", "p", "p/q"}, "opaque keeps this layer's files"
    assert tree["g"] == tree["f"] and tree["p"] == im.Node("dir", mode=0o755)
    assert tree["p/q"].kind == "fifo"


def test_tree_from_dir_matches_model(tmp_path: Path) -> None:
    layer = im.whiteout_image_layers()[0]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        tar.extractall(tmp_path, filter="fully_trusted")
    assert im.tree_from_dir(tmp_path) == im.merged_tree([layer])


def test_deep_layers() -> None:
    layers = im.deep_image_layers()
    assert len(layers) == 64 and len(set(map(im.diff_id, layers))) == 64
    tree = im.merged_tree(layers)
    assert tree["deep/top"].data == b"63\n"
    assert sum(1 for p in tree if p.startswith("deep/0")) == 64
    assert len(im.deep_image_layers(3)) == 3


def test_malicious_tars() -> None:
    bad = im.malicious_tars()
    assert set(bad) == {"dotdot", "absolute_symlink_parent", "hardlink_outside",
                        "symlink_parent_relative", "truncated", "garbage", "corrupt_gzip"}
    assert list(members(bad["dotdot"])) == ["../escape"]
    m = members(bad["absolute_symlink_parent"])
    assert m["a"].linkname == im.ESCAPE_TARGET and "a/x" in m
    assert members(bad["hardlink_outside"])["evil"].linkname == "../../etc/passwd"
    assert members(bad["symlink_parent_relative"])["b"].linkname == "../.."
    for name in ("truncated", "garbage"):
        with pytest.raises(tarfile.TarError):
            with tarfile.open(fileobj=io.BytesIO(bad[name])) as tar:
                for member in tar:
                    f = tar.extractfile(member)
                    if f is not None:
                        f.read()
    assert bad["corrupt_gzip"][:2] == b"\x1f\x8b"
    with pytest.raises((OSError, EOFError, zlib.error, tarfile.TarError)):
        im.uncompressed(bad["corrupt_gzip"])
