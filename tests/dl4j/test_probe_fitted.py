"""`pyd4j.dl4j.probe.fitted`'s arithmetic, isolated with a fake probe (a linear layer of known fixed and
per-sample bytes): the line through two small batches, the shapes kept, each set of inputs probed once.
Against real DL4J: tests/memory/test_fit_model.py and tests/train/test_probed_plans.py."""

from __future__ import annotations

from pyd4j.dl4j.probe import FIT_BATCHES, fitted


def test_fake_probe_line_through_two_batches_gives_any_batch():
    calls: list[int] = []

    def fake(inputs):
        n = inputs[0][0]
        calls.append(n)
        return {"lstm": {"shape": [128, 50], "params": 7, "measured": {"ws_forward": 1000 + 300 * n,
                                                                       "ws_backward": 5000 + 700 * n, "saved": 0}},
                "dense": {"shape": [10], "params": 3}}

    probe = fitted(fake)
    for n in (1, 8, 64, 2048):
        got = probe([(n, 32, 50)])
        assert got["lstm"]["measured"] == {"ws_forward": 1000 + 300 * n, "ws_backward": 5000 + 700 * n, "saved": 0}
        assert got["lstm"]["shape"] == [128, 50] and got["dense"] == {"shape": [10], "params": 3}
    assert calls == list(FIT_BATCHES)   # probed once, at the two small batches
    probe([(4, 16, 50)])                 # other per-sample shapes: probed again
    assert calls == [*FIT_BATCHES, *FIT_BATCHES]
