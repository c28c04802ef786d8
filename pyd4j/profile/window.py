"""The measurement window: a run that `pyd4j tune` makes ends once it has what its verdict needs, so
a job that trains for hours is tuned in minutes. DL4J training is iterative and steady after warm-up:
a window of iterations tells what the rest does, except for what the leak verdict exists to catch
(pyd4j.profile.flatness says when a window's memory stands for the whole job).

`--window` takes:
- `auto`: memory runs (tune's first run, its verifying re-run, the `--plan` run) end once the leak
  verdicts are decided, after MEMORY_MIN_ITERATIONS at least: at a leak found, or, with none and
  memory flat, after MEMORY_MIN_S of training; at most MEMORY_MAX_S of training (longer only while a re-run
  has not reached the iterations its first run measured). The speed probe ends once its rate is
  steady after warm-up; each A/B run then trains the probe's warm-up (twice over) and SPEED_MEASURE_S
  of iterations at the probe's rate, and its speed is measured after the warm-up;
- a number of iterations (`2000`), or a time of training after the first iteration (`90s`, `5m`, `1h`);
- `full`: the whole job.

The agent ends the job at an iteration boundary (org.pyd4j.agent.Window: a "window" line, exit 0);
an auto window is judged here on the timelines as they grow, and the agent is asked to end the job
through a stop file. The run is "stopped at the window" (run.json's stopped_by), never a failure.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pyd4j.profile.flatness import plateau, slow_rise, trained_seconds
from pyd4j.profile.jvms import LANE_PREFIX, LANE_SUFFIX
from pyd4j.profile.leak_verdicts import leak_verdicts
from pyd4j.profile.timeline import Events, Timeline

MEMORY_MIN_S = 60.0
MEMORY_MIN_ITERATIONS = 50
MEMORY_MAX_S = 180.0
# A window ends on a plateau within this share of the rise and drift the sizing check allows
# (pyd4j.profile.flatness.plateau): the samples taken while the job stops would otherwise tip a
# borderline plateau (a healthy job's native memory drifting 19 MiB over a 63 s window, 16 MiB allowed)
# and leave the tune unsized after a window that said "flat".
WINDOW_ALLOWANCE = 0.5
PROBE_MIN_S = 20.0
PROBE_MIN_ITERATIONS = 30
PROBE_MAX_S = 90.0
SPEED_MEASURE_S = 10.0        # seconds of iterations each A/B run measures after its warm-up
SPEED_MIN_MEASURED = 20       # iterations at least
WARMUP_TOLERANCE = 0.10       # warm-up is over where the rate runs within this of the steady rate
CHECK_EVERY_S = 3.0           # an auto window is judged this often
STOP_GRACE_MIN_S = 30.0       # after asking for the end, the longest wait for the next iteration (or 10 of them)
AFTER_WINDOW_GRACE_S = 30.0   # after a JVM ended itself at its window, what it (its shutdown hooks) and the rest of the job get to end
_TIME = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


class WindowError(ValueError):
    """A --window value pyd4j cannot read: names it and what to give."""


@dataclass(frozen=True)
class WindowSpec:
    """What the user asked: `auto`, `full`, N `iterations`, or `seconds` of training."""

    kind: str
    value: float | None = None

    @property
    def full(self) -> bool:
        return self.kind == "full"

    def text(self) -> str:
        if self.kind == "iterations":
            return f"{int(self.value)} iterations"
        if self.kind == "seconds":
            return f"{self.value:g} s of training"
        return self.kind


AUTO = WindowSpec("auto")
FULL = WindowSpec("full")


def parse_window(text: str) -> WindowSpec:
    """`auto`, `full`, a whole number of iterations (1 or more), or a time of training: 90s, 5m, 1h."""
    value = str(text).strip().lower()
    if value in ("auto", "full"):
        return WindowSpec(value)
    if value.isdigit():
        if int(value) < 1:
            raise WindowError(f"--window {text}: give 1 iteration or more (e.g. --window 2000)")
        return WindowSpec("iterations", float(int(value)))
    match = _TIME.match(value)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        if seconds < 1:
            raise WindowError(f"--window {text}: give 1 s of training or more (e.g. --window 90s)")
        return WindowSpec("seconds", seconds)
    raise WindowError(f"--window {text!r}: give auto (the default: until the verdicts are decided), full (the whole "
                      f"job), a number of iterations (--window 2000) or a time of training (--window 90s, 5m, 1h)")


# -- iterations and rates --------------------------------------------------------------------------

def marks(t: Timeline) -> list[tuple[float, int]]:
    """(epoch ms, iterations done) from the samples and iteration lines, in time order, from the first iteration."""
    out = {(float(s["t"]), int(s["iterations"])) for s in t.samples if (s.get("iterations") or 0) >= 1}
    out |= {(float(e["t"]), int(e["n"])) for e in t.iter_events if e["n"] >= 1}
    return sorted(out)


def rate_after(t: Timeline, skip: int) -> float | None:
    """Iterations per second from the first mark at or past iteration `skip` to the last mark."""
    m = marks(t)
    start = next((x for x in m if x[1] >= max(skip, 1)), None)
    if start is None or m[-1][0] <= start[0] or m[-1][1] <= start[1]:
        return None
    return (m[-1][1] - start[1]) / ((m[-1][0] - start[0]) / 1000.0)


def warmup_iterations(t: Timeline) -> int | None:
    """Where warm-up ends: the training measured is cut into blocks of equal time (one a second, 4 to 20
    of them); the steady rate is the median over the later half's blocks, and warm-up ends at the start
    of the first block that, with the next, runs within WARMUP_TOLERANCE of it. None with too little
    measured to tell."""
    m = marks(t)
    if len(m) < 4 or m[-1][0] - m[0][0] < 4000:
        return None
    times, counts = np.array([x[0] for x in m]), np.array([x[1] for x in m], dtype=float)
    blocks = int(min(20, max(4, (times[-1] - times[0]) // 1000)))
    edges = np.linspace(times[0], times[-1], blocks + 1)
    done = np.interp(edges, times, counts)
    rates = np.diff(done) / (np.diff(edges) / 1000.0)
    steady = float(np.median(rates[blocks // 2:]))
    if steady <= 0:
        return None
    ok = rates >= (1.0 - WARMUP_TOLERANCE) * steady
    for i in range(blocks - 1):
        if ok[i] and ok[i + 1]:
            return max(1, int(done[i]))
    return max(1, int(done[blocks // 2]))


# -- when a window is over ---------------------------------------------------------------------------

def memory_decision(t: Timeline, min_iterations: int = 0) -> str | None:
    """Why a memory run's auto window is over now, or None while it is not."""
    n, trained = t.iterations(), trained_seconds(t)
    if not n:
        return None
    cap = MEMORY_MAX_S if n >= min_iterations else 3 * MEMORY_MAX_S
    if trained >= cap:
        return f"{cap:.0f} s of training, the most an auto window measures"
    if n < max(MEMORY_MIN_ITERATIONS, min_iterations):
        return None
    verdicts = leak_verdicts(t)
    if any(v.status == "leak" for v in verdicts):   # found: nothing later changes that
        return "a leak was found (" + "; ".join(v.label for v in verdicts if v.status == "leak") + ")"
    if trained < MEMORY_MIN_S or any(v.status == "not-enough-data" for v in verdicts):
        return None
    if slow_rise(t):   # it may still grow into a leak verdict before MEMORY_MAX_S; else the run is not sized
        return None
    flat = plateau(t, WINDOW_ALLOWANCE)
    return "the leak verdicts are decided (no leak) and " + flat.reason if flat.flat else None


