"""A stage's exception and its outcome (engine/outcome.py): one mapping, wherever the
engine runs a stage."""

from __future__ import annotations

import pytest

from k3rollout.checks.parsers import ParseError
from k3rollout.engine.outcome import STAGE_ERRORS, failed_outcome
from k3rollout.errors import StepFailed
from k3rollout.model.assertions import AssertionSyntaxError


def test_a_step_that_failed_fails_the_stage_with_its_error_and_the_commands_output_for_triage():
    out = failed_outcome(StepFailed("gpu-01: command timed out after 600s", "NVRM: GPU has fallen off the bus"))
    assert not out.passed and not out.inconclusive
    assert out.reason == "gpu-01: command timed out after 600s"
    assert out.logs == "gpu-01: command timed out after 600s\nNVRM: GPU has fallen off the bus"
    assert out.facts == {}


def test_output_the_parser_does_not_know_is_unexpected_output_not_a_parameter_error():
    # a ParseError is a ValueError: it must not read as the playbook's fault
    out = failed_outcome(ParseError("nvidia-smi: no driver_version column"))
    assert not out.passed
    assert out.reason == "unexpected output: nvidia-smi: no driver_version column"
    assert out.logs == "nvidia-smi: no driver_version column"


@pytest.mark.parametrize("exc", [AssertionSyntaxError("'{{ target' is not a template"),
                                 ValueError("target_driver: not a driver version")])
def test_a_parameter_that_does_not_render_or_validate_names_the_stage_parameters(exc):
    out = failed_outcome(exc)
    assert not out.passed and out.reason == f"stage parameters: {exc}" and out.logs == ""
    assert failed_outcome(exc, parameters="cordon stage parameters").reason == f"cordon stage parameters: {exc}"


def test_the_errors_a_stage_run_turns_into_an_outcome_are_the_nodes_failures_only():
    assert STAGE_ERRORS == (StepFailed, ParseError)
    assert not issubclass(KeyError, STAGE_ERRORS) and not issubclass(ValueError, STAGE_ERRORS)


@pytest.mark.parametrize(("raised", "reason"), [
    (StepFailed("gpu-01: host unreachable", "ssh: connect to host gpu-01 port 22: No route to host"),
     "gpu-01: host unreachable"),
    (ParseError("no boot id"), "unexpected output: no boot id"),
])
def test_the_engine_runs_a_stage_through_the_mapping(stage_harness, monkeypatch, raised, reason):
    """NodeWalker.run_stage: a stage that raises a node's failure ends failed, by the mapping."""
    from k3rollout.stages import registry

    h = stage_harness()

    def stage(ctx):
        raise raised

    monkeypatch.setitem(registry.STAGES, "baseline", stage)
    out = h.run_stage("baseline")
    assert not out.passed and out.reason == reason and out == failed_outcome(raised)


def test_a_stage_that_raises_anything_else_is_not_taken_for_the_nodes_failure(stage_harness, monkeypatch):
    """A bug in a stage (here a KeyError, or a ValueError of its own) is not a failed node:
    it goes on to the CLI (exit 70, and resume continues), as before the mapping was one."""
    from k3rollout.stages import registry

    h = stage_harness()
    for exc in (KeyError("driver_version"), ValueError("invalid literal for int()")):
        def stage(ctx, exc=exc):
            raise exc

        monkeypatch.setitem(registry.STAGES, "baseline", stage)
        with pytest.raises(type(exc)):
            h.run_stage("baseline")


def test_prestaging_turns_a_nodes_failure_into_its_outcome(stage_harness, monkeypatch):
    """engine/prestage.py: the same mapping, the node's prestage_done record says why."""
    from k3rollout.stages import prestage as node_prestage

    h = stage_harness()

    def run(ctx, cfg):
        raise ParseError("df: no avail column")

    monkeypatch.setattr(node_prestage, "run", run)
    node, out = h.engine.prestaging.one("gpu-01")
    assert node == "gpu-01" and out == failed_outcome(ParseError("df: no avail column"))
    done = [r for r in h.journal() if r["type"] == "prestage_done"]
    assert [(r["ok"], r["reason"]) for r in done] == [(False, "unexpected output: df: no avail column")]
