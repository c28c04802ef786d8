"""Cost model: device profiles and per-step times for the simulator and the policies.

Times follow a roofline: a compute step takes max(FLOPs / (throughput * efficiency),
bytes touched / device memory bandwidth); a CONV step's FLOP part is divided by the speed of its
convolution algorithm. The algorithms are the device table's (`conv_algorithms` in
`devices.json`: cuDNN's), or the graph's framework's own when it has them (DL4J: a
convolution run in 1, 2, 4 or 8 batch chunks; `CostModel.algorithms`). Transfers take bytes / host-link bandwidth + latency (pinned host memory)
or bytes / disk bandwidth for the disk tier. Defaults are datasheet numbers from `devices.json`;
`CostModel.from_json` / `DeviceProfile.from_json` take measured numbers instead.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pyd4j.sched.deps import chunkable
from pyd4j.sched.graph import Graph, Layer, LayerType


@dataclass(frozen=True)
class ConvAlgo:
    """A convolution algorithm: relative speed and workspace rule.

    workspace = workspace_im2col * (bytes of the im2col matrix) + workspace_fixed
    (+ an int32 index per im2col row when `workspace_index`). `only_kernel`/`only_stride`/
    `min_kernel` restrict where it applies (Winograd: 3x3 stride 1).

    `batch_chunks` > 0: the framework runs the convolution in that many batch slices; it takes no
    optional workspace, its working memory is the step's mandatory scratch of one slice
    (`pyd4j.sched.deps.chunked_scratch`), and it applies where the layer can be sliced
    (`pyd4j.sched.deps.chunkable`) into at most its batch.
    """

    name: str
    speed: float
    workspace_im2col: float = 0.0
    workspace_fixed: int = 0
    workspace_index: bool = False
    only_kernel: int | None = None
    only_stride: int | None = None
    min_kernel: int | None = None
    batch_chunks: int = 0

    def applies(self, layer: Layer) -> bool:
        if self.batch_chunks > 1:
            return self.batch_chunks <= layer.out_shape[0] and chunkable(layer)
        if self.batch_chunks == 1:   # the whole batch: DL4J's own step, on any layer
            return True
        kh, kw = layer.attrs["kernel"]
        if self.only_kernel is not None and (kh, kw) != (self.only_kernel, self.only_kernel):
            return False
        if self.only_stride is not None and layer.attrs["stride"] != self.only_stride:
            return False
        if self.min_kernel is not None and min(kh, kw) < self.min_kernel:
            return False
        return True

    def workspace(self, layer: Layer, graph: Graph) -> int:
        if not self.workspace_im2col and not self.workspace_index:
            return int(self.workspace_fixed)   # no patch matrix (a batch-chunk algorithm; any layer)
        n, c, _, _ = graph.layers[layer.inputs[0]].out_shape
        _, _, oh, ow = layer.out_shape
        kh, kw = layer.attrs["kernel"]
        rows = c // layer.attrs.get("groups", 1) * kh * kw  # one group at a time
        im2col = rows * oh * ow * n * layer.itemsize
        ws = self.workspace_im2col * im2col + self.workspace_fixed
        if self.workspace_index:
            ws += 4 * rows * oh * ow
        return int(math.ceil(ws))


@dataclass(frozen=True)
class DeviceProfile:
    """What the cost model needs to know about a device."""

    key: str
    name: str
    memory_bytes: int
    tflops: float
    mem_gbps: float
    link_gbps: float
    disk_gbps: float = 1.0
    efficiency: float | None = None  # measured fraction of `tflops` (None: the global default)
    step_overhead_s: float = 0.0  # fixed cost of every compute step (op dispatch; CPU backends)

    @classmethod
    def from_json(cls, key: str, doc: dict[str, Any]) -> "DeviceProfile":
        """Profile from a devices.json entry; its documentation keys (`source`, `published`,
        `calibration`) are not read, any other unknown key is refused (a misspelt field)."""
        known = {f for f in cls.__dataclass_fields__ if f != "key"}
        unknown = set(doc) - known - {"key", "source", "published", "calibration"}
        if unknown:
            raise TypeError(f"device {key!r}: unknown fields {sorted(unknown)}; known: "
                            f"{sorted(known)}")
        return cls(key=key, **{k: v for k, v in doc.items() if k in known})


_FRAMEWORK_ALGOS: dict[str, tuple[Any, tuple[ConvAlgo, ...]]] = {}


def _load_default() -> dict[str, Any]:
    with resources.files("pyd4j.sched").joinpath("devices.json").open() as f:
        return json.load(f)


_DEFAULT: dict[str, Any] | None = None


def default_doc() -> dict[str, Any]:
    """The built-in profiles document (cached)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = _load_default()
    return _DEFAULT


