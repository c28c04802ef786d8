"""How `pyd4j tune --speed` spends its runs where they decide: the candidates in order of the gain the
probe's evidence bounds (`by_expected_gain`), each A/B stopping early for success or for futility
(pyd4j.profile.ab), and all of them within a total budget of runs or minutes (`Budget`). When the
budget runs out, the comparison under way ends undecided, the candidates not reached are listed,
and only what was proved stays kept.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from pyd4j.profile import ab
from pyd4j.profile.speed_setup import Change, Probe, Setup

# What a change can give where the probe has no measure of it: a prior, stated as such.
PRIOR_GAIN = {"threads": 1.05, "omp_wait_policy": 1.03, "workspace_mode": 1.10, "nd4j_build": 1.10, "blas": 1.05}


@dataclass
class Budget:
    """The runs after the probe, and the wall time of the whole tune, that `tune --speed` may spend
    (None: no limit of that kind). A run is not started when it would pass either."""

    runs: int | None = None
    seconds: float | None = None
    started: float = field(default_factory=time.monotonic)
    walls: list[float] = field(default_factory=list)
    spent: str | None = None

    def out(self) -> str | None:
        """Why the next run would pass the budget (None while it would not)."""
        if self.runs is not None and len(self.walls) >= self.runs:
            self.spent = f"{self.runs} runs after the probe"
        elif self.seconds is not None and self.walls:
            elapsed = time.monotonic() - self.started
            if elapsed + statistics.median(self.walls) > self.seconds:
                self.spent = (f"{self.seconds / 60:g} minutes: {elapsed / 60:.1f} used, and a run takes about "
                              f"{statistics.median(self.walls):.0f} s")
        return self.spent

    def ran(self, wall_s: float) -> None:
        self.walls.append(wall_s)

    def to_dict(self) -> dict:
        return {"runs": self.runs, "minutes": None if self.seconds is None else round(self.seconds / 60, 2),
                "runs_used": len(self.walls), "minutes_used": round((time.monotonic() - self.started) / 60, 2),
                "spent": self.spent}


def expected_gain(change: Change, probe: Probe) -> tuple[float, str]:
    """The most this change can gain, from the probe's evidence (the share of time it removes), or a
    prior where the probe measures nothing it removes; with the reason."""
    kind = change.setting.split("=")[0]
    explicit = probe.explicit_gc_share or 0.0
    if kind in ("explicit_gc", "nd4j.periodic_gc") and explicit > 0:
        return 1 / (1 - min(explicit, 0.9)), f"System.gc() took {explicit:.0%} of the training time"
    if kind == "heap" and probe.gc_share:
        share = max(probe.gc_share - explicit, 0.0)
        return 1 / (1 - min(share, 0.9)), f"garbage collection took {share:.0%} of the training time"
    if kind == "prefetch":
        data = ((probe.time_split or {}).get("share") or {}).get("data", 0.0)
        return 1 / (1 - min(data, 0.9)), f"the training thread waited for data {data:.0%} of its time"
    if kind == "threads" and isinstance(probe.nd4j.get("max_threads"), int):
        threads = probe.nd4j["max_threads"]
        target = int(change.setting.split("=")[1]) if "=" in change.setting else threads
        if threads > target:
            return max(PRIOR_GAIN["threads"], min(threads / target, 2.0) ** 0.5),                 f"ND4J ran {threads} threads where {target} is tried (oversubscription)"
    prior = PRIOR_GAIN.get(kind, 1.02)
    return prior, f"no measure in the probe bounds it: a prior of {prior:.2f}x"


def by_expected_gain(cands: list[Change], probe: Probe) -> tuple[list[Change], dict[str, dict]]:
    """The candidates, largest expected gain first (ties keep their order), and each one's expectation."""
    gains = {c.setting: expected_gain(c, probe) for c in cands}
    ordered = sorted(cands, key=lambda c: -gains[c.setting][0])
    return ordered, {k: {"expected": round(v[0], 3), "why": v[1]} for k, v in gains.items()}


@dataclass
class Search:
    """What the greedy search kept and tried; `untried`: candidates the budget did not reach."""

    kept: Setup
    rows: list[dict]
    trials: list[dict]
    against_base: ab.Comparison | None
    untried: list[str] = field(default_factory=list)


def greedy(cands: list[Change], compare: Callable[[Setup, Setup], ab.Comparison], trials: list[dict] | None = None
           ) -> tuple[Setup, list[dict], list[dict], ab.Comparison | None]:
    """`search` without a budget's account: (kept setup, kept rows, trials, the first kept change's comparison)."""
    s = search(cands, compare, trials)
    return s.kept, s.rows, s.trials, s.against_base


def search(cands: list[Change], compare: Callable[[Setup, Setup], ab.Comparison], trials: list[dict] | None = None
           ) -> Search:
    """Screen each candidate against the job as it is, then combine the faster ones best first,
    each kept only if it is faster again on top of those kept. A comparison that ends on the total
    budget ends the search: what was proved so far is combined no further than it was verified.
    `trials` (filled as they finish) keeps them for the caller when a comparison raises."""
    base = Setup()
    trials = [] if trials is None else trials
    proved: list[tuple[Change, ab.Comparison]] = []
    untried: list[str] = []
    for i, change in enumerate(cands):
        c = compare(base, base.plus(change))
        trials.append({"setting": change.setting, "after": change.after, "on_top_of": base.label(), **c.to_dict()})
        if c.verdict == "faster":
            proved.append((change, c))
        if c.budget_spent:
            untried = [x.setting for x in cands[i + 1:]]
            break
    proved.sort(key=lambda pc: -(pc[1].estimate or 0))
    kept = Setup()
    kept_rows: list[dict] = []
    against_base = proved[0][1] if proved else None
    for i, (change, first) in enumerate(proved):
        c = first if i == 0 else compare(kept, kept.plus(change))
        if i > 0:
            trials.append({"setting": change.setting, "after": change.after, "on_top_of": kept.label(), **c.to_dict()})
        if c.verdict == "faster":
            kept = kept.plus(change)
            kept_rows.append(_row(change, c))
        if c.budget_spent:
            break
    return Search(kept, kept_rows, trials, against_base, untried)


def _row(change: Change, c: ab.Comparison) -> dict:
    return {"setting": change.setting, "before": change.before, "after": change.after, "ratio": c.to_dict()["ratio"],
            "interval": c.to_dict()["interval"], "reason": f"{change.why}; {c.reason}", "paste": change.paste,
            "environment": dict(change.env), "jvm_options": list(change.jvm), "agent_options": list(change.agent),
            "replaces_memory_flags": change.replaces_memory_flags, "maven": change.maven, "build": change.build,
            "blas": change.blas}


def change_of(row: dict) -> Change:
    """The Change a row of `speed.changes` describes (to run the job with it again)."""
    return Change(row["setting"], row["before"], row["after"], row.get("reason", ""),
                  env=tuple(row.get("environment", {}).items()), jvm=tuple(row.get("jvm_options", [])),
                  agent=tuple(row.get("agent_options", [])), replaces_memory_flags=row.get("replaces_memory_flags", False),
                  maven=row.get("maven", ""), build=row.get("build", ""), blas=row.get("blas", ""))
