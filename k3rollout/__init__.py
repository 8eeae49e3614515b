"""k3rollout: take a GPU cluster through a driver + Kimi K3 vLLM change one safe step at a time.

The public surface is the CLI (``k3rollout.cli.main``) and the run directory it writes;
the packages below are importable but not advertised.
"""

__version__ = "0.1.0"
