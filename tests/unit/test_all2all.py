"""Where vLLM builds an all-to-all manager (ParallelConfig.use_all2all, vllm/config/parallel.py)."""

import pytest

from k3rollout.checks.all2all import all2all_in_use, builds_all2all


@pytest.mark.parametrize("dp,ep,pcp,built", [
    (1, True, 1, False),        # TP16/EP16 across two nodes: the TP group's collectives, no manager
    (2, True, 1, True),         # data parallel with experts: vLLM's DP+EP form
    (2, False, 1, True),        # data parallel alone also sets use_all2all
    (1, True, 2, True),         # expert parallel with prefill context parallel
    (1, False, 2, False),
])
def test_builds_all2all_follows_vllms_use_all2all(dp, ep, pcp, built):
    assert builds_all2all(dp, ep, pcp) is built


def test_the_backend_a_command_line_runs():
    tp16 = ["--tensor-parallel-size", "16", "--enable-expert-parallel", "--all2all-backend", "deepep_v2",
            "--nnodes", "2"]
    assert all2all_in_use(tp16) is None
    assert all2all_in_use([*tp16, "--data-parallel-size", "2"]) == "deepep_v2"
    assert all2all_in_use(["--enable-expert-parallel", "--data-parallel-size=4"]) == "allgather_reducescatter"
    assert all2all_in_use(["--enable-expert-parallel", "-pcp", "2", "--all2all-backend=deepep_v2"]) == "deepep_v2"
    assert all2all_in_use(["--data-parallel-size", "2"]) is None     # no expert parallel: nothing for the gate
