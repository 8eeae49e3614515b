"""The simulated API server's objects on disk: ``kubeapi.db`` under the sim root, one row per object.

Every change is on disk before the request's reply (etcd has it before the API server
answers), so a server restarted after its daemon was killed reads back every object. A save
writes only what changed since the last one: the objects whose ``resourceVersion`` moved (a
change to an object is a new version of it, which is also what its watchers see), those added
and those gone, in one SQLite transaction, so a kill in the middle of a save leaves the last
one whole. Rewriting the whole object set on every change (6 MB of JSON at 1,000 nodes: 3,000
pods, 1,000 Deployments, 2,000 events) made a run's saves quadratic in its size; finding the
change is a comparison of resourceVersions with the last save's, microseconds for thousands of
objects. The standard library's ``sqlite3`` in WAL mode: a commit appends to the log instead of
rewriting the file, and ``synchronous=NORMAL`` keeps a commit through a crash of the process
(not of the machine, as the JSON file it replaces did).

The cluster's data (sim/kubeapi.py ``Cluster.data``) is a dict of collections: objects by key
(``pods``, ``workloads``, ``leases``, ``namespaces``) or in a list (``events``, keyed by uid),
lists of keys (``run``, ``admitted``), a map (``born``), and small values (``rv``, ``settings``,
``blocked``, ...), each of which is one row written when its JSON changes. Rows keep their
insertion order (SQLite's rowid survives an update), so lists and dicts come back in order; an
empty collection has no rows and comes back absent (the caller gives its defaults).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

FILE = "kubeapi.db"
OBJECTS = ("namespaces", "pods", "workloads", "leases")     # key -> object with a resourceVersion
LISTED = ("events",)                                          # a list of objects, each keyed by its uid
KEYS = ("run", "admitted")                                    # lists of keys
MAPS = ("born",)                                              # key -> a small JSON value


def _items(kind: str, value: Any) -> Iterator[tuple[str, Any, Any]]:
    """(row key, what says it changed, the row's body) for each item of a collection."""
    if kind in OBJECTS:
        for key, obj in value.items():
            yield key, (obj.get("metadata") or {}).get("resourceVersion"), obj
    elif kind in LISTED:
        for obj in value:
            yield obj["metadata"]["uid"], obj["metadata"].get("resourceVersion"), obj
    elif kind in KEYS:
        for key in value:
            yield key, True, None
    elif kind in MAPS:
        for key, v in value.items():
            yield key, v, v
    else:
        body = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        yield "", body, value


class Store:
    """``Store(sim_root)``: ``load()`` the data (None: nothing saved yet), ``save(data)`` what
    changed since the last load or save. The caller serializes calls (the cluster's lock)."""

    def __init__(self, sim_root: Path):
        self.path = Path(sim_root) / FILE
        self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        # the log is copied into the file once it holds 8 pages (SQLite's default is 1,000, 4 MB),
        # then written again from its start: each file stays the size of the data and of a few
        # changes, under a file-size limit the daemon inherits from the run that started it
        # (``ulimit -f`` on the controller), as the JSON file it replaces did
        self.db.execute("PRAGMA wal_autocheckpoint=8")
        self.db.execute("CREATE TABLE IF NOT EXISTS objects (kind TEXT NOT NULL, key TEXT NOT NULL, body BLOB, "
                        "PRIMARY KEY (kind, key))")
        self.saved: dict[str, dict[str, Any]] = {}    # kind -> key -> what the last save wrote (its version)
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        with self.lock:
            self.db.close()
            self.closed = True

    def load(self) -> dict[str, Any] | None:
        data: dict[str, Any] = {}
        for kind, key, body in self.db.execute("SELECT kind, key, body FROM objects ORDER BY rowid"):
            value = orjson.loads(body) if body is not None else None
            if kind in OBJECTS:
                data.setdefault(kind, {})[key] = value
            elif kind in LISTED:
                data.setdefault(kind, []).append(value)
            elif kind in KEYS:
                data.setdefault(kind, []).append(key)
            elif kind in MAPS:
                data.setdefault(kind, {})[key] = value
            else:
                data[kind] = value
        if not data:
            return None
        self.saved = {kind: {key: token for key, token, _ in _items(kind, value)} for kind, value in data.items()}
        return data

    def save(self, data: dict[str, Any]) -> int:
        """Write what changed; returns how many rows were written or deleted."""
        with self.lock:
            if self.closed:          # a request still in flight as its server stops
                return 0
            puts: list[tuple[str, str, bytes | None]] = []
            dels: list[tuple[str, str]] = []
            now: dict[str, dict[str, Any]] = {}
            for kind, value in data.items():
                before = self.saved.get(kind, {})
                seen = now[kind] = {}
                for key, token, body in _items(kind, value):
                    seen[key] = token
                    if token is None or key not in before or before[key] != token:
                        puts.append((kind, key, None if kind in KEYS else
                                     body if isinstance(body, bytes) else orjson.dumps(body)))
                dels += [(kind, key) for key in before.keys() - seen.keys()]
            dels += [(kind, key) for kind in self.saved.keys() - data.keys() for key in self.saved[kind]]
            if puts or dels:
                self.db.execute("BEGIN")
                try:
                    self.db.executemany("DELETE FROM objects WHERE kind = ? AND key = ?", dels)
                    self.db.executemany("INSERT INTO objects (kind, key, body) VALUES (?, ?, ?) ON CONFLICT (kind, key) "
                                        "DO UPDATE SET body = excluded.body", puts)
                except BaseException:
                    self.db.execute("ROLLBACK")
                    raise
                self.db.execute("COMMIT")
            self.saved = now
            return len(puts) + len(dels)


@contextlib.contextmanager
def edit(sim_root: Path) -> Iterator[dict[str, Any]]:
    """The saved objects of a cluster whose API server is not running, to change by hand (a
    test that makes a state no request makes); saved when the block ends."""
    store = Store(sim_root)
    try:
        data = store.load()
        if data is None:
            raise FileNotFoundError(f"no saved objects in {store.path}")
        yield data
        store.save(data)
    finally:
        store.close()


__all__ = ["FILE", "Store", "edit"]
