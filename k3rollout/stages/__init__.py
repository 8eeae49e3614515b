"""One module per stage. A stage decides what to run from facts; it never opens a socket.

Each stage receives a ``NodeCtx`` (facts, vars, rendered params, and a journaled
``ctx.step`` that runs a command through whatever executor the engine plugged in) and
returns a ``StageOutcome``. Each module declares its ``SPEC`` (``stages/spec.py``): the
stage kind it implements (declared as data in model/playbook.py's ``STAGE_KINDS``) and
its run; ``registry`` derives the kind -> spec table from them. Rollback actions live
in ``rollback``.

The package itself imports nothing: ``stages.base``, the stage contract (``NodeCtx``,
``StageContext``, ``StageOutcome``), is a leaf that loads no stage; ``stages.registry``
holds the kind -> stage table.
"""
