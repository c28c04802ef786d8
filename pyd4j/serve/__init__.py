"""Serving: several DL4J models in one JVM under a memory budget, over the Open Inference Protocol v2.

    from pyd4j.serve import ModelServer
    with ModelServer({"mlp": "examples/networks/mlp.json"}, budget="256m", port=0) as server:
        ...  # POST {server.url}/v2/models/mlp/infer

Modules: protocol (OIP v2 requests and responses, no JVM), model (one network: load, measure,
infer, evict, restore), sizing (the rows one output() call runs, measured at load), budget (LRU
accounting), worker (per-model thread, dynamic batching), metrics (Prometheus), server (HTTP and
lifecycle), soak (N requests per model and the leak verdict).
"""

from pyd4j.serve.budget import Budget, OverBudgetError
from pyd4j.serve.model import Footprint, ModelLoadError, ServedModel
from pyd4j.serve.protocol import ProtocolError, TensorSpec
from pyd4j.serve.server import ModelServer

__all__ = ["Budget", "Footprint", "ModelLoadError", "ModelServer", "OverBudgetError", "ProtocolError",
           "ServedModel", "TensorSpec"]
