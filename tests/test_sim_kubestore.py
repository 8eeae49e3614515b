"""The simulated API server's store (k3sim/kubestore.py): a save writes the rows that
changed, and a new store reads back the same data, in the same order."""

from __future__ import annotations

from k3sim import kubestore


def obj(name: str, rv: int) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(rv)}, "spec": {"x": name}}


def test_a_save_writes_only_what_changed_and_a_new_store_reads_it_back_in_order(tmp_path):
    data = {"rv": 200, "settings": {"deny": []}, "pods": {f"ns/p{i}": obj(f"p{i}", i) for i in range(100)},
            "events": [obj(f"e{i}", 100 + i) for i in range(5)], "run": ["ns/p1", "ns/p0"], "born": {"uid-p1": 1}}
    store = kubestore.Store(tmp_path)
    assert store.load() is None
    assert store.save(data) == 2 + 100 + 5 + 2 + 1        # every row the first time
    assert store.save(data) == 0                           # nothing changed: nothing written
    # one pod changed (a new resourceVersion), one gone with its run entry, one event more
    data["pods"]["ns/p7"]["spec"]["x"] = "changed"
    data["pods"]["ns/p7"]["metadata"]["resourceVersion"] = "201"
    del data["pods"]["ns/p1"]
    data["run"].remove("ns/p1")
    data["born"].pop("uid-p1")
    data["events"].append(obj("e5", 202))
    data["rv"] = 202
    assert store.save(data) == 6
    store.close()

    again = kubestore.Store(tmp_path)
    back = again.load()
    again.close()
    # an empty collection has no rows: it comes back absent (the API server gives its defaults)
    assert back == {k: v for k, v in data.items() if k != "born"} and data["born"] == {}
    assert list(back["pods"]) == list(data["pods"]) and [e["metadata"]["name"] for e in back["events"]] == \
        [f"e{i}" for i in range(6)]
    assert back["pods"]["ns/p7"]["spec"]["x"] == "changed"


def test_an_edit_by_hand_is_saved(tmp_path):
    store = kubestore.Store(tmp_path)
    store.save({"rv": 1, "workloads": {"Deployment/a/b": obj("b", 1)}})
    store.close()
    with kubestore.edit(tmp_path) as data:
        del data["workloads"]["Deployment/a/b"]
    again = kubestore.Store(tmp_path)
    assert again.load() == {"rv": 1}
    again.close()
