"""One served DL4J network: load, measure, infer, evict to the disk tier, restore.

Every method that touches Java runs on the model's own worker thread (pyd4j.serve.worker): DL4J
keeps a network's inference workspaces per thread, so the thread that ran the model is the one
that can destroy them when the model is evicted.

Eviction on ND4J's CPU backend: the flattened parameters (`net.params()`, which every layer's
weights are views of) are written to a memory-mapped file, its parameter buffer is closed
(released at once, not when Java's GC gets to it) and the network dropped, and the thread's
workspaces are destroyed. Only the configuration JSON stays in memory. Restore builds the network
from the configuration and copies the file into a fresh ND4J-owned parameter buffer; outputs are
bit-identical before and after.

Footprint: DL4J's inference workspaces are sized by the rows of one output() call and learn over
several calls; they are measured once they stop growing, with the batch run `slice_rows` rows a call
(pyd4j.serve.sizing chooses the fewest rows that keep the speed).
"""

from __future__ import annotations

import ctypes
import logging
import math
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from pyd4j import workspaces
from pyd4j.dl4j import config, input_types
from pyd4j.dl4j.inference import example_inputs, output, settled_workspace_bytes
from pyd4j.dl4j.load import load
from pyd4j.dl4j.sizecheck import check_parameters_fit, machine_bytes
from pyd4j.inputs import MAX_TEXT_BYTES, InputError, model_name
from pyd4j.jvm.errors import JavaError
from pyd4j.memory.estimate import EstimateError, estimate
from pyd4j.serve import sizing
from pyd4j.serve.protocol import DATATYPES, TensorSpec, datatype_of

log = logging.getLogger("pyd4j.serve")


class ModelLoadError(InputError):
    """A model pyd4j cannot serve (unreadable file, unknown input type, larger than the budget)."""


@dataclass
class Footprint:
    """What a model holds while resident, measured at load at its largest batch, and pyd4j's estimate beside it."""

    max_batch: int
    params_bytes: int       # the flattened parameter buffer
    workspace_bytes: int    # DL4J's inference workspaces after max_batch rows run in slices of slice_rows
    io_bytes: int           # input and output arrays of one max_batch request
    estimate_bytes: int | None  # pyd4j.memory.estimate (mode infer, no data pipeline) at slice_rows
    slice_rows: int         # rows one output() call runs (pyd4j.serve.sizing)
    whole_workspace_bytes: int  # the workspaces had max_batch rows run in one call
    estimate_error: str | None = None   # why there is no estimate (the model is served all the same)

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.workspace_bytes + self.io_bytes

    def to_dict(self) -> dict[str, int | str | None]:
        return dict(asdict(self), total_bytes=self.total_bytes)


