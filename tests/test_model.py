"""Inventory semantics (Ansible's), assertions and the Jinja2 sandbox."""

from __future__ import annotations

import pytest
from support import PLAYBOOK, SIM_INVENTORY

from k3rollout.model import load_inventory, load_playbook
from k3rollout.model.assertions import evaluate, render, render_argv
from k3rollout.model.inventory import expand_hostname


def test_sim_inventory_has_an_h200_rack_and_a_b300_rack_with_one_fault():
    inv = load_inventory(SIM_INVENTORY)
    hosts = inv.select("gpu_nodes")
    assert len(hosts) == 16 and hosts[0] == "gpu-a01" and hosts[-1] == "gpu-b08"
    assert inv.group_hosts("rack_a") == [f"gpu-a{i:02d}" for i in range(1, 9)]
    for h in hosts:
        v = inv.hosts[h].vars
        gpu = ("NVIDIA H200", 8, 141) if h.startswith("gpu-a") else ("NVIDIA B300 SXM6 AC", 8, 268)
        assert (v["k3_gpu_model"], v["k3_gpu_count"], v["k3_gpu_mem_gib"], v["driver_version"]) == (*gpu, "575.57.08")
        # the H200 rack runs DeepEP across nodes: its modprobe.d sets the module options it needs
        assert ("PeerMappingOverride=1" in v.get("sim_nvidia_module_options", "")) == h.startswith("gpu-a")
    faulty = [h for h in hosts if inv.hosts[h].vars["sim_faults"]]
    assert faulty == ["gpu-a08"]
    assert set(inv.hosts["gpu-a08"].groups) == {"gpu_nodes", "rack_a"}


def test_variable_precedence_follows_ansible(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    a: inv_all\n    b: inv_all\n    c: inv_all\n    d: inv_all\n"
        "  children:\n    parent:\n      vars:\n        b: inv_parent\n      children:\n        child:\n"
        "          vars:\n            c: inv_child\n          hosts:\n            n1:\n              d: inv_host\n")
    (tmp_path / "group_vars" / "all.yml").write_text("a: gv_all\nb: gv_all\nc: gv_all\nd: gv_all\n")
    (tmp_path / "group_vars" / "parent.yml").write_text("e: gv_parent\nc: gv_parent\n")
    (tmp_path / "group_vars" / "child.yml").write_text("e: gv_child\n")
    (tmp_path / "host_vars" / "n1.yml").write_text("f: hv\n")
    v = load_inventory(tmp_path / "hosts.yml").hosts["n1"].vars
    # inventory-file group vars < group_vars/all < group_vars/<group> (parent < child)
    # < inventory-file host vars < host_vars/<host>
    assert v["a"] == "gv_all" and v["b"] == "gv_all"
    assert v["c"] == "gv_parent" and v["e"] == "gv_child"
    assert v["d"] == "inv_host" and v["f"] == "hv"


@pytest.mark.parametrize("pattern,expected", [
    ("gpu-[01:03]", ["gpu-01", "gpu-02", "gpu-03"]),
    ("n[a:c]", ["na", "nb", "nc"]),
    ("x[1:7:3]", ["x1", "x4", "x7"]),
    ("r[1:2]-g[1:2]", ["r1-g1", "r1-g2", "r2-g1", "r2-g2"]),
])
def test_host_ranges_expand_like_ansible(pattern, expected):
    assert expand_hostname(pattern) == expected


def test_host_patterns_union_intersection_exclusion():
    inv = load_inventory(SIM_INVENTORY)
    assert inv.select("rack_a:&~gpu-a0[12]") == ["gpu-a01", "gpu-a02"]
    # as in Ansible, a trailing [x-y] is a subscript (positions), not a character class
    assert inv.select("rack_a:&gpu-a0[1-2]") == []
    assert inv.select("gpu_nodes:!rack_b") == inv.group_hosts("rack_a")
    assert inv.select("gpu-b08:gpu-a01") == ["gpu-b08", "gpu-a01"]


def test_assertions_are_strict_and_support_ansible_version_test():
    ctx = {"facts": {"driver_version": "580.95.05", "gpu_count": 8}}
    assert evaluate("facts.driver_version is version('580', '>=')", ctx).passed
    assert not evaluate("facts.driver_version is version('580.95.10', '>=')", ctx).passed
    missing = evaluate("facts.gpu_cuont == 8", ctx)
    assert not missing.passed and "undefined" in missing.error
    assert not evaluate("facts.gpu_count / 0", ctx).passed


def test_sandbox_blocks_python_internals_and_io():
    for expr in ("().__class__.__bases__[0].__subclasses__()", "facts.__class__.__init__.__globals__",
                 "lipsum.__globals__.os.environ"):
        r = evaluate(expr, {"facts": {}})
        assert not r.passed and r.error, expr


def test_host_data_is_never_templated_again():
    hostile = {"pkg": "{{ lipsum.__globals__ }}", "name": "x; rm -rf / #", "nl": "a\nb"}
    argv = render_argv(["echo", "{{ pkg }}", "{{ name }}", "{{ nl }}"], hostile)
    assert argv == ["echo", "{{ lipsum.__globals__ }}", "x; rm -rf / #", "a\nb"]
    assert render("{{ name }}-suffix", hostile) == "x; rm -rf / #-suffix"


def test_shipped_playbook_loads_with_the_seven_domain_steps_in_order():
    pb = load_playbook(PLAYBOOK)
    kinds = [s.stage for s in pb.stages]
    assert kinds == ["baseline", "cordon", "driver_upgrade", "cuda_check", "vllm_smoke", "features", "multinode",
                     "uncordon"]
    for s in pb.stages:
        assert s.pre is not None and s.post is not None, s.stage
    features = next(s for s in pb.stages if s.stage == "features").typed_params()
    assert "--enable-prefix-caching" in features.args
    smoke = next(s for s in pb.stages if s.stage == "vllm_smoke").typed_params()
    assert "--enable-prefix-caching" not in smoke.args


def test_a_block_of_assertions_evaluates_as_each_expression_alone():
    """evaluate_all shares one merged context across a block; every result (value, error,
    undefined name, a variable shadowing a sandbox global) is the one the expression gets
    evaluated on its own by Jinja2."""
    from k3rollout.model.assertions import _compiled, evaluate_all

    ctx = {"facts": {"driver_version": "580.95.05", "gpu_count": 8}, "baseline": {"driver_version": "575.57.08"},
           "range": [1, 2], "node": "gpu-01", "min_gpus": 8}
    exprs = ["facts.driver_version is version('580', '>=')", "facts.gpu_count >= min_gpus", "range | length == 2",
             "missing_var > 1", "facts.gpu_count / 0", "baseline.driver_version | branch == 575",
             "node.upper() == 'GPU-01'", "lipsum is defined", "facts.nope"]
    got = evaluate_all(exprs, ctx)
    for expr, res in zip(exprs, got, strict=True):
        try:
            alone = _compiled(expr)(**ctx)
            truth = bool(alone)      # a StrictUndefined result raises here, as in an assertion
        except Exception as exc:  # noqa: BLE001 - whatever Jinja2 raised, the block reports it as a failure
            assert res.passed is False, expr
            assert res.error, expr
            assert type(exc).__name__ in res.error or "undefined" in res.error, (expr, res.error)
        else:
            assert res.error is None, (expr, res.error)
            assert res.value == alone and res.passed is truth, expr
    assert [r.passed for r in got] == [True, True, True, False, False, True, True, True, False]
