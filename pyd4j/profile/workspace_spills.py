"""Workspace spills: an ND4J workspace that keeps spilling (allocations past its size made as plain
off-heap allocations every cycle) needs a larger initial size; the size to give it."""

from __future__ import annotations

import numpy as np

from pyd4j.output import human_bytes
from pyd4j.profile.finding import MIB, Finding, grow_limit
from pyd4j.profile.timeline import Timeline

SPILL_MIN_SAMPLES = 3
SPILL_MIN_SHARE = 0.2


def workspace_spills(t: Timeline) -> list[Finding]:
    """A warning per workspace that spilled in SPILL_MIN_SHARE of the samples once training began."""
    out = []
    # the first iterations spill by design (FIRST_LOOP learning sizes the workspace from them)
    trained = t.series("iterations") >= 2 if t.samples else np.array([], dtype=bool)
    for key, cols in t.workspace_series().items():
        spilled = np.nan_to_num(cols["spilled"]) + np.nan_to_num(cols["pinned"])
        present = ~np.isnan(cols["size"]) & trained
        n_present = int(present.sum())
        n_spill = int((spilled[present] > 0).sum())
        if n_present == 0 or n_spill < SPILL_MIN_SAMPLES or n_spill / n_present < SPILL_MIN_SHARE:
            continue
        spilled = np.where(present, spilled, 0)
        need = np.nanmax(cols["max_cycle"] + np.nan_to_num(cols["spilled"]), initial=0)
        size = np.nanmax(cols["size"], initial=0)
        suggested = grow_limit(max(need, size) * 1.3, 1.0, floor=MIB)
        name = key.split("@")[0]
        out.append(Finding(
            "workspace-spill", "warning", f"Workspace {name} keeps spilling",
            [f"{key}: spilled or pinned memory in {n_spill} of {n_present} samples "
             f"(up to {human_bytes(float(np.nanmax(spilled)))}); size {human_bytes(size)}, largest cycle {human_bytes(need)}"],
            f"give {name} a larger initial size: WorkspaceConfiguration.builder().initialSize({suggested}L)"
            f".policyLearning(LearningPolicy.NONE) (spilled allocations are plain off-heap allocations made every cycle)",
            [], {"spill_samples": n_spill, "samples": n_present, "suggested_initial_size": suggested},
        ))
    return out
