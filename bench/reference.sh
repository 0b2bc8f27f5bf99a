#!/bin/sh
# Start or stop a reference engine (Moby's dockerd, which starts its own containerd) for
# bench/run.py --reference. Measurement only: svc's setup and tests never use it.
#
#   bench/reference.sh start      # dockerd on $REF_DIR/docker.sock (default /tmp/ref)
#   bench/reference.sh status
#   bench/reference.sh stop       # stops it, checks for leftovers, removes $REF_DIR
#
# Everything lives under $REF_DIR: data root, exec root (containerd's state included), socket,
# pid file, log, key, a config file of its own (the host's /etc/docker/daemon.json is never
# read). Only the empty run dirs /run/docker/plugins and /run/containerd/s are made elsewhere
# (fixed paths); stop removes them.
# The host's network is left alone: no iptables rules, no docker0 bridge, no ip_forward
# change, no userland proxy. Containers get their cgroups under /svc-bench-ref.
set -eu

REF_DIR=${REF_DIR:-/tmp/ref}
SOCK=$REF_DIR/docker.sock
PIDFILE=$REF_DIR/docker.pid
LOG=$REF_DIR/dockerd.log

ping_ok() {
    curl -sf --unix-socket "$SOCK" http://docker/_ping >/dev/null 2>&1
}

start() {
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "reference engine already running: pid $(cat "$PIDFILE"), socket $SOCK"
        return 0
    fi
    if [ -S /run/containerd/containerd.sock ]; then
        echo "note: a containerd is running at /run/containerd; dockerd will use it" >&2
    fi
    mkdir -p "$REF_DIR/root" "$REF_DIR/exec"
    # the libtrust key would go to /etc/docker/key.json otherwise
    printf '{"deprecated-key-path": "%s/key.json"}\n' "$REF_DIR" > "$REF_DIR/daemon.json"
    # setsid: its own session, so a terminal's Ctrl-C does not reach it
    setsid dockerd \
        --config-file "$REF_DIR/daemon.json" \
        --data-root "$REF_DIR/root" \
        --exec-root "$REF_DIR/exec" \
        -H "unix://$SOCK" \
        --pidfile "$PIDFILE" \
        --group root \
        --storage-driver overlay2 \
        --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
        --bridge=none --userland-proxy=false \
        --cgroup-parent /svc-bench-ref \
        --exec-opt native.cgroupdriver=cgroupfs \
        --log-level warn \
        </dev/null >"$LOG" 2>&1 &
    i=0
    while ! ping_ok; do
        i=$((i + 1))
        if [ $i -gt 300 ]; then
            echo "dockerd did not answer /_ping within 30 s; log: $LOG" >&2
            tail -20 "$LOG" >&2
            exit 1
        fi
        sleep 0.1
    done
    status
}

status() {
    if ! [ -f "$PIDFILE" ] || ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "reference engine not running"
        return 1
    fi
    pid=$(cat "$PIDFILE")
    echo "dockerd pid $pid, socket $SOCK, log $LOG"
    for c in $(pgrep -P "$pid" -x containerd || true); do
        echo "containerd pid $c (started by dockerd)"
    done
}

stop() {
    if [ -f "$PIDFILE" ]; then
        pid=$(cat "$PIDFILE")
        if kill -0 "$pid" 2>/dev/null; then
            # containers first, so nothing is left running in the reference's cgroups
            ids=$(curl -sf --unix-socket "$SOCK" "http://docker/containers/json?all=1" \
                  | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4 || true)
            for id in $ids; do
                curl -sf -X DELETE --unix-socket "$SOCK" \
                    "http://docker/containers/$id?force=1" >/dev/null || true
            done
            kill -TERM "$pid"
            i=0
            while kill -0 "$pid" 2>/dev/null; do
                i=$((i + 1))
                if [ $i -gt 300 ]; then
                    echo "dockerd still running after 30 s: SIGKILL" >&2
                    kill -KILL "$pid" || true
                    break
                fi
                sleep 0.1
            done
        fi
    fi
    # mounts left under the reference's directories (overlays, netns, shm), deepest first
    grep -o " $REF_DIR/[^ ]*" /proc/self/mounts | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    for cg in /sys/fs/cgroup/*/svc-bench-ref; do
        [ -d "$cg" ] || continue
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    rm -rf "$REF_DIR"
    # run dirs dockerd and containerd make in fixed places (plugins, shim sockets), if empty
    rmdir /run/containerd/s /run/containerd /run/docker/plugins /run/docker 2>/dev/null || true
    left=""
    grep -q " $REF_DIR" /proc/self/mounts && left="$left mounts"
    ip link show docker0 >/dev/null 2>&1 && left="$left docker0"
    iptables -S 2>/dev/null | grep -qi docker && left="$left iptables"
    iptables -t nat -S 2>/dev/null | grep -qi docker && left="$left iptables-nat"
    pgrep -x containerd-shim >/dev/null && left="$left shims"
    if [ -n "$left" ]; then
        echo "reference engine stopped; LEFT BEHIND:$left" >&2
        exit 1
    fi
    echo "reference engine stopped; $REF_DIR removed; no mounts, bridge or iptables rules left"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status  (REF_DIR=${REF_DIR})" >&2; exit 2 ;;
esac
