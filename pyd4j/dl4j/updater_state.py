"""The state DL4J's updaters keep per parameter: one figure for `fit()`'s model and the planner's.

DL4J keeps the updater's state in one flattened array for the whole run, `IUpdater.stateSize(n)`
elements for n parameters (checked against a live network, `tests/memory/test_fit_model.py`).
Both DL4J's own `fit()` (`pyd4j.dl4j.fitmem`) and a planned run hold exactly that, so the planner's
resident optimizer-state tensor of a DL4J layer is sized here too (`pyd4j.dl4j.graph` records it).
"""

from __future__ import annotations

from pyd4j.sched.graph import GraphError, Layer, LayerType

# Per-parameter state of DL4J's updaters (IUpdater.stateSize(n) / n, checked against DL4J).
UPDATER_STATE = {"Adam": 2, "AdaMax": 2, "Nadam": 2, "AdaBelief": 2, "AMSGrad": 3, "AdaDelta": 2,
                 "AdaGrad": 1, "RmsProp": 1, "Nesterovs": 1, "Sgd": 0, "NoOp": 0}


class UnknownUpdater(GraphError):
    """A layer trains with an updater whose state size the model does not know."""


def layer_state_elements(layer: Layer) -> int:
    """Elements of the updater's state for one DL4J layer: the state per parameter of its updater (a
    separate bias updater for biases); batch normalization's global mean and variance have none."""
    if not layer.param_shapes:
        return 0
    per = _state_per_param(layer.attrs.get("updater"), layer.name)
    if layer.type is LayerType.BN:   # gamma, beta train; mean, variance are running statistics
        return per * layer.param_elems // 2
    bias = layer.attrs.get("bias_updater")
    shapes = layer.param_shapes
    if bias and layer.attrs.get("bias") and len(shapes) >= 2:
        b = 1
        for d in shapes[1]:
            b *= d
        return per * (layer.param_elems - b) + _state_per_param(bias, layer.name) * b
    return per * layer.param_elems


def _state_per_param(updater: str | None, where: str) -> int:
    if updater is None:
        return UPDATER_STATE["Sgd"]
    if updater not in UPDATER_STATE:
        raise UnknownUpdater(f"layer {where!r} trains with updater {updater!r}, whose state size pyd4j does not know "
                             f"(known: {', '.join(sorted(UPDATER_STATE))})")
    return UPDATER_STATE[updater]