@dataclass
class CostModel:
    """Device profile + conv-algorithm table + per-layer step times (memoised per graph)."""

    device: DeviceProfile
    algos: tuple[ConvAlgo, ...]
    efficiency: float = 0.6
    latency_s: float = 1e-5
    host_memory_bytes: int = 64 << 30
    _cache: dict[int, tuple[list[float], list[float], list[float]]] = field(
        default_factory=dict, repr=False)

    @classmethod
    def for_device(cls, device: str | DeviceProfile = "k40c",
                   overrides: dict[str, Any] | str | Path | None = None) -> "CostModel":
        """Cost model for a named device; `overrides` (a dict or JSON file in the format of
        devices.json, partial allowed) replaces defaults with measured numbers."""
        doc = json.loads(json.dumps(default_doc()))
        if overrides is not None:
            extra = overrides if isinstance(overrides, dict) else json.loads(Path(overrides).read_text())
            for k, v in (extra.get("devices") or {}).items():
                doc["devices"][k] = {**doc["devices"].get(k, {}), **v}
            for k in ("conv_algorithms", "compute_efficiency", "transfer_latency_s",
                      "host_memory_bytes"):
                if extra.get(k) is not None:   # null: not given (the devices schema's default)
                    doc[k] = extra[k]
            doc["aliases"].update(extra.get("aliases") or {})
        if isinstance(device, DeviceProfile):
            profile = device
        else:
            key = doc["aliases"].get(device.lower(), device.lower())
            if key not in doc["devices"]:
                raise KeyError(f"unknown device {device!r}; known: {sorted(doc['devices'])} "
                               f"and aliases {sorted(doc['aliases'])}")
            profile = DeviceProfile.from_json(key, doc["devices"][key])
        algos = tuple(ConvAlgo(**a) for a in doc["conv_algorithms"])
        efficiency = (profile.efficiency if profile.efficiency is not None
                      else doc["compute_efficiency"])
        return cls(profile, algos, efficiency, doc["transfer_latency_s"],
                   doc["host_memory_bytes"])

    def algorithms(self, graph: Graph) -> tuple[ConvAlgo, ...]:
        """The convolution algorithms for `graph`: its framework's own (a framework with its own
        algorithms, e.g. DL4J's batch chunks) or else this device's table."""
        table = graph.framework.conv_algorithms
        if not table:
            return self.algos
        hit = _FRAMEWORK_ALGOS.get(graph.framework.name)
        if hit is None or hit[0] is not table:
            hit = _FRAMEWORK_ALGOS[graph.framework.name] = (table, tuple(ConvAlgo(**a) for a in table))
        return hit[1]

    # -- step times -------------------------------------------------------------------------
    def _roofline(self, flops: float, nbytes: float, speed: float = 1.0) -> float:
        return max(flops / (self.device.tflops * 1e12 * self.efficiency * speed),
                   nbytes / (self.device.mem_gbps * 1e9)) + self.device.step_overhead_s

    def layer_times(self, graph: Graph) -> tuple[list[float], list[float], list[float]]:
        """(forward, backward, update) seconds per layer with the no-workspace algorithm."""
        key = id(graph)
        hit = self._cache.get(key)
        if hit is not None and len(hit[0]) == len(graph):
            return hit
        fwd, bwd, upd = [], [], []
        layers = graph.layers
        nb = graph.deps.nbytes
        out = nb[0::5][:len(layers)]
        for layer in layers:
            in_bytes = sum(out[j] for j in layer.inputs)
            touched = in_bytes + out[layer.id] + nb[5 * layer.id + 2]
            if layer.type is LayerType.DATA:
                fwd.append(self.transfer_time(out[layer.id]))
                bwd.append(0.0)
            else:
                fwd.append(self._roofline(layer.fwd_flops, touched))
                bwd.append(self._roofline(layer.bwd_flops, 2 * touched))
            # SGD with momentum: read w, dw, m; write w, m.
            upd.append(5 * nb[5 * layer.id + 2] / (self.device.mem_gbps * 1e9))
        self._cache[key] = (fwd, bwd, upd)
        return fwd, bwd, upd

    def _memo(self, graph: Graph) -> dict:
        """Per-graph memo of this model's convolution answers (kept on the graph, which resets
        it when it changes; the model itself is held so its id cannot be reused)."""
        key = ("costmodel", id(self))
        hit = graph._memo.get(key)
        if hit is None or hit[0] is not self:
            hit = graph._memo[key] = (self, {})
        return hit[1]

    def conv_time(self, graph: Graph, i: int, backward: bool, algo: int) -> float:
        """Seconds of a CONV step with algorithm `algo`."""
        memo = self._memo(graph)
        key = (i, backward, algo)
        t = memo.get(key)
        if t is None:
            layer = graph.layers[i]
            touched = (sum(graph.layers[j].out_bytes for j in layer.inputs) + layer.out_bytes
                       + layer.param_bytes)
            flops = layer.bwd_flops if backward else layer.fwd_flops
            t = memo[key] = self._roofline(flops, (2 if backward else 1) * touched,
                                           self.algorithms(graph)[algo].speed)
        return t

    def conv_options(self, graph: Graph, i: int) -> list[tuple[int, int]]:
        """(algo index, workspace bytes) applicable to CONV layer i (or to a layer whose steps may run in
        batch chunks, `pyd4j.sched.deps.chunkable`), fastest first."""
        memo = self._memo(graph)
        opts = memo.get(i)
        if opts is None:
            layer = graph.layers[i]
            algos = self.algorithms(graph)
            opts = [(a, algo.workspace(layer, graph)) for a, algo in enumerate(algos)
                    if algo.applies(layer)]
            opts.sort(key=lambda o: -algos[o[0]].speed)
            memo[i] = opts
        return opts

    def conv_workspace(self, graph: Graph, i: int, algo: int) -> int:
        """Workspace bytes algorithm `algo` needs on CONV layer i (0 if it does not apply)."""
        for a, ws in self.conv_options(graph, i):
            if a == algo:
                return ws
        return 0

    def transfer_time(self, nbytes: int, disk: bool = False) -> float:
        """Seconds to move `nbytes` over the host link (or from/to the disk tier)."""
        gbps = self.device.disk_gbps if disk else self.device.link_gbps
        return nbytes / (gbps * 1e9) + self.latency_s
