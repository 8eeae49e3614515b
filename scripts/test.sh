#!/usr/bin/env bash
# Install everything the test suite needs into .venv and run it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# System packages the tests need: openssh-server (real sshd test hosts), chromium (the
# HTML report is checked in a real headless browser) and kubectl.
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# the real kubectl drives the simulated Kubernetes API server (Debian's kubernetes-client
# where the image has no kubectl)
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
# a real Slurm controller on loopback (tests/support/slurm_cluster.py): munged, slurmctld, slurmd, scontrol/sbatch
for b in munged slurmctld slurmd scontrol; do
  command -v $b >/dev/null 2>&1 || [ -x /usr/sbin/$b ] || { need+=(munge slurmctld slurmd slurm-client); break; }
done
# srun --mpi=pmix: Debian's mpi/pmix plugin loads the unversioned libpmix.so of libpmix-dev
ls /usr/lib/*/pmix2/lib/libpmix.so >/dev/null 2>&1 || need+=(libpmix-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "scripts/test.sh: missing system packages: ${need[*]} (apt-get install ${need[*]})" >&2
    [ "${CI:-}" = true ] && exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
# The suite starts Python processes by the thousand (CLI runs, the simulated clusters' daemons,
# ansible-playbook, the fork servers, pytest's workers): each compiles every module it imports
# that has no cached bytecode. An environment with PYTHONDONTWRITEBYTECODE set (some container
# images set it) never caches any, and every process compiles the project again; the caches go to
# __pycache__/, which git ignores.
unset PYTHONDONTWRITEBYTECODE
# static checks first (configured in pyproject.toml and .importlinter): lint, layering, types
.venv/bin/ruff check k3rollout k3sim tests bench scripts setup.py
.venv/bin/lint-imports --no-cache
.venv/bin/mypy
# five workers on two cores: most of a test's time is spent waiting on the processes it drives (sim daemons,
# sshd, ansible-playbook, chromium, simulated reboots), not on the CPU (four workers kept the two
# cores 1.45 busy; five took the suite from 579 s to 529 s). Tests marked `long` are
# collected first (tests/conftest.py) and handed out one at a time (--maxschedchunk 1: a worker
# gets its next test when it finishes one, not a block of the collection), so the long ones
# start at once on different workers and the short ones fill in around them.
exec .venv/bin/python -m pytest -q -n "${K3ROLLOUT_TEST_WORKERS:-5}" --maxschedchunk 1 "$@"
