"""A plan= the profiling agent could not apply to the job's network: the agent's "plan" events read
back, and the finding that says the run did not train under the plan."""

from __future__ import annotations

from pyd4j.profile.finding import Finding
from pyd4j.profile.timeline import Timeline


def plan_refusals(t: Timeline) -> list[dict]:
    """The agent's "plan" events whose plan could not be applied to a network (plan= given)."""
    return [e for e in t.network_events
            if e.get("type") == "plan" and (e.get("result") or {}).get("status") != "attached"]


def plan_not_applied(t: Timeline) -> list[Finding]:
    """A plan= the agent could not apply: the job was ended with the reason, or (plan_fallback=fit,
    asked for) trained with DL4J's own fit(); either way the run did not train under the plan."""
    refused = plan_refusals(t)
    if not refused:
        return []
    e = refused[-1]
    reason = (e.get("result") or {}).get("reason") or "no reason given"
    fallback = e.get("then") == "fit"
    then = ("the job trained with DL4J's own fit(), as plan_fallback=fit asks" if fallback
            else f"the agent ended the job (exit code {t.exit_code})")
    return [Finding("plan-not-applied", "warning" if fallback else "error",
                    f"Plan not applied: {reason.splitlines()[0]}",
                    [f"plan {e.get('file')}: {reason}", then],
                    "write the plan from this job's network (`pyd4j tune --plan POLICY` or `pyd4j plan --model "
                    "net.json --emit-plan FILE`); a network planned training refuses trains with DL4J's own fit() "
                    "(drop plan=, or add plan_fallback=fit to the agent's options)")]
