"""What DL4J's `output()` holds besides the parameters: its inference workspaces, measured.

DL4J runs inference in workspaces that learn their size over the first calls and then keep it: the
memory a served or predicting network holds is those workspaces, its parameters and the arrays of
one call. DL4J's NetworkMemoryReport misses most of it (0.25x on zoo SimpleCNN at batch 32, 1.65x
over on SqueezeNet), so the workspaces are measured instead: settled sizes at batch 1 and a second
batch, on a thread of their own (workspaces are per thread), and the line through them -- measured
proportional to the batch on every zoo network tried.

The second batch is 2 where batch 1's workspaces already hold MIN_PROBE_SPAN; for a smaller network
it is larger. ND4J rounds workspace allocations up, so a tiny network's workspaces hold the same at
batches 1 and 2 (a generated embedding of 4: 64 bytes at both, then 32 bytes per sample from batch
3 on), and a line through those two has no slope: at batch 32 it predicted 0.43x of such networks'
footprints. The line goes through both measurements, also where batch 1's workspaces hold less than
a sample's share at the second batch (its fixed part is then negative; at batch 1 it is still batch
1's measurement).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from pyd4j import workspaces
from pyd4j.dl4j.config import GRAPH, configuration_of
from pyd4j.jvm import java_errors

# Settled once the workspaces kept their size for as many calls as it took them to reach it (and 2 at
# least), after at least 8 calls, or after SETTLE_MAX_CALLS, the largest size seen. A graph's workspaces
# may start learning one after another: zoo InceptionResNetV1 held 2.4 MB for calls 2-4 and 3.6 MB from
# the 7th on; a generated graph of three outputs grew at calls 2, 3, 5 and 9 (1.2 KB for calls 5-8, 2.1
# KB from the 9th on), which three equal calls in a row took for settled.
SETTLE_MIN_CALLS = 8
SETTLE_MAX_CALLS = 32
MIN_PROBE_SPAN = 64 * 1024       # workspace bytes at the second probe batch: the granules are noise there
# at most: a larger second batch tells the line little more and costs the probe its time and memory
# (a generated RnnLossLayer network's workspaces hold nothing at batch 1, its output a view, and a copy
# of the output at 2 and more: the line through 1 and 16 is within 2% of its footprint at 32)
MAX_PROBE_BATCH = 16
MAX_PROBE_CALL_BYTES = 16 << 20  # the second probe's input and output arrays at most


def settled_workspace_bytes(run: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes this thread's workspaces hold once they stop growing, calling `run` again and again, and
    what the last call returned. They learn over several calls: after one output() of deep_cnn_bn at
    batch 32 they held 21 MB, from the third on 64 MB (a second workspace allocates one call later)."""
    sizes: list[int] = []
    result = None
    grew_at = 0   # the call at which they last changed size
    for _ in range(SETTLE_MAX_CALLS):
        result = run()
        sizes.append(workspaces.held_bytes())
        if len(sizes) > 1 and sizes[-1] != sizes[-2]:
            grew_at = len(sizes)
        if len(sizes) >= SETTLE_MIN_CALLS and len(sizes) - grew_at >= max(2, grew_at):
            break
    return max(sizes), result


def example_inputs(shapes: Sequence[Sequence[int]], batch: int, dtype: np.dtype) -> list[np.ndarray]:
    """Inputs for measuring a network's output() at `batch`: zeros, which every DL4J input accepts (an
    EmbeddingLayer's index input refuses a negative or too large index, which random values give);
    the memory output() holds depends on the shapes only. `shapes`: each input without the batch."""
    return [np.zeros((batch, *s), dtype) for s in shapes]


def output(net: Any, kind: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One `net.output()` call on numpy inputs, as numpy copies; the outputs' ND4J memory is released
    at once rather than at Java's next collection."""
    import pyd4j.nd as nd  # noqa: PLC0415 - numpy <-> ND4J loads only where a network runs

    xs = [nd.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    outs = list(net.output(*xs)) if kind == GRAPH else [net.output(xs[0])]
    result = [nd.to_numpy(o, copy=True) for o in outs]
    for o in outs:
        if o.closeable():
            o.close()
    return result


def second_probe_batch(held_at_1: int, call_bytes_per_sample: int) -> int:
    """The batch whose workspaces, with batch 1's, give the line: 2, doubled while batch 1's workspaces
    times it stay under MIN_PROBE_SPAN (up to MAX_PROBE_BATCH, and while the call's own arrays stay
    under MAX_PROBE_CALL_BYTES)."""
    batch = 2
    while (batch < MAX_PROBE_BATCH and batch * max(held_at_1, 1) < MIN_PROBE_SPAN
           and 2 * batch * call_bytes_per_sample <= MAX_PROBE_CALL_BYTES):
        batch *= 2
    return batch


def workspace_line(net: Any, shapes: Sequence[Sequence[int]], dtype: np.dtype) -> tuple[int, int, int]:
    """(fixed bytes, bytes per sample, output bytes per sample) of a network's settled inference
    workspaces, from output() at batch 1 and `second_probe_batch` on a new thread (its workspaces
    destroyed after). `shapes`: each input array's shape without the batch."""
    kind = configuration_of(net)[1]
    found: dict[int, tuple[int, int]] = {}
    failure: list[BaseException] = []
    in_elems = sum(int(np.prod(s, dtype=np.int64)) for s in shapes)

    def settle(b: int) -> None:
        arrays = example_inputs(shapes, b, dtype)
        held, outs = settled_workspace_bytes(lambda: output(net, kind, arrays))
        # output bytes as returned: a network without parameters fed `dtype` may answer in another type
        found[b] = (held, sum(int(o.nbytes) // b for o in outs))
        workspaces.destroy_all()

    def probe() -> None:
        from pyd4j.jvm.core import detach  # noqa: PLC0415 - only a thread that used Java detaches

        try:
            with java_errors():
                settle(1)
                settle(second_probe_batch(found[1][0], in_elems * dtype.itemsize + found[1][1]))
        except BaseException as err:  # noqa: BLE001 - raised again on the caller's thread
            failure.append(err)
        finally:
            workspaces.destroy_all()
            detach()

    worker = threading.Thread(target=probe, name="pyd4j-inference-probe", daemon=True)
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    (b1, (w1, out_bytes)), (b2, (w2, _)) = sorted(found.items())
    # never a negative slope: a network's workspaces may settle smaller at the larger batch (sizes
    # rounded to the allocator's granules), which extended as a line would go below zero
    per = int(round(max(0.0, (w2 - w1) / (b2 - b1))))
    return w1 - per * b1, per, out_bytes
