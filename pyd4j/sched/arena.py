"""A first-fit arena: where live buffers sit in one address range, as a real allocator places
them (lowest free address that fits, neighbouring holes merged on free, nothing ever moved).

The simulator replays a plan's allocations through it to report the arena high-water mark
next to the accounted peak (the sum of live aligned sizes): the high-water is what a
non-compacting device allocator must reserve, fragmentation included. The host backend
(`pyd4j.device.host`) places its buffers with the same class, and the native agent's C++ arena
(`native/src/arena.hpp`) follows the same policy, so an executor's measured high-water can be
compared with the simulated one.
"""

from __future__ import annotations

import bisect

from pyd4j.sched.plan import ALIGNMENT


class ArenaFull(MemoryError):
    """No free range of the arena fits the request (though the bytes may be free in pieces)."""

    def __init__(self, key: int, size: int, capacity: int, live: int, largest: int) -> None:
        self.key, self.size, self.capacity, self.live, self.largest = (key, size, capacity,
                                                                       live, largest)
        super().__init__(
            f"no free range of {size} bytes for tensor {key} in an arena of {capacity} bytes "
            f"({live} bytes live, largest free range {largest} bytes: fragmentation); give the "
            "arena at least the plan's simulated arena high-water")


class FirstFit:
    """Offsets of live blocks; `capacity` None: the range grows at its top as needed."""

    def __init__(self, capacity: int | None = None, alignment: int = ALIGNMENT) -> None:
        self.capacity = capacity
        self.alignment = alignment
        self.blocks: dict[int, tuple[int, int]] = {}  # key -> (offset, aligned size)
        self._starts: list[int] = []  # hole offsets, sorted
        self._sizes: dict[int, int] = {}  # hole offset -> size
        self.top = 0  # end of the highest block ever placed below the open range
        self.live_bytes = 0
        self.high_water = 0  # max over time of the end of the highest live block

    def alloc(self, key: int, nbytes: int) -> int:
        """Place `key` (error if live) and return its offset; `ArenaFull` if nothing fits."""
        if key in self.blocks:
            raise ValueError(f"tensor {key} is already allocated")
        a = self.alignment
        size = -(-nbytes // a) * a
        offset = self._take(size) if size and self._starts else (0 if not size else None)
        if offset is None:
            if self.capacity is not None and self.top + size > self.capacity:
                largest = max([*self._sizes.values(), self.capacity - self.top], default=0)
                raise ArenaFull(key, size, self.capacity, self.live_bytes, largest)
            offset = self.top
            self.top += size
        self.blocks[key] = (offset, size)
        self.live_bytes += size
        if offset + size > self.high_water:
            self.high_water = offset + size
        return offset

    def _take(self, size: int) -> int | None:
        sizes = self._sizes
        for k, off in enumerate(self._starts):
            hsize = sizes[off]
            if hsize >= size:
                del sizes[off]
                if hsize == size:
                    del self._starts[k]
                else:
                    self._starts[k] = off + size
                    sizes[off + size] = hsize - size
                return off
        return None

    def free(self, key: int) -> tuple[int, int]:
        """Release `key`'s range (merged with free neighbours); returns (offset, size)."""
        try:
            off, size = self.blocks.pop(key)
        except KeyError:
            raise ValueError(f"tensor {key} is not allocated") from None
        self.live_bytes -= size
        if not size:
            return off, size
        starts, sizes = self._starts, self._sizes
        k = bisect.bisect_left(starts, off)
        start, end = off, off + size
        if k < len(starts) and starts[k] == end:  # merge the next hole
            end += sizes.pop(starts[k])
            del starts[k]
        if k > 0 and starts[k - 1] + sizes[starts[k - 1]] == start:  # and the previous one
            start = starts[k - 1]
            del sizes[start]
            del starts[k - 1]
            k -= 1
        if end == self.top:  # the open range at the top absorbs it
            self.top = start
        else:
            starts.insert(k, start)
            sizes[start] = end - start
        return off, size

    def rename(self, src: int, dst: int) -> None:
        """`src`'s range becomes `dst`'s."""
        if dst in self.blocks:
            raise ValueError(f"tensor {dst} is already allocated")
        try:
            self.blocks[dst] = self.blocks.pop(src)
        except KeyError:
            raise ValueError(f"tensor {src} is not allocated") from None

    def largest_free(self) -> int:
        rest = (self.capacity - self.top) if self.capacity is not None else 0
        return max([*self._sizes.values(), rest], default=0)
