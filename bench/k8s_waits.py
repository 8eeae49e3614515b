"""The Kubernetes API requests of one wait: the node Ready with its GPUs after a reboot.

    python bench/k8s_waits.py [--reboot 10 30]

A simulated containerd node (sim/kubeapi.py's API server on a loopback socket) is made to
reboot for R seconds (NotReady, no ``nvidia.com/gpu``), and the kubernetes workload backend's
wait (k3rollout/workload/k8s_pods.py ``wait_watched``: a read, then a watch from it) runs
until the node is Ready with its 8 GPUs. Prints the wall time and the requests it sent, by
verb and resource (k3rollout/scheduler/k8s_calls.py). bench/README.md has the figures beside
those of the polling client it replaced.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def one(reboot_s: float) -> str:
    from k3rollout.scheduler import k8s_calls
    from k3rollout.scheduler.k8s_api import KubernetesApi
    from k3rollout.workload import k8s_pods as kp
    from k3sim import netd
    from k3sim import state as st
    from k3sim.kubeapi import KubeApiServer

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "sim"
        st.init_host(root / "gpu-01", "gpu-01", {"sim_container_runtime": "containerd"})
        try:
            with KubeApiServer(root) as api:
                pods = kp.PodApi(KubernetesApi(str(api.kubeconfig(Path(d) / "kubeconfig"))))
                with st.transaction(root / "gpu-01") as s:
                    s["down_until"] = time.time() + reboot_s
                sent = k8s_calls.totals.copy()
                t = time.monotonic()
                ok, _ = kp.wait_watched(pods, lambda: pods.node("gpu-01"), pods.node_watch("gpu-01"),
                                        lambda n: n is not None and kp.node_ready(n) and kp.allocatable_gpus(n) >= 8,
                                        600.0, 2.0)
                took = time.monotonic() - t
                calls = k8s_calls.totals - sent
        finally:
            netd.shutdown(root)
    return (f"reboot {reboot_s:g} s: {'Ready' if ok else 'not Ready'} after {took:.2f} s, "
            + ", ".join(f"{n} {k}" for k, n in sorted(calls.items())))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reboot", type=float, nargs="+", default=[10.0, 30.0])
    for r in ap.parse_args().reboot:
        print(one(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
