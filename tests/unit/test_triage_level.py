"""Triage reads a line's log level from its first words: INFO/DEBUG lines count a quarter,
WARNING lines 0.6, everything else in full. A level word inside an error's message is not the
line's level."""

from __future__ import annotations

import pytest

from k3rollout.checks.triage import _level, classify

LEVELS = [
    # the error word comes first: the "info" or "warning" after it is part of the message
    ("Error info: NVIDIA driver on your system is too old (found version 6000)....", "error"),
    ("ERROR 05-02 10:00:01 WARNING: something went wrong", "error"),
    ("RuntimeError: info about the failure follows", "error"),
    ("E0412 10:00:00.123 main.go:132] INFO requested", "error"),
    ("FATAL warn: giving up", "error"),
    # the usual shapes keep their level
    ("INFO 07-18 09:30:02 [core.py:77] Initializing a V1 LLM engine", "info"),
    ("INFO:torch.distributed.launcher.api:Starting elastic_operator", "info"),
    ("[2024-01-06 11:41:34,489] [INFO] [real_accelerator.py:161:get_accelerator] Setting ds_accelerator", "info"),
    ("(RayWorkerWrapper pid=1234, ip=10.0.0.2) INFO 01-02 10:00:00 worker.py:1] KV cache usage", "info"),
    ("I0412 10:00:00.123 main.go:40] Starting", "info"),
    ("WARNING 05-02 10:00:01 [arg_utils.py:1] may cause out of memory", "warning"),
    ("W0412 10:00:00.123 main.go:40] retrying", "warning"),
    ("/usr/lib/python3/dist-packages/torch/cuda/__init__.py:52: UserWarning: CUDA initialization: x", "warning"),
    ("RuntimeError: CUDA error: out of memory", "error"),
    # PyTorch's C++ logging (c10/util/Logging.cpp): one letter of "FEWIV" in brackets, the file and
    # line, the date since 2.2, and a "[rankN]:" prefix once the rank is known
    ("[W socket.cpp:601] [c10d] The IPv6 network addresses of (head, 29500) cannot be retrieved", "warning"),
    ("[rank0]:[W1205 10:00:00.123456789 ProcessGroupNCCL.cpp:1168] process group has NOT been destroyed", "warning"),
    ("[I socket.cpp:100] [c10d] The server socket has started to listen on [::]:29500.", "info"),
    ("[rank1]:[I1205 10:00:00.123456789 ProcessGroupNCCL.cpp:900] ProcessGroupNCCL initialization options", "info"),
    ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout", "error"),
    # Go's log/slog and logrus: the level key before msg=, wherever the line starts
    ('time=2025-10-03T13:16:39.335+02:00 level=INFO source=gpu.go:377 msg="no compatible GPUs were discovered"',
     "info"),
    ('Oct 03 13:16:39 host ollama[26513]: time=2025-10-03T13:16:39.335+02:00 level=WARN source=x.go:1 msg="y"',
     "warning"),
    ('time="2024-01-01T00:00:00Z" level=error msg="failed to create shim task"', "error"),
    # a level= inside the message, after msg=, is not the line's level
    ('time="2024-01-01T00:00:00Z" msg="set level=info for the plugin" error', "error"),
    # a bracketed word that only starts with the letter is not the level
    ("[Installing] packages for the worker", "error"),
]


@pytest.mark.parametrize("line,level", LEVELS)
def test_a_lines_level_is_its_first_level_word(line, level):
    assert _level(line) == level


def test_an_error_line_that_says_info_is_not_damped():
    # pytorch/pytorch#920: the line "Error info: NVIDIA driver on your system is too old" was read
    # as an INFO line, counted a quarter and fell below the bar
    t = classify("Error info: NVIDIA driver on your system is too old (found version 6000)....\n")
    assert t.category == "driver_incompatible"
    assert t.scores["driver_incompatible"] >= 4.0
