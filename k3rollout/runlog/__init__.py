"""The run's record: the journal (append-only, hash-chained, group-committed), its typed
records, and the fold of those records into the run's state (``RunView``); the run
directory that holds them (``RunDir``: its layout, open-and-verify, approvals) and the lock
files that name a run. The engine writes it and resumes from it; the report and the live
view read it and never import the engine."""
