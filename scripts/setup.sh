#!/usr/bin/env bash
# Install everything svc needs on a Debian 12 machine, idempotently:
#   - the system packages the daemon and its tests use (runc, busybox-static, iproute2, ...)
#   - the project itself into .venv/ (so .venv/bin/svcd is the daemon), with test and dev tools
#   - two client venvs used by the tests: the Docker SDK 7.0.0 and the old docker-py 1.10.6
# Re-running it only installs what is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

APT_PACKAGES=(runc busybox-static iproute2 iptables docker-registry apache2-utils openssl
              ca-certificates procps util-linux kmod)
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
# docker-registry's package starts a service on :5000; tests run their own on 127.0.0.1.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q docker-registry 2>/dev/null; then
    systemctl stop docker-registry || true
fi

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
echo "setup: ready (.venv/bin/svcd)"
