"""INDArrays and their workspace scopes: why an array must not be used now, moving it to the parent
workspace or out of workspaces, and `ScopedArray`, an INDArray that checks before every use."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from pyd4j.jvm.errors import WorkspaceScopeError, java_errors
from pyd4j.workspaces.nd4j import nd4j


def scope_problem(array) -> str | None:
    """Why `array` (an INDArray) must not be used now, or None if it is safe.

    An attached array is safe while the workspace that holds it is open in the same generation
    (ND4J bumps the generation every time the scope is entered and re-uses the memory).
    """
    if array is None:
        return "array is None"
    if not bool(array.isAttached()):
        return None
    buffer = array.data()
    if bool(buffer.wasClosed()):
        return "its buffer was closed"
    ws = buffer.getParentWorkspace()
    if ws is None:
        return None
    name = str(ws.getId())
    if not bool(ws.isScopeActive()):
        return f"workspace {name!r} was closed (generation {int(buffer.getGenerationId())})"
    if int(ws.getGenerationId()) != int(buffer.getGenerationId()):
        return (f"workspace {name!r} was closed and re-opened since the array was made "
                f"(array generation {int(buffer.getGenerationId())}, workspace now {int(ws.getGenerationId())}); "
                f"its memory now holds other arrays")
    return None


def check_usable(array) -> None:
    """Raise WorkspaceScopeError if `array` lives in a workspace scope that has closed."""
    problem = scope_problem(array)
    if problem is not None:
        raise WorkspaceScopeError(
            f"this INDArray cannot be used: {problem}. Keep it with .leverage() (to the parent "
            f"workspace) or .detach() (out of workspaces) before the scope closes")


def _unwrap(array):
    return array.java if isinstance(array, ScopedArray) else array


def leverage(array) -> "ScopedArray":
    """Move an array to the enclosing (parent) workspace, or out of workspaces if none."""
    raw = _unwrap(array)
    check_usable(raw)
    return ScopedArray(raw.leverage())


def detach(array) -> "ScopedArray":
    """Copy an array out of all workspaces: it lives until Java's GC frees it."""
    raw = _unwrap(array)
    check_usable(raw)
    return ScopedArray(raw.detach())


class ScopedArray:
    """An INDArray guarded against use after its workspace scope closed.

    Attribute access forwards to the INDArray (`x.sumNumber()`, `x.shape()`) after the check;
    `.java` gives the checked INDArray to pass to Java.
    """

    __slots__ = ("_array",)

    def __init__(self, array) -> None:
        self._array = _unwrap(array)

    @property
    def java(self):
        check_usable(self._array)
        return self._array

    @property
    def usable(self) -> bool:
        return scope_problem(self._array) is None

    @property
    def attached(self) -> bool:
        return bool(self._array.isAttached())

    @property
    def workspace_name(self) -> str | None:
        ws = self._array.data().getParentWorkspace() if self._array.isAttached() else None
        return None if ws is None else str(ws.getId())

    def leverage(self) -> "ScopedArray":
        return leverage(self._array)

    def detach(self) -> "ScopedArray":
        return detach(self._array)

    def to_numpy(self):
        """A numpy view (pyd4j.nd); valid only while the array is usable, so prefer detach() first."""
        from pyd4j.nd import to_numpy  # noqa: PLC0415

        return to_numpy(self.java)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.java, name)

    def __repr__(self) -> str:
        problem = scope_problem(self._array)
        if problem:
            return f"ScopedArray(<unusable: {problem}>)"
        return f"ScopedArray(shape={list(self._array.shape())}, workspace={self.workspace_name!r})"


@contextlib.contextmanager
def scope_panic() -> Iterator[None]:
    """ND4J's SCOPE_PANIC profiling mode for the block: any op reading an array from a closed
    workspace scope raises WorkspaceScopeError, for raw INDArrays too (not only ScopedArray).

    ND4J 1.0.0-M2.1 starts in SCOPE_PANIC; code that switched profiling to another mode (e.g.
    OPERATIONS) loses the check, and then a stale array reads re-used memory silently. This
    block makes sure the check is on (pyd4j.jvm.java_errors turns ND4J's complaint into
    WorkspaceScopeError); the previous mode is restored after."""
    import jpype  # noqa: PLC0415

    executioner = nd4j().getExecutioner()
    modes = jpype.JClass("org.nd4j.linalg.api.ops.executioner.OpExecutioner$ProfilingMode")
    previous = executioner.getProfilingMode()
    executioner.setProfilingMode(modes.SCOPE_PANIC)
    try:
        with java_errors():
            yield
    finally:
        executioner.setProfilingMode(previous)

