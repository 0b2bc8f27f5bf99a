"""Run docker-py 1.10.6's own integration suite, unmodified, against fresh svc test daemons.

    .venv/bin/python -m tests.dockerpy.run [--api 1.23] [--api 1.22] [-- pytest args]

For each API version (1.23, then 1.22, unless ``--api`` says otherwise): start a test daemon
of its own (tests/support/daemon.py: own root, socket, bridge, cgroup parent), load the
suite's two images into it through the API, run the suite's ``tests/integration`` with its
own pins (.venv-dockerpy: Python 3.6, pytest 2.9.1, requests 2.11.1, ...; see
scripts/setup.sh) and ``DOCKER_HOST`` at that daemon's socket, then stop the daemon and
remove everything it made, whatever happened. The plugin svc_dockerpy_plugin.py sets the
API version and applies skip.txt and xfail.txt.

Prints ``API x: N passed, N failed, N skipped, N xfailed`` per version and each failing
test with a one-line reason; exits non-zero when a test failed or errored, a strict xfail
passed, the lists are stale, or a daemon did not start or stop cleanly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support import images
from tests.support.daemon import REPO, Daemon

HERE = Path(__file__).resolve().parent
SUITE = REPO / ".dockerpy" / "docker-py-1.10.6"  # scripts/setup.sh unpacks the sdist here
PYTHON = REPO / ".venv-dockerpy" / "bin" / "python"  # and makes this venv
VERSIONS = ("1.23", "1.22")
TEST_TIMEOUT = 20  # seconds, per test (the plugin fails the test)
RUN_TIMEOUT = 900  # seconds, per API version (the backstop: pytest is killed)

# The suite's images. BUSYBOX in its helpers is busybox:buildroot-2014.02, whose
# /etc/passwd has the user "default" (uid 1000) that test_exec_command_as_user runs as;
# the network tests and create_and_start() use busybox:latest.
DEFAULT_PASSWD = """\
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
nobody:x:99:99:nobody:/home:/bin/false
default:x:1000:1000:Default non-root user:/home/default:/bin/sh
"""
DEFAULT_GROUP = """\
root:x:0:
daemon:x:1:
tty:x:5:
nogroup:x:99:
default:x:1000:
"""
IMAGE_NAMES = ("busybox:latest", "busybox:buildroot-2014.02")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def suite_images_tar() -> bytes:
    """A ``docker save`` tarball of both images: busybox:latest is svc's test busybox
    rootfs (from the host's busybox-static); busybox:buildroot-2014.02 adds a layer with
    the ``default`` user over it and, like the 2014 image on Docker Hub, sets no ``Env``
    (test_create_with_environment_variable_no_value expects Config.Env to be exactly the
    variables it passed, and a daemon adds the image's Env to Config.Env)."""
    base = images.busybox_rootfs_tar()
    users = images.layer_tar([
        images.directory("etc"), images.file("etc/group", DEFAULT_GROUP.encode()),
        images.file("etc/passwd", DEFAULT_PASSWD.encode()), images.directory("home"),
        images.directory("home/default", uid=1000, gid=1000)])
    return images.docker_save_tar([images.SaveImage([base], ["busybox:latest"]),
                                   images.SaveImage([base, users], [IMAGE_NAMES[1]],
                                                     config={"Cmd": ["/bin/sh"]})])


def load_images(daemon: Daemon) -> None:
    """``POST /images/load`` the suite's images; fail unless both are there afterwards."""
    transport = httpx.HTTPTransport(uds=str(daemon.sock))
    with httpx.Client(transport=transport, base_url="http://svc", timeout=120) as client:
        res = client.post("/v1.23/images/load", content=suite_images_tar(),
                          headers={"Content-Type": "application/x-tar"})
        if res.status_code != 200 or '"error"' in res.text:
            raise RuntimeError(f"loading the suite's images: {res.status_code} {res.text}")
        for name in IMAGE_NAMES:
            got = client.get(f"/v1.23/images/{name}/json")
            if got.status_code != 200:
                raise RuntimeError(f"{name} missing after the load: {got.status_code}")


@dataclass
class Result:
    api: str
    seconds: float = 0.0
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # not a test's: the run's own

    def count(self) -> Counter[str]:
        return Counter(t["outcome"] for t in self.tests.values())

    def bad(self) -> list[tuple[str, dict[str, Any]]]:
        return sorted((k, t) for k, t in self.tests.items()
                      if t["outcome"] in ("failed", "error", "xpassed"))

    def ok(self) -> bool:
        return not self.problems and not self.bad() and bool(self.tests)

    def summary(self) -> str:
        n = self.count()
        failed = n["failed"] + n["error"] + n["xpassed"]
        extra = f" ({n['error']} of them errors)" if n["error"] else ""
        return (f"API {self.api}: {n['passed']} passed, {failed} failed{extra}, "
                f"{n['skipped']} skipped, {n['xfailed']} xfailed in {self.seconds:.1f} s")


def suite_env(daemon: Daemon, api: str, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DOCKER_", "PYTHON", "PYTEST", "SVC_DOCKERPY_"))}
    home = work / "home"
    (home / ".docker").mkdir(parents=True)
    env.update(
        DOCKER_HOST=daemon.url,  # the suite's docker_client() reads it (kwargs_from_env)
        HOME=str(home), DOCKER_CONFIG=str(home / ".docker"),  # no user's credentials
        TMPDIR=str(work),  # the suite's bind-mount sources and tars, removed with `work`
        PYTHONPATH=str(HERE), PYTHONDONTWRITEBYTECODE="1",
        SVC_DOCKERPY_API_VERSION=api, SVC_DOCKERPY_REPORT=str(work / "report.json"),
        SVC_DOCKERPY_TEST_TIMEOUT=str(TEST_TIMEOUT))
    return env


def run_version(api: str, pytest_args: list[str]) -> Result:
    result = Result(api)
    daemon = Daemon()
    work = Path(tempfile.mkdtemp(prefix="svct-dockerpy-"))
    t0 = time.monotonic()
    try:
        daemon.start()
        load_images(daemon)
        targets = [] if any(a.startswith("tests/") for a in pytest_args) else [
            "tests/integration"]
        cmd = [str(PYTHON), "-m", "pytest", "-p", "svc_dockerpy_plugin",
               "-p", "no:cacheprovider", "-rfEX", "--tb=short", *targets, *pytest_args]
        print(f"\n== docker-py 1.10.6 integration suite, API {api}, daemon {daemon.url}",
              flush=True)
        try:
            proc = subprocess.run(cmd, cwd=SUITE, env=suite_env(daemon, api, work),
                                  stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT, check=False)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
            result.problems.append(f"pytest killed after {RUN_TIMEOUT} s")
        report = work / "report.json"
        if report.exists():
            result.tests = json.loads(report.read_text())["tests"]
        elif code is not None:
            result.problems.append(f"pytest exited with {code} and wrote no report")
        if code not in (None, 0, 1):
            result.problems.append(f"pytest exited with {code} (2 interrupted, 3 internal "
                                   f"error, 4 usage error, 5 no tests)")
        if code == 1 and not result.bad():
            result.problems.append("pytest exited with 1 and no failing test was reported")
        stopped = daemon.stop()
        if stopped != 0:
            result.problems.append(f"svcd exited with {stopped} at the end")
        if daemon.forked_without_exec():
            result.problems.append("svcd forked without exec (see its log)")
    except Exception as exc:  # the daemon or the image load: report it, clean up, go on
        result.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        result.seconds = time.monotonic() - t0
        if result.problems:
            log = daemon.log()
            print(f"-- svcd log (API {api}), last 60 lines:", *log.splitlines()[-60:],
                  sep="\n", file=sys.stderr)
        daemon.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Arguments after -- go to the suite's pytest (e.g. -k exec).")
    parser.add_argument("--api", action="append", choices=VERSIONS,
                        help="an API version to run at (repeatable; default: 1.23 and 1.22)")
    parser.add_argument("pytest_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    missing = [str(p) for p in (PYTHON, SUITE / "tests" / "integration") if not p.exists()]
    if missing:
        print(f"dockerpy-suite: missing {', '.join(missing)}: run scripts/setup.sh",
              file=sys.stderr)
        return 2
    # a CI cancel (SIGTERM) unwinds like ^C: pytest is killed and the daemon cleaned up
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    results = [run_version(api, args.pytest_args) for api in args.api or VERSIONS]
    print("\n== docker-py 1.10.6 integration suite against svc")
    for r in results:
        print(r.summary())
        for nodeid, t in r.bad():
            print(f"  {t['outcome'].upper()} {nodeid} - {t['reason']}")
        for problem in r.problems:
            print(f"  RUN PROBLEM: {problem}")
    ok = all(r.ok() for r in results)
    print(f"docker-py suite {'passed' if ok else 'FAILED'} in {time.monotonic() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
