"""Model profiles: the shipped Kimi K3 profile, the loader's errors, playbook overrides."""

import pytest
from support import write_playbook

from k3rollout.errors import InputError
from k3rollout.model import load_playbook
from k3rollout.model.profile import load_profile
from k3rollout.resources import shipped

K3 = shipped("playbooks", "profiles", "kimi-k3.yml")



def test_shipped_k3_profile_holds_the_recipe_facts():
    p = load_profile(K3)
    assert p.prefix_cache_block_tokens == 1536 and p.engine_ready_timeout_s == 3600
    assert round(p.footprint.need_gib, 1) == 1564.6            # 1680 GB
    assert p.all2all.rdma == "deepep_v2" and p.all2all.nvlink == "flashinfer_nvlink_one_sided"
    hop, bw = p.launch_for("NVIDIA H200"), p.launch_for("NVIDIA B300")
    assert hop.args.count("--moe-backend") == 1 and hop.args[hop.args.index("--moe-backend") + 1] == "marlin"
    assert "--enable-prefix-caching" in bw.args and "--enable-prefix-caching" not in hop.args
    assert "--no-enable-prefix-caching" in hop.args         # 0.33 caches by default: off takes the flag
    assert "fastsafetensors" in bw.args and "fastsafetensors" not in hop.args
    assert hop.env["VLLM_ENGINE_READY_TIMEOUT_S"] == bw.env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    assert bw.args[-4:] == ["--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"]
    assert p.generation("NVIDIA GB200") == "blackwell" and p.generation("NVIDIA H100 80GB HBM3") == "hopper"
    # a whole-word match: GB200 is not B200
    assert [x.name for x in p.layouts_for("NVIDIA GB200")] == ["tp8"]


def test_profile_error_names_file_and_line(tmp_path):
    text = K3.read_text().replace("prefix_cache_block_tokens: 1536", "prefix_cache_block_tokens: lots")
    bad = tmp_path / "bad.yml"
    bad.write_text(text)
    with pytest.raises(InputError) as e:
        load_profile(bad)
    line = text.splitlines().index("prefix_cache_block_tokens: lots") + 1
    assert f"{bad}:{line}:" in str(e.value) and "prefix_cache_block_tokens" in str(e.value)


def test_layout_min_gpus_must_match_its_arithmetic(tmp_path):
    text = K3.read_text().replace("    pp: 4\n    min_gpus: 32", "    pp: 4\n    min_gpus: 16")
    bad = tmp_path / "bad.yml"
    bad.write_text(text)
    with pytest.raises(InputError, match=r"tp8-pp4: min_gpus 16 is not tp\*pp\*dp"):
        load_profile(bad)


def test_playbook_overrides_merge_and_errors_point_at_the_playbook(tmp_path):
    pb = load_playbook(write_playbook(tmp_path / "pb.yml", profile="kimi-k3",
                                      profile_overrides={"prefix_cache_block_tokens": 1024,
                                                         "footprint": {"vram_minimum_gb": 1600}}))
    assert pb.profile.prefix_cache_block_tokens == 1024
    assert pb.profile.footprint.vram_minimum_gb == 1600 and pb.profile.footprint.weights_gb == 1500
    path = write_playbook(tmp_path / "pb2.yml", profile="kimi-k3", profile_overrides={"layout": "tp4"})
    with pytest.raises(InputError) as e:
        load_playbook(path)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "layout: tp4" in t)
    assert f"{path}:{line}:" in str(e.value) and "not one of the profile's layouts" in str(e.value)
    with pytest.raises(InputError, match="no model profile 'nope'"):
        load_playbook(write_playbook(tmp_path / "pb3.yml", profile="nope"))
    with pytest.raises(InputError, match="profile_overrides needs a `profile:`"):
        load_playbook(write_playbook(tmp_path / "pb4.yml", profile_overrides={"layout": "tp8"}))
