"""``--live-restore``: containers keep running while the daemon is stopped or killed, and the
next daemon takes them back as if it had never left (the CLI and both SDKs see the same
containers, processes, addresses, logs without a gap or a repeat, stdin, TTY, exec, stop); one
that exits meanwhile gets its real exit code, finish time and ``die``, and its restart
policy."""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx

from svc.network.firewall import owner_of
from tests.conftest import run_sdk
from tests.liverestore.conftest import (
    alive,
    cli,
    curl,
    go_away,
    inspect,
    rfc3339,
    wait_for,
)
from tests.support.daemon import Daemon
from tests.support.etcdd import free_port

COUNTER = "i=0; while true; do echo n$i; i=$((i+1)); sleep 0.02; done"


def _numbers(d: Daemon, ref: str) -> list[tuple[float, int]]:
    out = []
    for line in cli(d, "logs", "-t", ref).splitlines():
        stamp, _, text = line.partition(" ")
        out.append((rfc3339(stamp), int(text.removeprefix("n"))))
    return out


def _addresses(d: Daemon, ref: str) -> str:
    return inspect(d, ref, "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}")


def test_containers_run_on_while_the_daemon_is_away(lr: Daemon) -> None:
    """The daemon stopped with SIGTERM (its supervisors let go: the harder path; a SIGKILL's
    is the kill cycles', the SDKs' and the 50 MB's)."""
    cli(lr, "network", "create", "lrnet")
    cli(lr, "run", "-d", "--name", "counter", "--restart", "always", "busybox", "sh", "-c",
        COUNTER)
    cli(lr, "run", "-d", "--name", "peer", "--net", "lrnet", "--net-alias", "buddy",
        "busybox", "sleep", "300")
    cli(lr, "run", "-dit", "--name", "tty", "busybox", "sh")
    cli(lr, "run", "-di", "--name", "cat", "busybox", "cat")
    port = free_port()
    cli(lr, "run", "-d", "--name", "web", "-p", f"{port}:80", "busybox", "sh", "-c",
        "echo served > /index.html; exec httpd -f -p 80 -h /")
    web_ip = inspect(lr, "web", "{{.NetworkSettings.IPAddress}}")
    cli(lr, "run", "-d", "--name", "client", "busybox", "sh", "-c",
        f"while true; do ping -c 1 -W 1 {web_ip} >/dev/null && echo reached; sleep 0.2; done")
    names = ["counter", "peer", "tty", "cat", "web", "client"]
    pids = {n: inspect(lr, n, "{{.State.Pid}}") for n in names}
    addresses = {n: _addresses(lr, n) for n in names}
    wait_for(lambda: len(_numbers(lr, "counter")) >= 5, what="the counter's first lines")
    assert cli(lr, "info", "-f", "{{json .LiveRestoreEnabled}}").strip() == "true"
    cli(lr, "pause", "peer")
    gateway = inspect(lr, "web", "{{.NetworkSettings.Gateway}}")
    urls = [f"http://127.0.0.1:{port}/", f"http://{gateway}:{port}/"]
    assert [curl(u) for u in urls] == ["served", "served"]
    rules_before = _port_rules(lr)

    go_away(lr, "term")
    down_at = time.time()
    time.sleep(1.0)
    assert all(alive(int(pid)) for pid in pids.values())  # nothing died with the daemon
    assert [curl(u) for u in urls] == ["served", "served"]  # the rules carry it meanwhile
    up_at = time.time()
    lr.start()

    assert sorted(cli(lr, "ps", "--format", "{{.Names}}").split()) == sorted(names)
    assert {n: inspect(lr, n, "{{.State.Pid}}") for n in names} == pids
    assert {n: _addresses(lr, n) for n in names} == addresses
    assert inspect(lr, "counter", "{{.RestartCount}}") == "0"  # taken back, not restarted
    # containers reached each other while the daemon was away
    reached = [rfc3339(line.partition(" ")[0])
               for line in cli(lr, "logs", "-t", "client").splitlines() if "reached" in line]
    assert any(down_at < t < up_at for t in reached), "no answer from web while away"
    assert [curl(u) for u in urls] == ["served", "served"]
    assert _port_rules(lr) == rules_before  # none made twice, none lost
    assert inspect(lr, "counter", "{{.State.Status}}") == "running"
    assert inspect(lr, "peer", "{{.State.Status}}") == "paused"
    cli(lr, "unpause", "peer")
    assert "sleep 300" in cli(lr, "top", "peer")
    assert "counter" in cli(lr, "stats", "--no-stream", "--format", "{{.Name}}", "counter")
    follow = subprocess.run(["timeout", "1", "docker", "-H", f"unix://{lr.sock}", "logs",
                             "-f", "--tail", "1", "counter"], capture_output=True, text=True)
    assert len(follow.stdout.splitlines()) > 5  # logs -f gets the live stream
    # the lines written while the daemon was away are in the log: none lost, none twice
    logged = _numbers(lr, "counter")
    assert [n for _, n in logged] == list(range(len(logged)))
    assert any(down_at < t < up_at for t, _ in logged), "no line from the time away"
    wait_for(lambda: len(_numbers(lr, "counter")) > len(logged) + 5, what="new lines")
    # its address is still its own; names on the user network resolve again
    other = cli(lr, "run", "-d", "busybox", "sleep", "300").strip()
    assert _addresses(lr, other) not in addresses.values()
    assert "buddy" in cli(lr, "run", "--rm", "--net", "lrnet", "busybox", "ping", "-c", "1",
                          "-W", "2", "buddy")
    # exec, TTY resize, stdin
    assert cli(lr, "exec", "counter", "echo", "hi") == "hi\n"
    cli(lr, "exec", "tty", "true")  # (a running shell)
    _resize(lr, "tty", 40, 100)
    assert cli(lr, "exec", "tty", "stty", "-F", "/dev/console", "size").strip() == "40 100"
    assert _attach_echo(lr, "cat", "hello after the restart\n") == "hello after the restart"
    # stop and wait work on a container the daemon took back
    cli(lr, "stop", "-t", "1", "counter")
    assert inspect(lr, "counter", "{{.State.Status}} {{.State.ExitCode}}") == "exited 137"
    assert not alive(int(pids["counter"]))