def probe_decision(t: Timeline) -> str | None:
    """Why the speed probe's auto window is over now (its rate steady after warm-up), or None."""
    n, trained = t.iterations(), trained_seconds(t)
    if trained >= PROBE_MAX_S and n:
        return f"{PROBE_MAX_S:.0f} s of training, the most the probe measures"
    if trained < PROBE_MIN_S or n < PROBE_MIN_ITERATIONS:
        return None
    warm = warmup_iterations(t)
    m = marks(t)
    after = [x for x in m if warm is not None and x[1] >= warm]
    if warm is None or len(after) < 2 or after[-1][1] - after[0][1] < SPEED_MIN_MEASURED \
            or (after[-1][0] - after[0][0]) / 1000.0 < SPEED_MEASURE_S:
        return None
    return f"the rate is steady after a warm-up of {warm} iterations"


@dataclass
class RunWindow:
    """One run's window: the user's spec and what this run is for ("memory", "probe" or "speed").
    `min_iterations`: an auto memory window measures at least these (a re-run, its first run's);
    `iterations` / `warmup`: a speed run's fixed window and the iterations its rate leaves out."""

    spec: WindowSpec
    purpose: str = "memory"
    min_iterations: int = 0
    iterations: int | None = None
    warmup: int = 0
    decision: dict | None = None
    _lanes: dict[Path, list] = field(default_factory=dict, repr=False)
    _checked: float = 0.0
    _asked: float | None = None

    def agent_options(self, stop_file: Path) -> list[str]:
        """The agent's window options for this run."""
        if self.iterations is not None:
            return [f"window_iterations={self.iterations}"]
        if self.spec.kind == "iterations":
            return [f"window_iterations={int(self.spec.value)}"]
        if self.spec.kind == "seconds":
            return [f"window_ms={int(self.spec.value * 1000)}"]
        if self.spec.kind == "auto":
            return [f"stop_file={stop_file}"]
        return []

    def judged_here(self) -> bool:
        return self.spec.kind == "auto" and self.iterations is None and self.purpose in ("memory", "probe")

    def over(self, run_dir: Path) -> bool:
        """An auto window: judged on the timelines every CHECK_EVERY_S; True once it is over."""
        if self.decision is not None:
            return True
        now = time.monotonic()
        if not self.judged_here() or now - self._checked < CHECK_EVERY_S:
            return False
        self._checked = now
        t = self._training_lane(run_dir)
        if t is None:
            return False
        why = memory_decision(t, self.min_iterations) if self.purpose == "memory" else probe_decision(t)
        if why is None:
            return False
        self.decision = {"reason": why, "iterations": t.iterations(), "trained_s": round(trained_seconds(t), 1)}
        self._asked = now
        return True

    def stop_grace_s(self, run_dir: Path) -> float:
        """How long to wait, once the end was asked for, for the next iteration to end the job."""
        t = self._training_lane(run_dir, read=False)
        rate = rate_after(t, 1) if t is not None else None
        return max(STOP_GRACE_MIN_S, 10.0 / rate) if rate else STOP_GRACE_MIN_S

    def _training_lane(self, run_dir: Path, read: bool = True) -> Timeline | None:
        """The lane with the most iterations, its new lines read."""
        if read:
            for path in run_dir.glob(f"{LANE_PREFIX}*{LANE_SUFFIX}"):
                state = self._lanes.setdefault(path, [0, b"", Events(path)])
                try:
                    with path.open("rb") as fh:
                        fh.seek(state[0])
                        chunk = fh.read()
                except OSError:
                    continue
                state[0] += len(chunk)
                *lines, state[1] = (state[1] + chunk).split(b"\n")
                for line in lines:
                    state[2].feed(line.decode("utf-8", errors="replace"))
        lanes = [s[2].timeline() for s in self._lanes.values()]
        return max(lanes, key=lambda t: t.iterations(), default=None)

    def record(self) -> dict:
        """What run.json keeps of the window."""
        return {"spec": self.spec.text(), "purpose": self.purpose, "iterations": self.iterations,
                "warmup_iterations": self.warmup, "min_iterations": self.min_iterations, "decision": self.decision}


