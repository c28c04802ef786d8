"""Swap ND4J workspace memory out to the side-agent's pinned host pool and back.

A workspace that sits idle between iterations (or between phases of a job) keeps its whole
block allocated. The hook registers that block -- address and size taken from the workspace --
with the native agent as an *external* buffer: `swap_out` copies the contents into the agent's
pinned pool on the offload stream, `swap_in` copies them back to the same address on the
prefetch stream. Single ND4J buffers (`INDArray.data()`) can be registered the same way.

    from pyd4j.device.nd4j_hook import WorkspaceSwapper
    with WorkspaceSwapper() as swapper:
        h = swapper.register_workspace(ws)        # an ND4J MemoryWorkspace
        swapper.swap_out(h)                       # contents -> pinned host pool
        ...                                       # the memory may be reused meanwhile
        swapper.swap_in(h)                        # contents back, byte for byte

Which address is registered: the workspace's host pointer with the host build of the agent
(ND4J's CPU backend), its device pointer with the CUDA build (ND4J's CUDA backend). Mixing an
ND4J CPU backend with the CUDA agent (or the reverse) is refused.

ND4J keeps the memory of the workspace: the hook preserves *contents* while the memory is
reused (by another workspace cycle, another job phase, or a plan run by the agent); it does
not return the block to the allocator, because ND4J offers no way to re-create a workspace at a
given address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyd4j.device.native import Agent


def _jvm() -> None:
    """The in-process JVM (one place owns its classpath and options: pyd4j.jvm)."""
    import pyd4j.jvm  # noqa: PLC0415 - keep `import pyd4j.device` free of JPype

    pyd4j.jvm.start()


@dataclass(frozen=True)
class SwapHandle:
    """A registered region: agent buffer id, address, size, what it came from."""

    buffer: int
    address: int
    nbytes: int
    source: str


def workspace_region(workspace: Any, device: bool = False) -> tuple[int, int]:
    """(address, bytes) of an ND4J workspace's main block.

    The size is `getCurrentSize()`; the address is the block's host (or device) pointer, kept
    in the protected `Nd4jWorkspace.workspace` field (ND4J 1.0.0-M2.1 has no public getter;
    read by reflection). Raises ValueError if the workspace has no block yet."""
    import jpype  # noqa: PLC0415

    size = int(workspace.getCurrentSize())
    base_cls = jpype.JClass("org.nd4j.linalg.api.memory.abstracts.Nd4jWorkspace")
    if not base_cls.class_.isInstance(workspace):
        raise TypeError(
            f"{workspace.getClass().getName()} is not an Nd4jWorkspace; register its arrays' "
            f"buffers with register_buffer instead"
        )
    field = base_cls.class_.getDeclaredField("workspace")
    field.setAccessible(True)
    pair = field.get(workspace)
    ptr = None if pair is None else (pair.getDevicePointer() if device else pair.getHostPointer())
    if size <= 0 or ptr is None or int(ptr.address()) == 0:
        raise ValueError(
            f"workspace {workspace.getId()!s} has no {'device' if device else 'host'} block yet "
            f"(current size {size} bytes); open it and allocate in it once (or give it an "
            f"initialSize) before registering"
        )
    return int(ptr.address()), size


def buffer_region(array_or_buffer: Any) -> tuple[int, int]:
    """(address, bytes) of an INDArray's or DataBuffer's memory."""
    buf = array_or_buffer.data() if hasattr(array_or_buffer, "data") and hasattr(array_or_buffer, "shape") else array_or_buffer
    return int(buf.address()), int(buf.length()) * int(buf.getElementSize())


class WorkspaceSwapper:
    """Registers ND4J memory with a side-agent and swaps its contents out and in.

    `agent`: an existing `Agent` (its pinned pool holds the contents); by default one is
    created on first use with a pinned pool of `host_bytes` (default: twice the bytes
    registered so far, at least 1 MiB) and a minimal device arena (the ND4J memory is not the
    agent's)."""

    def __init__(self, agent: Agent | None = None, host_bytes: int | None = None) -> None:
        self._agent = agent
        self._own_agent = agent is None
        self._host_bytes = host_bytes
        self._handles: list[SwapHandle] = []
        self._pending: list[tuple[int, int]] = []  # (address, nbytes) not yet registered
        _jvm()

    # -- registration ----------------------------------------------------------------------
    def _cpu_backend(self) -> bool:
        from org.nd4j.linalg.factory import Nd4j  # noqa: PLC0415

        return bool(Nd4j.getEnvironment().isCPU())

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            total = sum(n for _, n in self._pending) + sum(h.nbytes for h in self._handles)
            pool = self._host_bytes or max(2 * total, 1 << 20)
            self._agent = Agent(device_bytes=1 << 16, host_bytes=pool)
        return self._agent

    def _register(self, address: int, nbytes: int, source: str) -> SwapHandle:
        agent = self.agent
        cpu = self._cpu_backend()
        if agent.is_cuda == cpu:
            raise RuntimeError(
                f"ND4J runs its {'CPU' if cpu else 'CUDA'} backend but the side-agent library is the "
                f"{agent.build_kind} build; use the {'host' if cpu else 'CUDA'} build "
                f"(PYD4J_NATIVE_LIB) so that the registered addresses are the agent's kind of memory"
            )
        handle = SwapHandle(agent.register_external(address, nbytes), address, nbytes, source)
        self._handles.append(handle)
        return handle

    def register_workspace(self, workspace: Any) -> SwapHandle:
        """Registers the workspace's current block (see `workspace_region`)."""
        address, nbytes = workspace_region(workspace, device=not self._cpu_backend())
        self._pending.append((address, nbytes))
        try:
            return self._register(address, nbytes, f"workspace {workspace.getId()}")
        finally:
            self._pending.pop()

    def register_buffer(self, array_or_buffer: Any) -> SwapHandle:
        """Registers one INDArray's (or DataBuffer's) memory."""
        address, nbytes = buffer_region(array_or_buffer)
        self._pending.append((address, nbytes))
        try:
            return self._register(address, nbytes, "buffer")
        finally:
            self._pending.pop()

    # -- swapping ------------------------------------------------------------------------
    def swap_out(self, handle: SwapHandle, wait: bool = True) -> None:
        """Copies the region into the pinned pool. With wait=False the copy runs on the
        offload stream; call `wait(handle)` before the region is written again."""
        self.agent.offload(handle.buffer, release=True)
        if wait:
            self.agent.wait(handle.buffer)

    def swap_in(self, handle: SwapHandle, wait: bool = True) -> None:
        """Copies the contents back to the region's address."""
        self.agent.prefetch(handle.buffer)
        if wait:
            self.agent.wait(handle.buffer)

    def wait(self, handle: SwapHandle) -> None:
        self.agent.wait(handle.buffer)

    def host_copy(self, handle: SwapHandle) -> bytes:
        """The bytes held in the pinned pool for a swapped-out region."""
        self.agent.wait(handle.buffer)
        return bytes(self.agent.host_array(handle.buffer, "host"))

    def unregister(self, handle: SwapHandle) -> None:
        self.agent.free(handle.buffer)
        self._handles.remove(handle)

    def stats(self) -> dict[str, float]:
        return self.agent.stats()

    def close(self) -> None:
        if self._agent is not None:
            self._agent.synchronize()
            if self._own_agent:
                self._agent.close()
            else:
                for h in list(self._handles):
                    self._agent.free(h.buffer)
            self._agent = None
        self._handles.clear()

    def __enter__(self) -> "WorkspaceSwapper":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
