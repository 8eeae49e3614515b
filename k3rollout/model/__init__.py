"""Plain data for inventories and playbooks, loaded and validated once at the edge.

Nothing here opens a socket, starts a process or reads the clock; it only reads the files
it is pointed at and turns every defect into an ``InputError`` naming file and line.
"""

from k3rollout.model.inventory import Host, Inventory, load_inventory
from k3rollout.model.playbook import Playbook, Stage, load_playbook

__all__ = ["Host", "Inventory", "Playbook", "Stage", "load_inventory", "load_playbook"]
