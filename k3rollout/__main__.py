from k3rollout.cli import entrypoint

entrypoint()
