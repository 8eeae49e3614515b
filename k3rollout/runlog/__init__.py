"""The run's record: the journal (append-only, hash-chained, group-committed), its typed
records, and the fold of those records into the run's state (``RunView``). The engine
writes it and resumes from it; the report reads it; neither imports the other."""
