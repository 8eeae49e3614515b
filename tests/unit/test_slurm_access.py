"""The Slurm reservation right (scheduler/slurm_access.py) against scripted answers where no
real slurmdbd runs here: a user's AdminLevel from ``sacctmgr``. Root, SlurmUser and a plain
user are checked against a real slurmctld in tests/e2e/test_scheduler_slurm.py."""

from __future__ import annotations

import pytest

from k3rollout.scheduler.slurm_access import reservation_right

# the lines of `scontrol show config` the check reads, as slurmctld 22.05 prints them
CONFIG = ("Configuration data as of 2026-12-03T19:22:32\n"
          "AccountingStorageType   = accounting_storage/slurmdbd\n"
          "ClusterName             = h200\n"
          "SlurmUser               = slurm(64030)\n")
ACCT = ["sacctmgr", "-n", "-P", "show", "user", "ops", "format=AdminLevel"]


@pytest.mark.parametrize("level,ok", [("Operator", True), ("Administrator", True), ("None", False), ("", False)])
def test_an_operator_or_administrator_may_create_the_lock_reservation(fake_executor, level, ok):
    f = fake_executor
    f.expect(["scontrol", "show", "config"], host="slurm-ctl", stdout=CONFIG)
    f.expect(["id", "-un"], host="slurm-ctl", stdout="ops\n")
    f.expect(ACCT, host="slurm-ctl", stdout=f"{level}\n" if level else "")
    got = reservation_right(f, "slurm-ctl")
    assert (got["ok"], got["user"], got["slurm_user"]) == (ok, "ops", "slurm")
    if ok:
        assert got["detail"] == (f"scontrol on slurm-ctl runs as ops, a Slurm {level.lower()} (AdminLevel {level}): "
                                 "it may create the reservation k3rollout-lock.h200 (the cluster lock)")
    else:
        assert got["detail"] == (
            "scontrol on slurm-ctl runs as ops, who may not create Slurm reservations (slurmctld allows root, its "
            f"SlurmUser slurm and users with AdminLevel Operator or Administrator; ops has "
            f"{'AdminLevel None' if level else 'no user record in slurmdbd'}). The run's cluster lock is the reservation "
            "k3rollout-lock.h200: run k3rollout as root or slurm (or with become: true for k3_scheduler_host), or "
            "grant it: sacctmgr modify user ops set AdminLevel=Operator")


def test_the_slurm_user_needs_no_admin_level_and_an_unreachable_slurmctld_is_named(fake_executor):
    f = fake_executor
    f.expect(["scontrol", "show", "config"], host="controller", stdout=CONFIG)
    f.expect(["id", "-un"], host="controller", stdout="slurm\n")
    assert reservation_right(f, "controller")["ok"] is True
    f.expect(["scontrol", "show", "config"], host="controller", rc=1,
             stderr="slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n")
    got = reservation_right(f, "controller")
    assert got["ok"] is False and got["detail"] == (
        "cannot ask slurmctld from the controller (`scontrol show config`, rc 1): slurm_load_ctl_conf error: "
        "Unable to contact slurm controller (connect failure)")