def _port_rules(d: Daemon) -> list[str]:
    """This daemon's published-port rules, as iptables-save shows them."""
    owner = owner_of((d.root / "engine-id").read_text().strip())
    out = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    return sorted(line for line in out.splitlines() if f"svc:{owner}:ports-" in line)


def _resize(d: Daemon, ref: str, h: int, w: int) -> None:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                          "--unix-socket", str(d.sock),
                          f"http://svc/v1.23/containers/{ref}/resize?h={h}&w={w}"],
                         capture_output=True, text=True, timeout=10)
    assert out.stdout == "200", out


def _attach_echo(d: Daemon, ref: str, text: str) -> str:
    """``docker attach`` with ``text`` on its stdin; the first line it prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    proc = subprocess.Popen(["docker", "-H", f"unix://{d.sock}", "attach", ref],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        time.sleep(0.3)  # attached
        proc.stdin.write(text)
        proc.stdin.flush()
        return proc.stdout.readline().rstrip("\n")
    finally:
        proc.kill()
        proc.wait()


def test_a_run_that_ends_at_once_ends_after_it_started(lr: Daemon) -> None:
    """An end seen by the daemon is stamped now, as without conmon: the exit file's time is
    the kernel's coarse clock, and came before the recorded start of ``true``."""
    for i in range(10):
        cli(lr, "run", "--name", f"quick{i}", "busybox", "true")
        started, finished, code = inspect(
            lr, f"quick{i}", "{{.State.StartedAt}} {{.State.FinishedAt}} {{.State.ExitCode}}"
        ).split()
        assert code == "0"
        assert rfc3339(started) <= rfc3339(finished), (started, finished)


