"""A stop signal whose KeyboardInterrupt is raised inside a garbage-collection callback is not
lost (cli.py ``_stop_was_swallowed``).

Python runs a signal handler between any two bytecodes of the main thread, also inside a weakref
callback or a ``__del__``; an exception raised there is printed as "Exception ignored in ..." and
dropped. cli.py's handler raises the stop's KeyboardInterrupt, so a SIGTERM that landed there was
lost: `k3rollout observe` went on with its passes (the fresh-clone CI once waited 600 s for it)."""

from __future__ import annotations

import subprocess
import sys

from support import ROOT

# the handler runs inside the weakref callback: os.kill sets the signal pending, and the call in
# the callback's comprehension is where the interpreter next runs pending handlers
SCRIPT = """
import os, signal, sys, time, weakref
from k3rollout import cli

cli._STOPPING[0] = False
signal.signal(signal.SIGTERM, cli._terminate)
if sys.argv[1] == "hooked":
    cli._UNRAISABLE[0] = sys.unraisablehook
    sys.unraisablehook = cli._stop_was_swallowed

class Node:
    pass

def collected(ref):
    os.kill(os.getpid(), signal.SIGTERM)
    [str(i) for i in range(100)]

node = Node()
ref = weakref.ref(node, collected)
try:
    del node
    time.sleep(float(sys.argv[2]))
    print("went on")
except KeyboardInterrupt:
    print("stopped")
"""


def run(mode: str, wait_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode, str(wait_s)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_a_stop_raised_inside_a_gc_callback_is_lost_without_the_hook():
    # the hazard itself: Python drops the KeyboardInterrupt and the process goes on
    p = run("bare", 1)
    assert p.stdout.strip() == "went on", p
    assert "Exception ignored" in p.stderr and "KeyboardInterrupt" in p.stderr, p.stderr


def test_the_hook_sends_the_stop_again_and_it_lands():
    # with the hook the stop lands in the main thread's wait, long before the wait would end
    p = run("hooked", 60)
    assert p.stdout.strip() == "stopped", p
    assert "Exception ignored" not in p.stderr, p.stderr
