"""Planning: batches, capacity, durations and window fit. Pure: no I/O, no clock."""

from k3rollout.plan.planner import Plan, make_plan
from k3rollout.plan.serial import pct_to_int, serial_batches

__all__ = ["Plan", "make_plan", "pct_to_int", "serial_batches"]