def test_a_container_that_exits_while_away_gets_its_exit_and_its_policy(lr: Daemon) -> None:
    cli(lr, "run", "-d", "--name", "ends", "--restart", "on-failure:1", "busybox", "sh", "-c",
        "echo run; sleep 1; echo bye; exit 3")
    gone = cli(lr, "run", "-d", "--name", "gone", "busybox", "sleep", "300").strip()
    wait_for(lambda: "run" in cli(lr, "logs", "ends"), what="the first run")
    assert lr.stop() == 0
    subprocess.run(["runc", "--root", str(lr.exec_root / "runc"), "delete", "--force", gone],
                   check=True)  # removed from outside while the daemon is away
    down_at = time.time()
    time.sleep(2.0)  # it exits meanwhile
    up_at = time.time()
    lr.start()
    finished = rfc3339(inspect(lr, "ends", "{{.State.FinishedAt}}"))
    assert down_at < finished < up_at
    events = cli(lr, "events", "--since", str(int(down_at) - 1), "--until",
                 str(int(time.time()) + 1), "--filter", "container=ends",
                 "--filter", "event=die",
                 "--format", "{{.TimeNano}} {{.Actor.Attributes.exitCode}}")
    first = events.splitlines()[0].split()
    assert first[1] == "3" and down_at < int(first[0]) / 1e9 < up_at
    assert "bye" in cli(lr, "logs", "ends")  # written while the daemon was away
    wait_for(lambda: inspect(lr, "ends", "{{.RestartCount}}") == "1", what="its restart")
    wait_for(lambda: inspect(lr, "ends", "{{.State.Status}}") == "exited", what="its 2nd end")
    assert inspect(lr, "ends", "{{.State.ExitCode}}") == "3"
    # the one removed from outside: exited, and nothing of it left in the runtime
    assert inspect(lr, "gone", "{{.State.Status}} {{.State.ExitCode}}") == "exited 137"
    runc = subprocess.run(["runc", "--root", str(lr.exec_root / "runc"), "list", "-q"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert gone not in runc
    cli(lr, "rm", "gone")


def test_fifty_megabytes_written_while_away_are_all_logged(lr: Daemon) -> None:
    size = 50_000_000
    cid = cli(lr, "run", "-d", "busybox", "sh", "-c",
              f"sleep 1; yes 0123456789012345678901234567890123456789012345678 | "
              f"head -c {size}; echo; echo END; sleep 300").strip()
    lr.kill()
    spooled = lr.root / "containers" / cid / "shim" / "spool"
    wait_for(lambda: spooled.exists() and spooled.stat().st_size > size, timeout=60,
             what="the shim's spool of the output")
    lr.start()
    log = lr.root / "containers" / cid / f"{cid}-json.log"
    wait_for(lambda: b"END" in log.read_bytes()[-200:], timeout=60, what="the end in the log")
    logged = sum(len(json.loads(line)["log"]) for line in log.read_bytes().splitlines())
    assert logged == size + len("\nEND\n")


SDK7 = """
import sys, time, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
if sys.argv[2] == "before":
    ctr = c.containers.run("busybox", ["sh", "-c", "echo one; sleep 300"], detach=True,
                           name="sdk")
    while b"one" not in ctr.logs():
        time.sleep(0.05)
else:
    ctr = c.containers.get("sdk")
    assert ctr.status == "running", ctr.status
    assert ctr.logs() == b"one\\n", ctr.logs()
    ctr.kill()
    print(ctr.wait()["StatusCode"])
"""

DOCKERPY1 = """
import sys, time, docker
c = docker.Client(base_url=sys.argv[1], version="1.22")
if sys.argv[2] == "before":
    ctr = c.create_container("busybox", ["sh", "-c", "echo one; sleep 300"], name="old")
    c.start(ctr)
    while b"one" not in c.logs("old"):
        time.sleep(0.05)
else:
    assert c.inspect_container("old")["State"]["Running"]
    assert c.logs("old") == b"one\\n", c.logs("old")
    c.kill("old")
    print(c.wait("old"))
"""


def test_both_sdks_see_their_containers_after_a_crash(lr: Daemon) -> None:
    url = f"unix://{lr.sock}"
    run_sdk("sdk7", SDK7, url, "before")
    run_sdk("dockerpy1", DOCKERPY1, url, "before")
    go_away(lr, "kill")
    lr.start()
    assert run_sdk("sdk7", SDK7, url, "after").strip() == "137"
    assert run_sdk("dockerpy1", DOCKERPY1, url, "after").strip() == "137"


def test_exec_sessions_go_on_and_keep_their_exit_codes(lr: Daemon) -> None:
    """An exec running when the daemon goes is known to the next one: running, then ended
    with its own exit code; one that ended meanwhile has its code too."""
    cli(lr, "run", "-d", "--name", "box", "busybox", "sleep", "300")

    def exec_detached(c: httpx.Client, script: str) -> str:
        eid = c.post("/v1.23/containers/box/exec",
                     json={"Cmd": ["sh", "-c", script], "AttachStdout": False}).json()["Id"]
        assert c.post(f"/v1.23/exec/{eid}/start", json={"Detach": True}).status_code == 200
        return str(eid)

    with _client(lr) as c:
        long = exec_detached(c, "sleep 8; exit 5")
        short = exec_detached(c, "sleep 0.5; exit 7")
        assert c.get(f"/v1.23/exec/{long}/json").json()["Running"] is True
        assert cli(lr, "exec", "box", "echo", "through conmon") == "through conmon\n"
    go_away(lr, "kill")
    time.sleep(1.0)  # the short one ends meanwhile
    lr.start()
    with _client(lr) as c:
        got = c.get(f"/v1.23/exec/{short}/json").json()
        assert (got["Running"], got["ExitCode"]) == (False, 7)
        assert c.get(f"/v1.23/exec/{long}/json").json()["Running"] is True
        wait_for(lambda: not c.get(f"/v1.23/exec/{long}/json").json()["Running"],
                 what="the long exec's end")
        assert c.get(f"/v1.23/exec/{long}/json").json()["ExitCode"] == 5
        assert inspect(lr, "box", "{{.State.Status}}") == "running"


def _client(d: Daemon) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                        timeout=30)
