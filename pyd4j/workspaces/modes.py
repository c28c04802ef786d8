"""DL4J's per-network workspace modes (ENABLED or NONE, for training and for inference)."""

from __future__ import annotations

import enum

from pyd4j.workspaces.config import coerce


class WorkspaceMode(str, enum.Enum):
    """DL4J's per-network workspace mode: ENABLED (workspaces for activations and gradients)
    or NONE (every array allocated and freed by GC)."""
    ENABLED = "ENABLED"
    NONE = "NONE"


def _net_conf(net):
    if hasattr(net, "getLayerWiseConfigurations"):
        return net.getLayerWiseConfigurations()
    if hasattr(net, "getConfiguration"):
        return net.getConfiguration()
    raise TypeError(f"{type(net).__name__} is not a DL4J MultiLayerNetwork or ComputationGraph")


def set_workspace_mode(net, training: WorkspaceMode | str | None = None,
                       inference: WorkspaceMode | str | None = None) -> None:
    """Set a MultiLayerNetwork's or ComputationGraph's training/inference workspace mode.

    Set before fit(); DL4J reads the mode at each fit/output call.
    """
    import jpype  # noqa: PLC0415

    conf = _net_conf(net)
    java_enum = jpype.JClass("org.deeplearning4j.nn.conf.WorkspaceMode")
    if training is not None:
        mode = coerce("training", "trainingWorkspaceMode", WorkspaceMode, training)
        conf.setTrainingWorkspaceMode(getattr(java_enum, mode.value))
    if inference is not None:
        mode = coerce("inference", "inferenceWorkspaceMode", WorkspaceMode, inference)
        conf.setInferenceWorkspaceMode(getattr(java_enum, mode.value))


def get_workspace_mode(net) -> dict[str, WorkspaceMode]:
    conf = _net_conf(net)
    return {"training": WorkspaceMode(str(conf.getTrainingWorkspaceMode().name())),
            "inference": WorkspaceMode(str(conf.getInferenceWorkspaceMode().name()))}

