"""The records of the run in this process, handed to its views without slowing it.

The engine calls ``Feed.__call__`` with each record right after the journal holds it (the
recorder's ``on_event``): the call only appends to a deque, whatever the views do with it
later. The views (the terminal, the metrics endpoint) fold what came in when they next
draw or are scraped, under the feed's lock, into one ``LiveRun``. Records the engine
appended before the feed saw any (a resumed run's history, ``journal_repaired``) are read
from the journal on disk, which holds every record before it is handed over. So are records
that came while nobody looked (a metrics endpoint nobody scrapes): past ``MAX_PENDING`` the
feed keeps no more of them, and its next look reads them back from the journal instead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from k3rollout.live.follow import JournalTail
from k3rollout.live.state import LiveRun

MAX_PENDING = 20_000


class Feed:
    def __init__(self, journal_path: Path, max_pending: int = MAX_PENDING):
        self.max_pending = max_pending
        self._overflow = False
        self._pending: deque[dict[str, Any]] = deque()
        self._lock = threading.Lock()
        self._tail = JournalTail(journal_path)
        self.state = LiveRun()

    def __call__(self, record: dict[str, Any]) -> None:
        # no lock on the run's side: deque.append is atomic, and so is len()
        if len(self._pending) < self.max_pending:
            self._pending.append(record)
        else:
            self._overflow = True             # the journal has it: read back at the next look

    def _catch_up(self) -> None:
        """Records missing before the first one handed over: read from the journal."""
        for r in self._tail.read():
            self.state.apply(r)

    @contextmanager
    def current(self) -> Iterator[LiveRun]:
        """The state with every record so far folded in, held while the caller reads it."""
        with self._lock:
            if self._overflow:
                self._overflow = False
                self._pending.clear()
                self._catch_up()
            state, pending = self.state, self._pending
            apply, take = state.apply, pending.popleft
            while pending:
                r = take()
                if r["seq"] > state.seq + 1:
                    self._catch_up()
                apply(r)
            if self.state.seq == 0:
                self._catch_up()
            yield self.state


def fan_out(*sinks: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None] | None:
    """One ``on_event`` that hands each record to every sink given."""
    live = [s for s in sinks if s is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def each(record: dict[str, Any]) -> None:
        for sink in live:
            sink(record)
    return each
