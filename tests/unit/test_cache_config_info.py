"""vllm:cache_config_info (vllm/v1/metrics/loggers.py): the server's own KV block size."""

from k3rollout.checks.parsers import cache_block_tokens, parse_cache_config_info

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="1536",cache_dtype="auto",cache_hit_alignment_tokens="None",\
enable_prefix_caching="True",engine="0",mamba_block_size="1536"} 1.0
"""


def test_the_labels_are_read_and_the_block_is_the_larger_of_attention_and_mamba():
    info = parse_cache_config_info(METRICS)
    assert info is not None and info["enable_prefix_caching"] == "True"
    assert cache_block_tokens(info) == 1536
    assert cache_block_tokens({"block_size": "16", "mamba_block_size": "None"}) == 16
    assert cache_block_tokens({"block_size": "1536", "mamba_block_size": "3072"}) == 3072
    assert cache_block_tokens({"block_size": "1536", "cache_hit_alignment_tokens": "64"}) == 64
    assert cache_block_tokens({}) is None


def test_a_server_without_the_family_gives_none():
    assert parse_cache_config_info(METRICS.split("# HELP vllm:cache_config_info")[0]) is None
