"""The walk of a batch's nodes through their stages, one walker per stage scope.

A stage kind declares its scope (``StageKind.scope``, model/stagekinds.py, read through its
``StageSpec``); ``Scopes`` (scopes.py) says which walker runs a node's stage from it:

- ``NodeWalker`` (node.py): one node through its node-scoped stages, up to the next stage
  a group runs, a pause, its replica's return to service or a hold before its cordon;
- ``ReplicaWalker`` (replica.py): a serving stage once per multi-node replica, and the
  check that a replica returns to service whole or not at all;
- ``BatchWalker`` (batch.py): a batch-scoped stage once for the batch.

Each is built once by the engine with the collaborators it uses; the outcome of a stage,
whichever walker ran it, is checked and recorded by ``StageVerdicts`` (verdicts.py).
"""
