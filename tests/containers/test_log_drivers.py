"""Log drivers end to end (issue 28): containers run by the real CLI and both SDKs with
``--log-driver journald|syslog|gelf|fluentd``, their lines arriving at real receivers with the
engines' fields; ``docker logs`` and ``logs -f`` read back from the journal; bad options
refused at create naming the option; an unreachable receiver failing the start where the
engines failed it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.conftest import docker_cli, run_sdk
from tests.runtime.conftest import skip_reason
from tests.support.daemon import Daemon, with_busybox
from tests.support.fluentd_receiver import fluentd_receiver
from tests.support.gelf_receiver import gelf_receiver
from tests.support.journald import PrivateJournald, private_journald
from tests.support.rsyslog import Rsyslog, rsyslog


@pytest.fixture(scope="module")
def journal() -> Iterator[PrivateJournald]:
    with private_journald() as j:
        yield j


@pytest.fixture(scope="module")
def syslogd() -> Iterator[Rsyslog]:
    with rsyslog() as r:
        yield r


@pytest.fixture(scope="module")
def ld(journal: PrivateJournald) -> Iterator[Daemon]:
    """A daemon whose journald driver writes to the test's private journal."""
    if reason := skip_reason():
        pytest.skip(reason)
    env = {"SVC_JOURNAL_SOCKET": journal.socket, "SVC_JOURNAL_DIRECTORY": journal.directory}
    with with_busybox(Daemon(env=env)) as d:
        yield d


def cli(d: Daemon, *args: str, ok: bool = True) -> str:
    proc = docker_cli(d.url, *args)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc.stdout if ok else proc.stderr


def test_journald_fields_and_docker_logs(ld: Daemon, journal: PrivateJournald) -> None:
    cid = cli(ld, "run", "-d", "--name", "jfields", "--log-driver", "journald",
              "--log-opt", "tag={{.Name}}/{{.ImageName}}", "--log-opt", "labels=team",
              "--log-opt", "env=STAGE", "--label", "team=core", "-e", "STAGE=test",
              "busybox", "sh", "-c", "echo out; echo err >&2; printf unfinished").strip()
    assert cli(ld, "wait", cid).strip() == "0"
    entries = journal.wait_entries(3, f"CONTAINER_ID_FULL={cid}")
    by_message = {e["MESSAGE"]: e for e in entries}
    assert set(by_message) == {"out", "err", "unfinished"}
    out = by_message["out"]
    assert (out["CONTAINER_ID"], out["CONTAINER_NAME"], out["CONTAINER_TAG"]) == \
        (cid[:12], "jfields", "jfields/busybox")
    assert (out["PRIORITY"], by_message["err"]["PRIORITY"]) == ("6", "3")
    assert (out["TEAM"], out["STAGE"], out["SYSLOG_IDENTIFIER"]) == \
        ("core", "test", "jfields/busybox")
    assert by_message["unfinished"]["CONTAINER_PARTIAL_MESSAGE"] == "true"

    proc = docker_cli(ld.url, "logs", cid)
    assert (proc.stdout, proc.stderr) == ("out\nunfinished", "err\n")
    assert cli(ld, "logs", "--tail", "1", cid) == "unfinished"
    stamped = cli(ld, "logs", "--timestamps", "--tail", "2", cid).splitlines()
    assert all(line.split(" ", 1)[0].endswith("Z") for line in stamped)


