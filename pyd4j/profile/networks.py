"""The DL4J networks a profiled job trained, saved in its run directory as DL4J's own JSON and pyd4j's
input sidecar: so that `pyd4j estimate`, `flags`, `batch` and `plan` size a job's network without its code.

The agent describes each network at its first iteration (`describe=true`: `conf.toJson()` and the shapes
of its first batch). Each distinct configuration becomes `network-N.json` (N from 1, in the order the job
trained them) with `network-N.input.json` beside it, the input types read from those shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyd4j.dl4j.input_types import InputTypeError, inputs_from_shapes, sidecar_path
from pyd4j.profile.timeline import Timeline


def _batch(net: dict[str, Any]) -> int:
    shapes = _shapes(net)
    return int(shapes[0][0]) if shapes else 0


def _shapes(net: dict[str, Any]) -> list[list[int]]:
    return net.get("input_shapes") or ([net["input_shape"]] if net.get("input_shape") else [])


def _described(lanes: list[Timeline]) -> list[dict[str, Any]]:
    """Each distinct network configuration the agent described, in the order the job first trained it, with the
    largest first batch any network of it trained on (a job that warms up on a small batch, then trains)."""
    by_conf: dict[str, dict[str, Any]] = {}
    for lane in lanes:
        for event in lane.network_events:
            net = event.get("network") if event.get("type") == "network" else None
            if not isinstance(net, dict) or not isinstance(net.get("conf"), dict):
                continue
            key = json.dumps(net["conf"], sort_keys=True)
            if key not in by_conf or _batch(net) > _batch(by_conf[key]):
                by_conf[key] = net   # dicts keep the first insertion's place
    return list(by_conf.values())


def save_networks(run_dir: str | Path, lanes: list[Timeline]) -> list[dict[str, Any]]:
    """Write each network the job trained as `network-N.json` and its input sidecar; return, per network,
    where it went, its kind, the batch it trained on and the command that gives its flags (or why its input
    types could not be read: the JSON is written, the sidecar not)."""
    run_dir = Path(run_dir)
    saved = []
    for n, net in enumerate(_described(lanes), start=1):
        path = run_dir / f"network-{n}.json"
        path.write_text(json.dumps(net["conf"], indent=2) + "\n")
        shapes = _shapes(net)
        row: dict[str, Any] = {"path": str(path), "kind": net.get("kind"), "batch": _batch(net) or None}
        try:
            if not shapes:
                raise InputTypeError("the agent saw no batch of it (no input shape)")
            inputs = inputs_from_shapes(net["conf"], shapes)
        except InputTypeError as err:
            row["inputs_error"] = f"{err}; give its input types with --input"
        else:
            side = sidecar_path(path)
            side.write_text(json.dumps({"model": net.get("kind"), "inputs": inputs,
                                        "description": f"the job's network {n}, from its first batch {shapes}"}, indent=2) + "\n")
            row.update(inputs=inputs, sidecar=str(side), flags=f"pyd4j flags --model {path} --batch {row['batch']}")
        saved.append(row)
    return saved
