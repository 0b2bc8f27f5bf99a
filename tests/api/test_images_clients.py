"""The docker CLI and the SDKs (API 1.23) driving svc's image endpoints."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from tests.conftest import docker_cli, run_sdk
from tests.support import images as timg
from tests.support.daemon import Daemon


def test_docker_cli_image_commands(spawn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d: Daemon = spawn()
    host = d.url
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(timg.busybox_rootfs_tar())
    out = docker_cli(host, "import", "--change", "CMD [\"sh\"]", "--message", "via cli",
                     str(rootfs), "busybox:cli")
    assert out.returncode == 0, out.stderr
    image_id = out.stdout.strip()
    assert image_id.startswith("sha256:")

    layers = [timg.layer_tar([timg.file(f"f{i}", b"x" * 1000)]) for i in range(3)]
    save = tmp_path / "save.tar"
    save.write_bytes(timg.docker_save_tar([timg.SaveImage(layers, repo_tags=["chain:top"])],
                                          layout="legacy"))
    out = docker_cli(host, "load", "-i", str(save))
    assert out.returncode == 0, out.stderr
    assert "Loaded image: chain:top" in out.stdout

    out = docker_cli(host, "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    assert sorted(out.stdout.split("\n")[:-1])[0].startswith("busybox:cli ")
    assert len(out.stdout.splitlines()) == 2
    assert len(docker_cli(host, "images", "-a", "-q").stdout.split()) == 4
    dangling = docker_cli(host, "images", "-f", "dangling=true", "-q").stdout.split()
    assert dangling == []
    digests = docker_cli(host, "images", "--digests")
    assert digests.returncode == 0 and "DIGEST" in digests.stdout

    assert docker_cli(host, "tag", "busybox:cli", "127.0.0.1:5000/me/bb:1").returncode == 0
    # `docker images REPO` (filter= below API 1.25): only that repository's tags, though the
    # image has others
    mine = docker_cli(host, "images", "--format", "{{.Repository}}:{{.Tag}}",
                      "127.0.0.1:5000/me/bb")
    assert mine.stdout.split() == ["127.0.0.1:5000/me/bb:1"], mine
    insp = json.loads(docker_cli(host, "inspect", "127.0.0.1:5000/me/bb:1").stdout)
    assert insp[0]["Id"] == image_id and insp[0]["Config"]["Cmd"] == ["sh"]
    assert insp[0]["Comment"] == "via cli"
    fmt = docker_cli(host, "image", "inspect", "-f", "{{.Os}} {{len .RootFS.Layers}}",
                     "busybox:cli")
    assert fmt.stdout.strip() == "linux 1"

    hist = docker_cli(host, "history", "--no-trunc", "--format", "{{.ID}} {{.Size}}",
                      "chain:top")
    assert hist.returncode == 0 and len(hist.stdout.splitlines()) == 3

    out_file = tmp_path / "out.tar"
    assert docker_cli(host, "save", "-o", str(out_file), "busybox:cli").returncode == 0
    with tarfile.open(out_file) as t:
        manifest = json.loads(t.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert manifest[0]["RepoTags"] == ["busybox:cli"]

    rmi = docker_cli(host, "rmi", "127.0.0.1:5000/me/bb:1")
    assert "Untagged: 127.0.0.1:5000/me/bb:1" in rmi.stdout
    rmi = docker_cli(host, "rmi", "busybox:cli")
    assert "Untagged: busybox:cli" in rmi.stdout and f"Deleted: {image_id}" in rmi.stdout
    missing = docker_cli(host, "rmi", "busybox:cli")
    assert missing.returncode != 0 and "No such image" in missing.stderr

    # save -> rmi -> load with the CLI gives back the same image
    docker_cli(host, "save", "-o", str(out_file), "chain:top")
    top_id = json.loads(docker_cli(host, "inspect", "chain:top").stdout)[0]["Id"]
    assert docker_cli(host, "rmi", "chain:top").returncode == 0
    assert docker_cli(host, "images", "-a", "-q").stdout.strip() == ""
    assert "Loaded image: chain:top" in docker_cli(host, "load", "-i", str(out_file)).stdout
    assert json.loads(docker_cli(host, "inspect", "chain:top").stdout)[0]["Id"] == top_id


SDK7 = """
import io, json, sys, docker
c = docker.APIClient(base_url=sys.argv[1], version="1.23")
out = {}
rootfs = open(sys.argv[2], "rb").read()
res = c.import_image_from_data(rootfs, repository="sdk", tag="one")
out["import"] = res
c.tag("sdk:one", "sdk", "two")
out["images"] = c.images()
out["inspect"] = c.inspect_image("sdk:two")
out["history"] = c.history("sdk:one")
saved = c.get_image("sdk:one")
data = b"".join(saved)
out["rm"] = c.remove_image("sdk:two")
c.remove_image("sdk:one")
out["after_rm"] = c.images(all=True)
c.load_image(data)
out["reloaded"] = c.inspect_image("sdk:one")["Id"]
print(json.dumps(out))
"""


def test_sdk7_image_calls(daemon: Daemon, tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(timg.busybox_rootfs_tar())
    out = json.loads(run_sdk("sdk7", SDK7, daemon.url, str(rootfs)))
    image_id = out["inspect"]["Id"]
    assert image_id in out["import"]
    assert any("sdk:two" in i["RepoTags"] for i in out["images"])
    assert out["history"][0]["Id"] == image_id
    assert out["rm"] == [{"Untagged": "sdk:two"}]
    assert not any(i["Id"] == image_id for i in out["after_rm"])
    assert out["reloaded"] == image_id


DOCKERPY1 = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
out = {}
out["import"] = c.import_image_from_data(open(sys.argv[2], "rb").read(), repository="old",
                                         tag="py")
out["inspect"] = c.inspect_image("old:py")
c.tag("old:py", "old", "other")
out["images"] = c.images(name="old")
out["history"] = c.history("old:py")
raw = c.get_image("old:py").data
c.remove_image("old:other")
c.remove_image("old:py")
c.load_image(raw)
out["reloaded"] = c.inspect_image("old:py")["Id"]
print(json.dumps(out))
"""


def test_dockerpy1_image_calls(daemon: Daemon, tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(timg.busybox_rootfs_tar())
    out = json.loads(run_sdk("dockerpy1", DOCKERPY1, daemon.url, str(rootfs)))
    image_id = out["inspect"]["Id"]
    assert sorted(t for i in out["images"] for t in i["RepoTags"]) == ["old:other", "old:py"]
    assert out["history"][0]["Id"] == image_id
    assert out["reloaded"] == image_id


SDK7_BAD_LOAD = """
import sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
try:
    c.images.load(b"this is not an image archive" * 100)
except docker.errors.ImageLoadError as exc:
    print("ImageLoadError:", exc)
"""


def test_sdk7_load_of_a_bad_archive_raises_its_load_error(daemon: Daemon) -> None:
    """dockerd answers 200 with the error in the stream; the SDK raises ImageLoadError from
    that line (a 400 made it raise a bare APIError instead)."""
    out = run_sdk("sdk7", SDK7_BAD_LOAD, daemon.url)
    assert out.startswith("ImageLoadError: invalid image archive"), out