def speed_window(spec: WindowSpec, probe: Timeline | None) -> RunWindow | None:
    """The window of every A/B run of `tune --speed`, from the probe: its warm-up twice over (at least 5
    iterations), then SPEED_MEASURE_S of iterations at its rate (at least SPEED_MIN_MEASURED). None: the
    whole job (`full`, or a probe that shows no rate)."""
    if spec.full:
        return None
    warm = warmup_iterations(probe) if probe is not None else None
    rate = rate_after(probe, warm or 1) if probe is not None else None
    skip = max(5, 2 * (warm or 1))
    if spec.kind == "iterations":
        n = int(spec.value)
        return RunWindow(spec, "speed", warmup=min(skip, n // 3))
    if spec.kind == "seconds":
        return RunWindow(spec, "speed", warmup=skip)
    if rate is None:
        return None
    measured = max(SPEED_MIN_MEASURED, math.ceil(rate * SPEED_MEASURE_S))
    return RunWindow(spec, "speed", iterations=skip + measured, warmup=skip)



class SpeedWindows:
    """The windows of one `tune --speed`: the probe's (auto: until its rate is steady), then, learnt
    from the probe, the one every A/B run gets (`speed_window`); each run's speed is its rate after
    that window's warm-up. None for every run when the spec is None or `full`."""

    def __init__(self, spec: WindowSpec | None) -> None:
        self.spec = spec
        self.runs = 0
        self.probe: RunWindow | None = None
        self.ab: RunWindow | None = None

    def next(self) -> RunWindow | None:
        """The window of the next run (a fresh one: each run's window keeps its own state)."""
        self.runs += 1
        if self.spec is None or self.spec.full:
            return None
        if self.runs == 1:
            self.probe = RunWindow(self.spec, "probe")
            return self.probe
        if self.ab is None:
            return None
        return RunWindow(self.spec, "speed", iterations=self.ab.iterations, warmup=self.ab.warmup)

    def learn(self, probe: Timeline) -> None:
        """After the probe: the A/B runs' window from its warm-up and rate."""
        if self.runs == 1 and self.spec is not None:
            self.ab = speed_window(self.spec, probe)

    @staticmethod
    def rate(t: Timeline, window: RunWindow | None) -> float | None:
        """A run's speed: after its warm-up when windowed (the probe: after the warm-up it showed)."""
        if window is None:
            return t.iterations_per_second()
        skip = window.warmup if window.purpose == "speed" else (warmup_iterations(t) or 1)
        return rate_after(t, skip) or t.iterations_per_second()

    def describe(self) -> dict | None:
        if self.spec is None or self.spec.full:
            return None
        return {"text": self.spec.text(), "probe": self.probe.decision if self.probe else None,
                "runs": None if self.ab is None else {"iterations": self.ab.iterations, "warmup_iterations": self.ab.warmup,
                                                     "agent": self.ab.agent_options(Path("-"))}}