def _return_free_memory() -> None:
    """Hand the memory just freed back to the system (glibc's malloc_trim). libnd4j allocates with
    malloc; after evictions and restores of different sizes the freed blocks stay in malloc's arenas
    (one per thread) and RSS grows: measured 313 -> 392 MiB over 300 evict/restore cycles of two
    small models, 220 -> 236 MiB with this. A no-op where the C library is not glibc."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC: Any = None


def _write_params(params: np.ndarray, directory: Path, name: str) -> IO[bytes]:
    """The parameters in a new file of `directory` that has no name (unlinked as it is made), whole or
    not at all: written with ordinary writes (a full disk is an OSError here; through a memory map it
    would be SIGBUS) and handed back only when complete, so a restore never reads a partial file. The
    file goes when it is closed or the process ends, however it ends (SIGTERM, SIGKILL, a JVM abort):
    a server leaves nothing in the temp directory. The model stays resident when this fails."""
    f = tempfile.TemporaryFile(dir=directory, prefix=f"pyd4j-serve-{name}-", suffix=".params")
    try:
        params.tofile(f)
        f.flush()
    except BaseException:
        f.close()
        raise
    return f


def parse_model_arg(text: str, option: str = "--model") -> tuple[str, Path]:
    """'NAME=PATH' -> (name, path) of a --model option; InputError names the fix."""
    name, sep, path = text.partition("=")
    name = name.strip()
    if not sep or not name or not path:
        raise InputError(f"{option} {text!r}: write NAME=PATH, e.g. {option} mlp=examples/networks/mlp.json "
                         f"(a ModelSerializer zip or a configuration JSON)")
    return model_name(name, f"{option} {text!r}: the name"), Path(path)


class ServedModel:
    """A DL4J MultiLayerNetwork or ComputationGraph from a ModelSerializer zip or a configuration JSON."""

    def __init__(self, name: str, path: str | Path, spill_dir: Path, input_spec: str | None = None,
                 restore_from: str = "disk", budget: int | None = None) -> None:
        self.name = model_name(name)
        self.restore_from = restore_from  # "zip": reload a zip model from its file instead (a baseline)
        self.path = Path(path)
        self.spill_dir = Path(spill_dir)  # the disk tier's file is made here, nameless (see _write_params)
        self._spill: IO[bytes] | None = None
        self.budget = budget              # refused before init() when its parameters alone pass it
        self.input_spec = input_spec
        self.net: Any = None
        self.kind = ""
        self.source = ""
        self.conf_json = ""
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.footprint: Footprint | None = None
        self.load_seconds = 0.0
        self.last_restore_seconds: float | None = None
        self.params_dtype: np.dtype | None = None
        self.sizing: sizing.SliceSizing | None = None
        self.slice_rows: int | None = None   # rows one output() call runs; None: any number (before load)
        self._params: Any = None  # the parameter array restore() made (the network holds a view of it)

    # ------------------------------------------------------------------ load

    def load(self, max_batch: int, slice_rows: int | str = "auto") -> Footprint:
        """Read the model, learn its tensors, choose how many rows one output() call runs and measure
        what it holds after max_batch rows. slice_rows: "auto" (the fewest that keep the speed,
        pyd4j.serve.sizing), "whole" (max_batch) or a number of rows."""
        from pyd4j.jvm import java_errors  # noqa: PLC0415

        t0 = time.perf_counter()
        if not self.path.is_file():
            raise ModelLoadError(f"model {self.name!r}: {str(self.path)!r} is not a file; give a ModelSerializer zip "
                                 f"or a DL4J configuration JSON")
        with java_errors():
            if zipfile.is_zipfile(self.path):
                self.source = "zip"
                self._check_zip()
                self.net = self._from_zip()
            else:
                self.source = "json"
                self.net = self._from_json()
            self.conf_json = str(self._conf().toJson())
            import pyd4j.nd as nd  # noqa: PLC0415

            self.params_dtype = nd.to_numpy(self.net.params()).dtype
            specs = self._input_types()
            names = self._input_names()
            if len(names) != len(specs):
                raise ModelLoadError(f"model {self.name!r} has {len(names)} inputs {names} but {len(specs)} input types")
            dt = datatype_of(self.params_dtype)
            self.inputs = [TensorSpec(n, dt, tuple(input_types.array_shape(s, -1))) for n, s in zip(names, specs)]
            one = self.infer(example_inputs([s.shape[1:] for s in self.inputs], 1, self.params_dtype))
            self.outputs = [TensorSpec(n, datatype_of(a.dtype), (-1, *a.shape[1:])) for n, a in zip(self._output_names(), one)]
            # workspaces that learnt nothing at one row stay empty at any batch (a network whose one-row
            # output is a view): the measurement learns them at max_batch, as the estimate's probe does
            workspaces.destroy_all()
            self._check_batch_fits(max_batch)
            self.footprint = self._measure(max_batch, slice_rows, specs)
        self.load_seconds = time.perf_counter() - t0
        return self.footprint

    def _check_batch_fits(self, max_batch: int) -> None:
        """A batch of max_batch rows (its inputs and outputs) must fit the budget and the machine before
        one is made: --max-batch 2147483647 would otherwise fail allocating terabytes."""
        row = sum(math.prod(s.shape[1:]) * DATATYPES[s.datatype].itemsize for s in (*self.inputs, *self.outputs))
        limit, what = machine_bytes(), "this machine's memory"
        if self.budget is not None and self.budget < limit:
            limit, what = self.budget, "the budget (--budget)"
        if row * max_batch > limit:
            raise ModelLoadError(f"model {self.name!r}: --max-batch {max_batch} makes one batch of {row * max_batch} "
                                 f"bytes of inputs and outputs ({row} bytes a row), more than {what} of {limit} "
                                 f"bytes; lower --max-batch (at most {max(1, limit // max(row, 1))} rows fit)")

    def _check_zip(self) -> None:
        """A ModelSerializer zip's entries, its configuration, and its parameters' size against the
        budget and the machine, before DL4J reads any of it."""
        where = f"model {self.name!r} ({str(self.path)!r})"
        with zipfile.ZipFile(self.path) as z:
            for entry, what in (("configuration.json", "the configuration"), ("coefficients.bin", "the parameters")):
                if entry not in z.namelist():
                    raise ModelLoadError(f"model {self.name!r}: {str(self.path)!r} is a zip without {entry} ({what}), "
                                         f"not one ModelSerializer.writeModel(net, file, saveUpdater) wrote")
            if z.getinfo("configuration.json").file_size > MAX_TEXT_BYTES:
                raise ModelLoadError(f"{where}: configuration.json declares {z.getinfo('configuration.json').file_size} "
                                     f"bytes, more than the {MAX_TEXT_BYTES} a DL4J configuration takes; write the "
                                     f"model with ModelSerializer.writeModel")
            try:
                text = z.read("configuration.json").decode("utf-8")
            except UnicodeDecodeError as err:
                raise ModelLoadError(f"model {self.name!r}: configuration.json in {str(self.path)!r} is not UTF-8 "
                                     f"({err}); write the model with ModelSerializer.writeModel") from None
            declared = z.getinfo("coefficients.bin").file_size
        try:
            _, self.kind = config.parse_document(text, f"configuration.json in {str(self.path)!r}")
        except InputError as err:
            raise ModelLoadError(f"model {self.name!r}: {err}") from None
        # the parameters DL4J will read, before it reads them: the configuration's count, and the
        # size the zip declares for coefficients.bin (a zip of zeros compresses a thousandfold)
        conf = config.java_configuration(text, self.kind, where)
        needed = check_parameters_fit(conf, where, self.budget)
        if declared > 2 * needed + 1024**2:
            raise ModelLoadError(f"{where}: coefficients.bin declares {declared} bytes, and the configuration's "
                                 f"parameters take {needed}: not a file ModelSerializer.writeModel wrote for this "
                                 f"configuration; write the model again")

    def _from_zip(self):
        from org.deeplearning4j.util import ModelSerializer  # noqa: PLC0415

        restore = ModelSerializer.restoreComputationGraph if self.kind == "ComputationGraph" \
            else ModelSerializer.restoreMultiLayerNetwork
        return restore(str(self.path), False)

    def _from_json(self):
        try:
            text, self.kind = config.read_config_file(self.path)
        except InputError as err:
            raise ModelLoadError(f"model {self.name!r}: {err}") from None
        return self._build(text, init=True)   # random parameters from the configuration's seed

    def _build(self, text: str, init: bool = False):
        where = f"model {self.name!r}"
        return config.network_of(config.java_configuration(text, self.kind, where), self.kind, init, where, self.budget)

    def _conf(self):
        return self.net.getConfiguration() if self.kind == "ComputationGraph" else self.net.getLayerWiseConfigurations()

    def _input_names(self) -> list[str]:
        return [str(n) for n in self._conf().getNetworkInputs()] if self.kind == "ComputationGraph" else ["input"]

    def _output_names(self) -> list[str]:
        return [str(n) for n in self._conf().getNetworkOutputs()] if self.kind == "ComputationGraph" else ["output"]

    def _input_types(self) -> list[dict[str, Any]]:
        spec: Any = self.input_spec
        if spec is None and self.source == "zip":
            for side in (input_types.sidecar_path(self.path), self.path.with_suffix(".input.json")):
                if side.is_file():
                    spec = input_types.read_sidecar(side)
                    break
        try:
            return load(self.net if self.source == "zip" else self.path, spec).inputs
        except InputError as err:
            raise ModelLoadError(f"model {self.name!r}: {err}") from None

    def _measure(self, max_batch: int, slice_rows: int | str, specs: list[dict[str, Any]]) -> Footprint:
        x = example_inputs([s.shape[1:] for s in self.inputs], max_batch, self.params_dtype)
        self.slice_rows = max_batch
        whole_ws, y = self._settled_workspaces(x)
        if slice_rows == "auto":
            def run(rows: int) -> None:
                self.slice_rows = rows
                self.infer(x)
            self.sizing = sizing.measure(run, max_batch)
        elif slice_rows == "whole":
            self.sizing = sizing.SliceSizing(max_batch, max_batch, "whole")
        else:
            self.sizing = sizing.SliceSizing(max_batch, min(int(slice_rows), max_batch), "fixed")
        self.slice_rows = self.sizing.rows
        ws = whole_ws
        if self.slice_rows < max_batch:  # learnt again at the slice
            workspaces.destroy_all()
            ws, _ = self._settled_workspaces(x)
        params = int(self.net.params().length()) * self.params_dtype.itemsize
        io = sum(a.nbytes for a in x) + sum(a.nbytes for a in y)
        try:   # beside the measurement, never instead of it: a model pyd4j cannot estimate still serves
            e = estimate(self.net, self.slice_rows, dtype=self.params_dtype.name, mode="infer", input=specs)
            estimate_bytes, why = e.offheap_bytes - e.term_bytes("prefetch_buffers"), None   # no data pipeline
        except (EstimateError, JavaError) as err:   # DL4J's memory report fails on some networks (a null layer report)
            estimate_bytes, why = None, f"{type(err).__name__}: {err}"
            log.warning("model %s: no estimate beside its measured footprint: %s", self.name, err)
        return Footprint(max_batch, params, ws, io, estimate_bytes, self.slice_rows, whole_ws, why)

    def _settled_workspaces(self, x: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
        """Bytes DL4J's inference workspaces hold once they stop growing, running `x` again and again
        (and the outputs of the last run). Calls of fewer rows in any order never took them above this
        (0.98-0.99x of it, measured)."""
        return settled_workspace_bytes(lambda: self.infer(x))

    # ------------------------------------------------------------------ run

    def infer(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """net.output() on the given inputs (batch first), `slice_rows` rows a call, as numpy copies."""
        rows = len(arrays[0])
        step = self.slice_rows or rows
        if rows <= step:
            return self._output(arrays)
        parts = [self._output([a[i:i + step] for a in arrays]) for i in range(0, rows, step)]
        return [np.concatenate(p) for p in zip(*parts)]

    def _output(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """One net.output() call at the model's parameter dtype."""
        return output(self.net, self.kind, [np.ascontiguousarray(a, dtype=self.params_dtype) for a in arrays])

    @property
    def resident(self) -> bool:
        return self.net is not None

    def evict(self) -> None:
        """Parameters to the disk tier, network closed, this thread's workspaces destroyed."""
        import pyd4j.nd as nd  # noqa: PLC0415

        # inference never changes the parameters: the file is written once, at the first eviction
        if self.restore_from != "zip" and self._spill is None:
            self._spill = _write_params(nd.to_numpy(self.net.params()), self.spill_dir, self.name)
        self._release()
        workspaces.destroy_all()
        _return_free_memory()

    def _release(self) -> None:
        """Free the network's parameter (and gradient) buffers now and drop it. What DL4J's close() does
        without its System.gc(), which takes a full collection (0.2-0.4 s) per eviction."""
        # after init(params, false) the network's params() is a view of the array restore() made,
        # and a view cannot be closed: that array is closed instead
        for arr in (self.net.params(), self._params, self.net.getGradientsViewArray()):
            if arr is not None and not arr.wasClosed() and arr.closeable():
                arr.close()
        self.net = self._params = None

    def restore(self) -> float:
        """The network again, from its configuration and the disk tier; returns the seconds it took."""
        from org.nd4j.linalg.api.buffer import DataType  # noqa: PLC0415
        from org.nd4j.linalg.factory import Nd4j  # noqa: PLC0415

        import pyd4j.nd as nd  # noqa: PLC0415

        t0 = time.perf_counter()
        if self.restore_from == "zip" and self.source == "zip":
            self.net = self._from_zip()
            self.last_restore_seconds = time.perf_counter() - t0
            return self.last_restore_seconds
        mm = np.memmap(self._spill, dtype=self.params_dtype, mode="r")
        params = Nd4j.createUninitialized(DataType.valueOf(nd.nd4j_dtype(self.params_dtype)), 1, int(mm.size))
        target = nd.to_numpy(params)
        np.copyto(target, mm.reshape(target.shape))
        del target, mm
        net = self._build(self.conf_json)
        net.init(params, False)
        self.net, self._params = net, params
        self.last_restore_seconds = time.perf_counter() - t0
        return self.last_restore_seconds

    def close(self) -> None:
        """Release the network and the disk tier's file (shutdown)."""
        if self.net is not None:
            self._release()
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "source": self.source, "path": str(self.path),
                "inputs": [s.to_dict() for s in self.inputs], "outputs": [s.to_dict() for s in self.outputs]}
