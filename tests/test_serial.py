"""Batches follow Ansible's `serial` exactly (ansible-core _get_serialized_batches/pct_to_int)."""

import pytest

from k3rollout.plan.serial import pct_to_int, serial_batches

H = [f"h{i:02d}" for i in range(1, 41)]


def sizes(hosts, serial):
    return [len(b) for b in serial_batches(hosts, serial)]


@pytest.mark.parametrize("serial,n,expected", [
    (3, 7, [3, 3, 1]),                       # docs: "serial: 3" runs 3 hosts at a time
    ("30%", 10, [3, 3, 3, 1]),               # docs: percentage of the play's hosts
    ([1, 5, 10], 20, [1, 5, 10, 4]),         # docs: a list, last value repeats
    ([1, 5, 10], 40, [1, 5, 10, 10, 10, 4]),
    (["10%", "20%", "100%"], 20, [2, 4, 14]),  # docs example with percentages
    ("25%", 3, [1, 1, 1]),                   # rounds down to 0, then min 1
    (0, 5, [5]),                             # 0: all hosts in one batch
    (None, 5, [5]),
    ([1, "50%"], 6, [1, 3, 2]),
])
def test_serial_matches_ansible_examples(serial, n, expected):
    assert sizes(H[:n], serial) == expected


def test_serial_keeps_inventory_order_and_every_host_once():
    batches = serial_batches(H[:20], [1, 2, "25%"])
    flat = [h for b in batches for h in b]
    assert flat == H[:20]
    assert [len(b) for b in batches] == [1, 2, 5, 5, 5, 2]


def test_pct_to_int_is_taken_of_all_hosts_and_rounds_down():
    assert pct_to_int("33%", 10) == 3
    assert pct_to_int("9%", 10) == 1
    assert pct_to_int("5", 10) == 5
