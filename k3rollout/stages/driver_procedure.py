"""The procedure around the vendor's driver install, the same for the inline steps and the
Ansible task files. Every command is a journaled ``ctx.step`` whose output is evidence.

Before: stop and disable what holds the GPU (persistence daemon, fabric manager, DCGM and
its exporter), release held / version-locked NVIDIA packages (recorded), and refuse an
unsigned DKMS module under Secure Boot (it would not load: "Key was rejected by service").
Install: exact versions resolved from the node's repositories (``driver_node``), kernel
headers for the running kernel in the same transaction on DKMS paths. Before the reboot:
the module built for the running kernel is the target (DKMS status, ``modinfo``), signed
when Secure Boot is on. After: ``/proc/driver/nvidia/params``; on NVSwitch systems the
fabric manager enabled, active and on exactly the driver's version (else CUDA fails with
error 802); the stopped services started again; holds put back on the new packages.

A failure re-enables the stopped services (without starting them), so the rollback's
reboot brings them back on the restored driver.
"""

from __future__ import annotations

from typing import Any

from k3rollout.checks import driver_facts as df
from k3rollout.errors import StepFailed
from k3rollout.stages import driver_node as dn
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.transport.base import CommandResult


class Procedure:
    def __init__(self, ctx: NodeCtx, target: str, mgr: str):
        self.ctx, self.target, self.mgr = ctx, target, mgr
        self.facts: dict[str, Any] = {}
        self.stopped: list[str] = []
        self.held: list[str] = []
        self.resolved: dict[str, Any] | None = None

    def run(self, name: str, argv: list[str]) -> CommandResult:
        got: CommandResult = self.ctx.step(name, argv)
        return got

    # ---- before the install

    def prepare(self) -> tuple[bool, str]:
        ctx = self.ctx
        family = ctx.facts.get("os_family") or ctx.baseline.get("os_family") or "Debian"
        try:
            self.source = df.source_of(ctx.vars, family)
        except ValueError as exc:
            return False, str(exc)
        if df.pkg_mgr(self.source) != self.mgr:
            return False, f"nvidia_driver_source {self.source} is not for this node's package manager ({self.mgr})"
        self.kernel = ctx.step("kernel", ["uname", "-r"]).stdout.strip()
        self.nvswitch = dn.nvswitch(self.run)
        sb = dn.secure_boot(self.run)
        self.secure_boot = bool(sb.get("secure_boot"))
        self.facts.update({"driver_source": self.source, "kernel": self.kernel, "nvswitch": self.nvswitch, **sb})
        if self.secure_boot and df.uses_dkms(self.source) and not sb.get("mok_enrolled"):
            return False, ("Secure Boot is enabled and the DKMS module would be signed with a MOK key that is not "
                           f"enrolled ({df.MOK_KEY}): it would not load after the reboot. Enroll the key, or use "
                           "Canonical's signed precompiled modules (nvidia_driver_source: ubuntu-archive-precompiled)")
        prior = ctx.runner.prior_meta(ctx, "release-holds") or {}
        self.held = sorted(set(dn.holds(self.run, self.mgr)) | set(prior.get("held", [])))
        if self.held:
            argv = ["apt-mark", "unhold", *self.held] if self.mgr == "apt" else \
                ["dnf", "versionlock", "delete", *self.held]
            res = ctx.step("release-holds", argv, meta={"held": self.held})
            if not res.ok:
                return False, f"could not release the holds on {', '.join(self.held)} (rc {res.rc}): {res.tail(200)}"
        self.facts["held_packages"] = self.held
        prior = ctx.runner.prior_meta(ctx, "stop-gpu-services") or {}
        active = dn.active_services(self.run)
        self.stopped = [u for u in df.GPU_SERVICES if u in set(active) | set(prior.get("services", []))]
        if self.stopped:
            res = ctx.step("stop-gpu-services", ["systemctl", "disable", "--now", *self.stopped],
                           meta={"services": self.stopped})
            if not res.ok:
                return False, f"could not stop {', '.join(self.stopped)} (rc {res.rc}): {res.tail(200)}"
            still = dn.active_services(self.run)
            if still:
                return False, f"still holding the GPU after stop: {', '.join(still)}"
        self.facts["stopped_services"] = self.stopped
        return True, ""

    def resolve(self) -> dict[str, Any]:
        """The ``driver`` template variable: exact versions for the target, from the node."""
        if self.resolved is None:
            self.resolved = dn.resolve_target(self.run, self.source, self.target, self.kernel, self.nvswitch)
            self.facts["resolved_install"] = self.resolved["install"]
        return self.resolved

    def ansible_vars(self) -> dict[str, Any]:
        branch = self.target.split(".")[0]
        return {"k3_packages": df.target_names(self.source, branch, self.kernel, self.nvswitch),
                "k3_headers": df.header_packages(self.source, self.kernel) if df.uses_dkms(self.source) else [],
                "k3_dkms": df.uses_dkms(self.source), "k3_secure_boot": self.secure_boot,
                "k3_module_stream": f"{df.DNF_MODULE}:{df.module_stream(branch)}"}

    # ---- between install and reboot

    def check_built(self) -> tuple[bool, str]:
        ctx = self.ctx
        mod = ctx.step("built-module", ["modinfo", "-F", "version", "nvidia"])
        have = mod.stdout.strip() if mod.ok else None
        if have != self.target:
            return False, (f"the nvidia module installed for kernel {self.kernel} is {have or 'missing'}, not "
                           f"{self.target}" + ("" if df.uses_dkms(self.source) else
                                               " (Canonical's precompiled modules carry only the archive's current "
                                               "driver)"))
        if df.uses_dkms(self.source):
            dk = ctx.step("dkms-built", ["dkms", "status"])
            if f"nvidia/{self.target}, {self.kernel}" not in dk.stdout or "installed" not in dk.stdout:
                return False, f"DKMS did not build nvidia/{self.target} for {self.kernel}: {dk.tail(200)}"
        if self.secure_boot:
            signer = ctx.step("module-signer", ["modinfo", "-F", "signer", "nvidia"])
            if not signer.stdout.strip():
                return False, "Secure Boot is enabled and the new nvidia module is not signed: it would not load"
        return True, ""

    # ---- after the reboot

    def after_reboot(self) -> tuple[bool, str]:
        ctx = self.ctx
        if self.nvswitch:
            pk = {p["name"]: p["version"] for p in ctx.read_packages() if p["status"].startswith("ii")}
            fm = df.fabricmanager(self.source, self.target.split(".")[0])
            if fm not in pk:
                return False, f"NVSwitch system without the fabric manager package {fm}: CUDA would fail (error 802)"
            if df.upstream(pk[fm]) != self.target:
                return False, f"fabric manager {fm} is {pk[fm]}, the driver is {self.target}: they must match exactly"
            ctx.step("fabricmanager-enable", ["systemctl", "enable", "--now", df.FM_SERVICE])
            state = ctx.step("fabricmanager-active", ["systemctl", "is-active", df.FM_SERVICE]).stdout.strip()
            self.facts["fabricmanager"] = state or "unknown"
            if state != "active":
                log = ctx.step("fabricmanager-journal", ["journalctl", "-u", df.FM_SERVICE, "-n", "50", "--no-pager"])
                said = [ln for ln in log.stdout.splitlines() if "nv-fabricmanager" in ln]
                return False, (f"the fabric manager is {state or 'not running'} after the reboot"
                               + (f": {said[-1].split(': ', 1)[-1]}" if said else ""))
        for u in df.RESTART_ORDER:
            if u in self.stopped and u != df.FM_SERVICE:
                res = ctx.step(f"restart-{u}", ["systemctl", "enable", "--now", u])
                if not res.ok:
                    return False, f"{u} did not start again on the new driver (rc {res.rc}): {res.tail(200)}"
        if self.held:
            names = df.target_names(self.source, self.target.split(".")[0], self.kernel, self.nvswitch)
            names = [n for n in names if df.changes_with_driver(n)]
            argv = ["apt-mark", "hold", *names] if self.mgr == "apt" else ["dnf", "versionlock", "add", *names]
            res = ctx.step("hold-new-packages", argv)
            if not res.ok:
                return False, f"could not hold the new driver packages again (rc {res.rc}): {res.tail(200)}"
            self.facts["held_after"] = names
        return True, ""

    def finish(self, out: StageOutcome) -> StageOutcome:
        if not out.passed:
            return self.fail(out.reason, out.logs, out.facts)
        ok, why = self.after_reboot()
        if not ok:
            return self.fail(why, out.logs + "\n" + why, out.facts)
        return StageOutcome(True, out.reason, {**out.facts, **self.facts}, out.logs)

    def fail(self, why: str, logs: str = "", facts: dict[str, Any] | None = None) -> StageOutcome:
        if self.stopped:
            # enabled again (not started): the rollback's reboot brings them up on its driver
            try:
                self.ctx.step("reenable-gpu-services", ["systemctl", "enable", *self.stopped])
            except StepFailed as exc:
                # the host is down (that may be why we fail): the journal shows the services
                # stopped, and the rollback runbook says to enable them
                self.facts["reenable_error"] = str(exc).splitlines()[0]
        return StageOutcome(False, why, {**(facts or {}), **self.facts}, logs or why)
