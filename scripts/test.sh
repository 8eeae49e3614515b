#!/usr/bin/env bash
# Install everything the test suite needs into .venv and run it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# System packages the tests need: openssh-server for the real sshd test hosts.
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
  else
    echo "scripts/test.sh: openssh-server is missing; install it (apt-get install openssh-server)" >&2
    [ "${CI:-}" = true ] && exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest -q "$@"
