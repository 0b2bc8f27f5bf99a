#!/usr/bin/env bash
# Install everything svc needs on a Debian 12 machine, idempotently:
#   - the system packages the daemon and its tests use (runc, busybox-static, iproute2, ...)
#   - the project itself into .venv/ (so .venv/bin/svcd is the daemon), with test and dev tools
#   - two client venvs used by the tests: the Docker SDK 7.0.0 and the old docker-py 1.10.6
#   - docker-py 1.10.6's own integration suite: its sdist in .dockerpy/ and a Python 3.6 venv,
#     .venv-dockerpy, with the tag's pins (scripts/dockerpy-suite.sh runs it)
# Re-running it only installs what is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

APT_PACKAGES=(runc busybox-static iproute2 iptables docker-registry etcd-server apache2-utils openssl
              ca-certificates procps util-linux kmod curl
              systemd rsyslog rsyslog-gnutls    # journald/journalctl and rsyslogd: log drivers' tests
              conmon                            # tests: containers older builds left under it
              libc6-dev)                        # svc-shim is built static (svc/runtime/shim/)
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# docker-registry's and etcd-server's packages start services (:5000, :2379); tests run their
# own on addresses and ports of their choosing. (rsyslog's is left alone: it listens on no
# port, and the log drivers' tests run their own rsyslogd on free ports and private sockets.)
for unit in docker-registry etcd; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q "$unit" 2>/dev/null; then
        systemctl stop "$unit" || true
    fi
done

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then   # Debian's python3 splits venv out
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=".venv/.svc-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[test,dev]"
    touch "$stamp"
fi
# svc's own bytecode, compiled now: an editable install compiles nothing, and where
# PYTHONDONTWRITEBYTECODE is set (as on CI's machines) every daemon start compiled ~190
# modules from source again (0.4 s of each start). Quick when nothing changed.
.venv/bin/python -m compileall -q svc tests bench >/dev/null
# svc-shim, the C program that holds a container while no daemon does (svc/runtime/shim/):
# static, so that each one maps no shared library (its RSS is its own, a few hundred KiB).
shim_src=svc/runtime/shim/svc-shim.c
if [ ! -x .venv/bin/svc-shim ] || [ "$shim_src" -nt .venv/bin/svc-shim ]; then
    gcc -O2 -Wall -Wextra -Werror -static -o .venv/bin/svc-shim.tmp "$shim_src"
    mv .venv/bin/svc-shim.tmp .venv/bin/svc-shim
fi
# libsvcwire.so, the C twin of the json-file log's fast path (svc/wire/native.py): docker
# logs of a long log is framed in C; without it, in Python, a quarter as fast.
wire_src=svc/wire/native/jsonlog_frames.c
if [ ! -f .venv/lib/svc/libsvcwire.so ] || [ "$wire_src" -nt .venv/lib/svc/libsvcwire.so ]; then
    mkdir -p .venv/lib/svc
    gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o .venv/lib/svc/libsvcwire.so.tmp "$wire_src"
    mv .venv/lib/svc/libsvcwire.so.tmp .venv/lib/svc/libsvcwire.so
fi

# Client venvs: each SDK installs the same 'docker' module, so each gets its own venv.
client_venv() {   # name, packages...
    local dir=".venv-$1"; shift
    local want="$*"
    if [ ! -x "$dir/bin/python" ] || [ "$(cat "$dir/.want" 2>/dev/null)" != "$want" ]; then
        rm -rf "$dir"
        "$PY" -m venv "$dir"
        "$dir/bin/pip" install -q "$@"
        echo "$want" > "$dir/.want"
    fi
}
client_venv sdk7 "docker==7.0.0" "requests==2.31.0"
client_venv dockerpy1 "docker-py==1.10.6" "requests==2.31.0" "urllib3<2"

# docker-py 1.10.6's own integration suite (scripts/dockerpy-suite.sh): its PyPI sdist, which
# ships tests/, unpacked into .dockerpy/ (gitignored), and a Python 3.6 venv with the tag's
# own pins (test-requirements.txt) plus docker-py itself from that sdist.
DOCKERPY_SDIST="docker-py-1.10.6.tar.gz"
DOCKERPY_SHA256="4c2a75875764d38d67f87bc7d03f7443a3895704efc57962bdf6500b8d4bc415"
DOCKERPY_PINS=("pytest==2.9.1" "requests==2.11.1" "websocket-client==0.32.0"
               "docker-pycreds==0.2.1" "six>=1.4.0" "mock==1.0.1")
if [ ! -f ".dockerpy/$DOCKERPY_SDIST" ]; then
    rm -rf .dockerpy/dist && mkdir -p .dockerpy/dist
    .venv/bin/pip download -q --no-binary :all: --no-deps -d .dockerpy/dist docker-py==1.10.6
    echo "$DOCKERPY_SHA256  .dockerpy/dist/$DOCKERPY_SDIST" | sha256sum -c --quiet -
    mv ".dockerpy/dist/$DOCKERPY_SDIST" .dockerpy/ && rm -rf .dockerpy/dist
fi
if [ ! -f .dockerpy/docker-py-1.10.6/tests/integration/conftest.py ]; then
    rm -rf .dockerpy/docker-py-1.10.6
    tar -xzf ".dockerpy/$DOCKERPY_SDIST" -C .dockerpy --no-same-owner
fi
want="$DOCKERPY_SHA256 ${DOCKERPY_PINS[*]}"
if [ ! -x .venv-dockerpy/bin/python ] || [ "$(cat .venv-dockerpy/.want 2>/dev/null)" != "$want" ]; then
    py36="${PYTHON36:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/3.6.15/bin/python3.6}"
    if [ ! -x "$py36" ] && command -v pyenv >/dev/null 2>&1; then
        pyenv install -s 3.6.15
    fi
    if [ ! -x "$py36" ]; then
        echo "setup: Python 3.6 not found at $py36 (set PYTHON36, or install pyenv's 3.6.15)" >&2
        exit 1
    fi
    rm -rf .venv-dockerpy
    "$py36" -m venv .venv-dockerpy
    .venv-dockerpy/bin/pip install -q "${DOCKERPY_PINS[@]}"
    .venv-dockerpy/bin/pip install -q --no-deps ".dockerpy/$DOCKERPY_SDIST"
    echo "$want" > .venv-dockerpy/.want
fi
# docker-compose 1.9.0 (the last 1.x whose version-2 files speak API 1.22) as a client of the
# tests, on the same Python 3.6, with the versions its own requirements resolve to.
COMPOSE_PINS=("docker-compose==1.9.0" "docker-py==1.10.6" "requests==2.11.1"
              "PyYAML==3.13" "jsonschema==2.6.0" "texttable==0.8.8" "docopt==0.6.2"
              "dockerpty==0.4.1" "cached-property==1.5.2" "websocket-client==0.59.0"
              "docker-pycreds==0.4.0" "six==1.17.0")
want="${COMPOSE_PINS[*]}"
if [ ! -x .venv-compose/bin/docker-compose ] || [ "$(cat .venv-compose/.want 2>/dev/null)" != "$want" ]; then
    py36="${PYTHON36:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/3.6.15/bin/python3.6}"
    rm -rf .venv-compose
    "$py36" -m venv .venv-compose
    .venv-compose/bin/pip install -q "${COMPOSE_PINS[@]}"
    echo "$want" > .venv-compose/.want
fi
echo "setup: ready (.venv/bin/svcd)"
