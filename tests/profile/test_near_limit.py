"""The near-limit warning sits inside tune's headroom: a job at its measured need under tuned limits
is not flagged, a job at the limit is (hand-written timelines: this isolates the diagnosis)."""
import json

import pytest

from pyd4j.memory.flags import DEFAULT_HEADROOM
from pyd4j.profile.diagnose import NEAR_LIMIT_FRACTION, diagnose
from pyd4j.profile.timeline import Timeline

MIB = 1 << 20
LIMIT = 400 * MIB


def _timeline(tmp_path, javacpp_peak: int, largest: int | None = None, live: list[int] = ()) -> Timeline:
    lines = [{"type": "start", "t": 0, "pid": 1, "command": "Job", "heap_max": 1 << 30, "max_direct": 1 << 30}]
    for i in range(20):
        total = javacpp_peak if i == 10 else javacpp_peak // 2
        lines.append({"type": "sample", "t": 100 * i, "heap_used": 50 * MIB, "iterations": i,
                      "javacpp_total": total, "javacpp_max": LIMIT, "javacpp_max_physical": 4 * LIMIT,
                      **({"javacpp_largest": largest} if largest is not None else {})})
    lines += [{"type": "live", "t": 100 * k + 50, "trigger": "inspection", "iterations": k, "heap_live": 10 * MIB,
               "heap_drained": True, "javacpp_total": held} for k, held in enumerate(live, start=1)]
    lines.append({"type": "end", "t": 2000, "reason": "exit", "iterations": 19})
    path = tmp_path / "jvm-1.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return Timeline.load(path)


def test_the_warning_line_is_inside_tunes_headroom():
    assert 1 / (1 + DEFAULT_HEADROOM) < NEAR_LIMIT_FRACTION < 1


@pytest.mark.parametrize("fraction, warned", [(1 / (1 + DEFAULT_HEADROOM), False), (0.93, False), (0.97, True)])
def test_near_limit_fake_timeline(tmp_path, fraction, warned):
    found = [f for f in diagnose(_timeline(tmp_path, int(fraction * LIMIT))) if f.kind == "near-limit"]
    assert bool(found) == warned
    if warned:
        assert found[0].numbers == {"peak": int(0.97 * LIMIT), "limit": LIMIT}
        assert "within 5%" in found[0].title and "maxbytes" in found[0].fix


@pytest.mark.parametrize("largest, live, warned", [(int(0.8 * LIMIT), [int(0.5 * LIMIT)], False),
                                                   (int(0.8 * LIMIT), [int(0.97 * LIMIT)], True),
                                                   (int(0.97 * LIMIT), [], True)])
def test_javacpp_garbage_between_collections_is_not_near_the_limit_fake_timeline(tmp_path, largest, live, warned):
    """JavaCPP collects unreachable Pointers before it refuses: a sampled peak of 99% made of garbage is not a
    warning; the largest Pointer or what stayed after a full collection near the limit is."""
    found = [f for f in diagnose(_timeline(tmp_path, int(0.99 * LIMIT), largest, live)) if f.kind == "near-limit"]
    assert bool(found) == warned
