"""Human gates and hooks: where a run waits for a person, and where it tells other systems.

A pause is journaled when it starts (``pause_started``: id, reason, until) and when it
ends (``pause_resolved``: approved, rejected or timer, by whom, with the note). The run
waits by polling ``RUN_DIR/approvals/<id>.json``, which ``k3rollout approve RUN_DIR``
writes (``RunDir.write_approval``, runlog/rundir.py); the engine never takes an approval from anywhere else, and a resumed run finds a
resolved pause in the journal and does not ask again. A pause with a duration ends by
itself when the time is up (``approve`` may end it early, ``approve --reject`` stops the
rollout). While paused the run still stops on SIGTERM and halts when the window ends.

Hooks run on the controller: a ``command`` (argv, no shell) gets the event as JSON on
stdin and in ``K3ROLLOUT_EVENT``; a ``webhook`` gets it as a JSON POST. Each call is
journaled with its outcome and its output kept as evidence. ``confirm_rollout`` and
``pre_batch`` can stop the rollout (non-zero exit, non-2xx status, timeout);
``post_batch`` and ``on_rollback`` are recorded and never block. A hook that completed
before a crash is not called again on resume.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k3rollout.evidence.store import EvidenceStore
from k3rollout.runlog.rundir import RunDir
from k3rollout.runlog.view import RunView

POLL_S = float(os.environ.get("K3ROLLOUT_APPROVAL_POLL_S", "0.5"))


def open_pauses(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pause_started records of a journal that have no pause_resolved yet."""
    resolved = {r["pause"] for r in records if r["type"] == "pause_resolved"}
    seen, out = set(), []
    for r in records:
        if r["type"] == "pause_started" and r["pause"] not in resolved and r["pause"] not in seen:
            seen.add(r["pause"])
            out.append(r)
    return out


class Gates:
    """Pauses and hooks, held by the engine: built from the recorder's ``record`` and view,
    the evidence store (the run directory is its parent), the clock, the run's stop flag,
    the redactor, the play's hooks and the run id. ``api`` gives the HTTP client webhooks
    are sent with (the step runner's pool)."""

    def __init__(self, *, record: Callable[..., dict[str, Any]], view: RunView, evidence: EvidenceStore, clock: Any,
                 stopping: threading.Event, redact: Callable[[str], str], hooks: Any, run_id: str, log: Any,
                 api: Callable[[], Any]):
        self.record = record
        self.view = view
        self.evidence = evidence
        self.clock = clock
        self.stopping = stopping
        self.redact = redact
        self.hooks = hooks
        self.run_id = run_id
        self.log = log
        self._api = api

    @property
    def run_dir(self) -> Path:
        return self.evidence.root.parent

    # ------------------------------------------------------------------ pauses

    def pause(self, pause_id: str, reason: str, duration: float | None, **where: Any) -> str:
        """Wait at a gate; returns "approved", "timer", "rejected", "window" or "stopped"."""
        done = self.view.pauses.get(pause_id, {})
        if done.get("decision"):
            return str(done["decision"])
        if not done.get("started"):
            until = self.clock.now() + duration if duration else None
            self.record("pause_started", pause=pause_id, reason=self.redact(reason), duration_s=duration,
                        until=until, until_iso=self.clock.iso(until) if until else None, **where)
            self.log.warning("paused", pause=pause_id, reason=reason,
                             approve=f"k3rollout approve {self.run_dir} --pause {pause_id}")
        until = self.view.pauses[pause_id].get("until")
        rd = RunDir(self.run_dir)
        while True:
            decided = rd.read_approval(pause_id)
            if decided is not None:
                text, a = decided
                ref = self.evidence.write("_run", "approvals", f"{pause_id}.json", text)
                self.record("pause_resolved", pause=pause_id, decision=a["decision"],
                            by=self.redact(str(a.get("by", ""))), note=self.redact(str(a.get("note", ""))),
                            evidence=ref.path, sha256=ref.sha256)
                return str(a["decision"])
            now = self.clock.now()
            if until is not None and now >= until:
                self.record("pause_resolved", pause=pause_id, decision="timer", by="timer", note="")
                return "timer"
            if self.view.window_end is not None and now >= self.view.window_end:
                self.record("pause_resolved", pause=pause_id, decision="window", by="window",
                            note="the maintenance window ended while waiting")
                return "window"
            if self.stopping.is_set():
                return "stopped"
            self.stopping.wait(POLL_S)

    # ------------------------------------------------------------------ hooks

    def run_hooks(self, name: str, payload: dict[str, Any], key: str) -> bool:
        """Call every hook of ``name``; True when all succeeded (or there are none)."""
        hooks = getattr(self.hooks, name)
        ok_all = True
        for i, hook in enumerate(hooks, start=1):
            hid = f"{name}-{key}-{i}"
            prior = self.view.hooks.get(hid)
            if prior is not None and prior.get("done"):
                ok_all &= bool(prior.get("ok"))
                continue
            event = {"event": name, "run_id": self.run_id, "run_dir": str(self.run_dir), **payload}
            what = hook.webhook or " ".join(hook.command or [])
            self.record("hook_started", hook=hid, name=name, target=self.redact(what))
            started = time.monotonic()
            if hook.command:
                ok, detail, output = self._hook_command(hook.command, event, hook.timeout, name)
            else:
                ok, detail, output = self._hook_webhook(hook.webhook or "", event, hook.timeout)
            ref = self.evidence.write("_run", "hooks", hid, self.redact(
                f"# hook {hid}: {what}\n# ok={ok} {detail}\n--- event ---\n{json.dumps(event, indent=1)}\n"
                f"--- output ---\n{output}"))
            self.record("hook_done", hook=hid, name=name, ok=ok, detail=self.redact(detail),
                        duration_s=round(time.monotonic() - started, 3), evidence=ref.path, sha256=ref.sha256)
            if not ok:
                self.log.error("hook_failed", hook=hid, detail=self.redact(detail))
            ok_all &= ok
        return ok_all

    def _hook_command(self, argv: list[str], event: dict[str, Any], timeout: float, name: str) -> tuple[bool, str, str]:
        body = json.dumps(event)
        env = {**os.environ, "K3ROLLOUT_EVENT": body, "K3ROLLOUT_HOOK": name, "K3ROLLOUT_RUN_DIR": str(self.run_dir)}
        try:
            p = subprocess.run(argv, input=body, capture_output=True, text=True, timeout=timeout, env=env,
                               cwd=self.run_dir)
        except FileNotFoundError:
            return False, f"command not found: {argv[0]}", ""
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return False, f"timed out after {timeout:g}s", out
        return p.returncode == 0, f"exit {p.returncode}", p.stdout + ("\n--- stderr ---\n" + p.stderr if p.stderr
                                                                       else "")

    def _hook_webhook(self, url: str, event: dict[str, Any], timeout: float) -> tuple[bool, str, str]:
        res = self._api().request("POST", url, event, timeout)
        if res.error:
            return False, res.error, ""
        return bool(res.status and 200 <= res.status < 300), f"HTTP {res.status}", res.text[:4000]