def test_journald_logs_follow_ends_with_the_container(ld: Daemon) -> None:
    cid = cli(ld, "run", "-d", "--log-driver", "journald", "busybox", "sh", "-c",
              "for i in 1 2 3; do echo line $i; sleep 0.3; done").strip()
    proc = docker_cli(ld.url, "logs", "-f", cid, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "line 1\nline 2\nline 3\n"


def test_syslog_through_the_sdk(ld: Daemon, syslogd: Rsyslog) -> None:
    script = f"""
import docker, json, sys
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
lc = docker.types.LogConfig(type="syslog", config={{
    "syslog-address": "udp://127.0.0.1:{syslogd.udp}", "syslog-format": "rfc5424",
    "syslog-facility": "local3", "tag": "{{{{.Name}}}}"}})
ctr = c.containers.run("busybox", ["sh", "-c", "echo via-sdk7"], name="sdksyslog",
                       log_config=lc, detach=True)
ctr.wait()
try:
    ctr.logs()
    err = ""
except docker.errors.APIError as exc:
    err = str(exc.explanation)
print(json.dumps({{"id": ctr.id, "err": err}}))
"""
    out = json.loads(run_sdk("sdk7", script, ld.url))
    assert "does not support reading" in out["err"]
    rec = syslogd.wait_records(1, contains="via-sdk7")[0]
    assert (rec["app"], rec["facility"], rec["severity"]) == ("sdksyslog", "19", "6")  # local3


def test_gelf_through_docker_py_1(ld: Daemon) -> None:
    async def main() -> None:
        async with gelf_receiver() as rx:
            script = f"""
import docker, sys
c = docker.Client(base_url=sys.argv[1], version="1.22")
hc = c.create_host_config(log_config={{"type": "gelf", "config": {{
    "gelf-address": "{rx.udp_address}", "gelf-compression-type": "zlib"}}}})
ctr = c.create_container("busybox", ["sh", "-c", "echo via-dockerpy1"], host_config=hc,
                         name="gelfpy1", labels={{"team": "core"}})
c.start(ctr)
c.wait(ctr)
print(ctr["Id"])
"""
            cid = (await trio.to_thread.run_sync(run_sdk, "dockerpy1", script, ld.url)).strip()
            doc = (await rx.wait_for(1))[0]
            assert doc["short_message"] == "via-dockerpy1"
            assert (doc["_container_id"], doc["_container_name"], doc["_image_name"]) == \
                (cid, "gelfpy1", "busybox")
            assert (doc["level"], doc["_tag"]) == (6, cid[:12])

    trio.run(main)


def test_fluentd_through_the_cli(ld: Daemon) -> None:
    async def main() -> None:
        async with fluentd_receiver() as rx:
            cid = (await trio.to_thread.run_sync(lambda: cli(
                ld, "run", "--name", "fluent1", "--log-driver", "fluentd",
                "--log-opt", f"fluentd-address={rx.address}", "--log-opt",
                "tag=app.{{.Name}}", "busybox", "sh", "-c", "echo one; echo two >&2"))).strip()
            entries = await rx.wait_for(2)
            assert [e.tag for e in entries] == ["app.fluent1"] * 2
            records = sorted((e.record["source"], e.log_bytes()) for e in entries)
            assert records == [("stderr", b"two"), ("stdout", b"one")]
            assert entries[0].record["container_name"] == "/fluent1"
            assert len(entries[0].record["container_id"]) == 64
            del cid

    trio.run(main)


@pytest.mark.parametrize("args, says", [
    (["--log-driver", "gelf", "--log-opt", "gelf-address=udp://127.0.0.1:1",
      "--log-opt", "bogus=1"], "bogus"),
    (["--log-driver", "syslog", "--log-opt", "syslog-facility=nowhere"], "nowhere"),
    (["--log-driver", "journald", "--log-opt", "tag={{.Nope}}"], "{{.Nope}}"),
    (["--log-driver", "fluentd", "--log-opt", "mode=fast"], "mode"),
    (["--log-driver", "splunk"], "splunk"),
])
def test_bad_options_are_refused_at_create(ld: Daemon, args: list[str], says: str) -> None:
    proc = docker_cli(ld.url, "create", *args, "busybox", "true")
    assert proc.returncode != 0
    assert says in proc.stderr, proc.stderr


def test_an_unreachable_fluentd_fails_the_start_unless_async(ld: Daemon) -> None:
    port = 9  # discard: nothing listens on 127.0.0.1:9 here
    proc = docker_cli(ld.url, "run", "--log-driver", "fluentd", "--log-opt",
                      f"fluentd-address=127.0.0.1:{port}", "busybox", "true")
    assert proc.returncode != 0 and "failed to initialize logging driver" in proc.stderr
    proc = docker_cli(ld.url, "run", "--log-driver", "fluentd", "--log-opt",
                      f"fluentd-address=127.0.0.1:{port}", "--log-opt",
                      "fluentd-async-connect=true", "--log-opt", "mode=non-blocking",
                      "busybox", "echo", "ok")
    assert proc.returncode == 0, proc.stderr


# -- a receiver that goes away -----------------------------------------------------------------

LINES = 10_000  # of 1,000 bytes: 10 MB
WRITER = ["sh", "-c", f"yes $(printf %0999d 0) | head -n {LINES}"]


def _state(d: Daemon, cid: str) -> str:
    return cli(d, "inspect", "-f", "{{.State.Status}}", cid).strip()


def _dropped(d: Daemon) -> int:
    import httpx

    with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                      timeout=30) as c:
        rows = dict(c.get("/info").json()["SystemStatus"])
    return int(rows["Log Messages Dropped"])


def test_blocking_mode_holds_the_container_until_the_receiver_is_back(ld: Daemon) -> None:
    async def main() -> None:
        async with fluentd_receiver() as rx:
            await rx.stop()
            cid = (await trio.to_thread.run_sync(lambda: cli(
                ld, "run", "-d", "--log-driver", "fluentd", "--log-opt",
                f"fluentd-address={rx.address}", "--log-opt", "fluentd-async-connect=true",
                "--log-opt", "fluentd-retry-wait=100ms", "busybox", *WRITER))).strip()
            await trio.sleep(3)
            # 10 MB cannot fit the 1 MB buffer: the container waits for the receiver
            assert await trio.to_thread.run_sync(_state, ld, cid) == "running"
            await rx.start()
            code = await trio.to_thread.run_sync(lambda: cli(ld, "wait", cid).strip())
            assert code == "0"
            entries = await rx.wait_for(LINES, timeout=60)
            assert len(entries) == LINES
            assert all(e.log_bytes() == b"0" * 999 for e in entries)

    trio.run(main)


