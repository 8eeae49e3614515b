"""The run as it happens: a live terminal view, ``k3rollout watch``, and Prometheus metrics.

Everything here reads the run's journal records, the ones the engine appends (handed over
as they are written) or the ones on disk (followed as the file grows), and folds them with
the run log's own fold (``runlog.view``). Nothing here writes the journal, takes a lock or
changes a run: a view that fails (a closed terminal, a scraper that went away) falls silent
and the run goes on.

- ``state``: the fold plus the measured stage times, and the estimates taken from them
  (pure: time is passed in);
- ``follow``: reading a journal another process is still writing, read-only;
- ``feed``: the records of the run in this process, handed over without slowing it;
- ``view``: the rich renderable of a run's state (pure);
- ``screen``: drawing it on a terminal, a few times a second, and ``watch``;
- ``metrics``: the same state as Prometheus metric families, served or written to a file.
"""