def test_non_blocking_mode_finishes_on_time_and_counts_the_drops(ld: Daemon) -> None:
    async def main() -> None:
        async with fluentd_receiver() as rx:
            await rx.stop()
            before = await trio.to_thread.run_sync(_dropped, ld)
            t0 = trio.current_time()
            proc = await trio.to_thread.run_sync(lambda: docker_cli(
                ld.url, "run", "--log-driver", "fluentd", "--log-opt",
                f"fluentd-address={rx.address}", "--log-opt", "fluentd-async-connect=true",
                "--log-opt", "mode=non-blocking", "busybox", *WRITER))
            assert proc.returncode == 0, proc.stderr
            assert trio.current_time() - t0 < 15  # not held by the absent receiver
            with trio.fail_after(20):  # the run's flush gives up after 5 s
                while await trio.to_thread.run_sync(_dropped, ld) - before < LINES // 2:
                    await trio.sleep(0.5)

    trio.run(main)


def test_the_daemons_default_driver_from_its_config_file(tmp_path: Path) -> None:
    if reason := skip_reason():
        pytest.skip(reason)

    async def main() -> None:
        async with gelf_receiver() as rx:
            conf = tmp_path / "daemon.json"
            conf.write_text(json.dumps({"log-driver": "gelf", "log-opts": {
                "gelf-address": rx.udp_address, "tag": "dflt-{{.Name}}"}}))
            with with_busybox(Daemon(["--config-file", str(conf)])) as d:
                out = await trio.to_thread.run_sync(lambda: cli(
                    d, "run", "--name", "byconf", "busybox", "echo", "from-default"))
                assert out == "from-default\n"  # (attached: whatever the driver)
                doc = (await rx.wait_for(1))[0]
                assert (doc["short_message"], doc["_tag"]) == ("from-default", "dflt-byconf")
                info = await trio.to_thread.run_sync(lambda: cli(
                    d, "inspect", "-f", "{{json .HostConfig.LogConfig}}", "byconf"))
                assert json.loads(info) == {"Type": "gelf", "Config": {
                    "gelf-address": rx.udp_address, "tag": "dflt-{{.Name}}"}}
                assert cli(d, "info", "-f", "{{.LoggingDriver}}").strip() == "gelf"

    trio.run(main)


def test_a_daemon_shutdown_flushes_what_is_buffered() -> None:
    """Lines buffered while the receiver was down go out when it comes back during the
    daemon's shutdown (within the run's flush time, 5 s)."""
    if reason := skip_reason():
        pytest.skip(reason)

    async def main() -> None:
        async with fluentd_receiver() as rx:
            await rx.stop()
            with with_busybox(Daemon()) as d:
                await trio.to_thread.run_sync(lambda: cli(
                    d, "run", "-d", "--log-driver", "fluentd", "--log-opt",
                    f"fluentd-address={rx.address}", "--log-opt", "fluentd-async-connect=true",
                    "--log-opt", "fluentd-retry-wait=100ms", "busybox", "sh", "-c",
                    "seq 1 1000; sleep 600"))
                await trio.sleep(1)  # written, and held: nobody listens
                assert rx.entries == []
                async with trio.open_nursery() as nursery:  # the receiver is back during
                    nursery.start_soon(trio.to_thread.run_sync, d.stop)  # the shutdown
                    await trio.sleep(0.5)
                    assert d.proc is not None and d.proc.poll() is None  # still flushing
                    await rx.start()
            entries = await rx.wait_for(1000, timeout=10)
            assert [e.log_bytes() for e in entries] == [b"%d" % i for i in range(1, 1001)]

    trio.run(main)


def test_a_compose_file_with_a_logging_section(ld: Daemon, syslogd: Rsyslog,
                                               tmp_path: Path) -> None:
    """compose 1.9.0 (version-2 file, API 1.22) sends ``logging:`` as HostConfig.LogConfig."""
    from tests.containers.test_compose import COMPOSE, _compose

    if not COMPOSE.exists():
        pytest.skip(f"{COMPOSE} is missing: run scripts/setup.sh")
    (tmp_path / "docker-compose.yml").write_text(f"""version: "2"
services:
  app:
    image: busybox
    command: ["sh", "-c", "echo from-compose"]
    logging:
      driver: syslog
      options:
        syslog-address: "tcp://127.0.0.1:{syslogd.tcp}"
        tag: "compose-{{{{.Name}}}}"
""")
    name = "svctlog" + str(syslogd.tcp)
    try:
        _compose(ld, tmp_path, name, "up", "-d")
        rec = syslogd.wait_records(1, contains="from-compose")[0]
        assert rec["app"] == f"compose-{name}_app_1"
    finally:
        _compose(ld, tmp_path, name, "down", check=False)


def test_journald_logs_since(ld: Daemon) -> None:
    cid = cli(ld, "run", "-d", "--log-driver", "journald", "busybox", "sh", "-c",
              "echo early; sleep 2; echo late").strip()
    assert cli(ld, "wait", cid).strip() == "0"
    stamped = cli(ld, "logs", "--timestamps", cid).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["early", "late"]
    late = stamped[1].split(" ", 1)[0]  # RFC 3339 with nanoseconds
    since = f"{late[:19]}Z"  # the second it was read in: after "early", two seconds before
    assert cli(ld, "logs", "--since", since, cid) == "late\n"
