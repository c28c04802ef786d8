package org.pyd4j.train;

import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * Offload tier for ND4J's CPU backend: a memory-mapped file on disk.
 *
 * <p>Copies run on two background threads, one writing (offload) and one reading (prefetch),
 * so they overlap the caller's compute and each other. Each copy maps the array's slot of the
 * file, copies the array's bytes straight between ND4J's buffer and the mapping (one copy, no
 * Java heap in between) and unmaps it at once, so the file's pages are never part of the
 * process's resident memory: they live in the kernel's page cache, which writes them back and
 * drops them under memory pressure (a memory cgroup charges them as reclaimable file cache).
 *
 * <p>The file is created in the chosen directory (default: {@code java.io.tmpdir}) and unlinked
 * as soon as it is open: it never outlives the JVM, even one that is killed, and its disk space
 * returns when the tier closes. It grows as slots are taken, never beyond {@code maxBytes}, and
 * keeps its length until the tier closes (the next iteration rewrites the same pages, which the
 * kernel may still cache). Slots are page-rounded lists of extents ({@link FileSpace}): a
 * fragmented file needs more mappings per copy, never more room.
 *
 * <p>Contiguous arrays (any order, views included) are copied from where they lie; a strided
 * view is first copied on the calling thread into a detached contiguous array, which the tier
 * closes when its write is done. {@link #take} returns a contiguous array of the same shape,
 * order and data type, allocated outside any workspace.
 *
 * <p>Thread safety: every method may be called from any thread; one key should be driven by
 * one thread at a time. Only {@link #awaitOffloaded}, {@link #take} and {@link #release} block,
 * and only on their own key's copies.
 */
public final class DiskTier extends KeyedTier<DiskTransport.Slot> {
    /** Slots are whole pages, mapped at page offsets. */
    static final long PAGE = 4096;
    /** Largest single mapping (a MappedByteBuffer is int-indexed). */
    static final long MAX_MAPPING = 1L << 30;

    private final DiskTransport transport;

    /** A tier whose file lives in {@code java.io.tmpdir} and never exceeds {@code maxBytes}. */
    public DiskTier(long maxBytes) {
        this(Paths.get(System.getProperty("java.io.tmpdir")), maxBytes);
    }

    /** A tier whose file lives in {@code directory} and never exceeds {@code maxBytes}. */
    public DiskTier(Path directory, long maxBytes) {
        this(new DiskTransport(directory, maxBytes));
    }

    private DiskTier(DiskTransport transport) {
        super(transport, "disk tier", "DiskTier");
        this.transport = transport;
    }

    /** The directory the file was created in. */
    public Path directory() {
        return transport.directory;
    }

    /** The file's name; unlinked at once where the OS allows it, so usually not in the directory. */
    public Path file() {
        return transport.file;
    }

    public long maxBytes() {
        return transport.maxBytes;
    }

    /** The file's length: the most its slots ever needed at once, page-rounded. */
    public long fileLength() {
        return transport.fileLength();
    }

    /** True when the directory is a memory file system (tmpfs): offloading there saves nothing. */
    public boolean isMemoryBacked() {
        return transport.memoryBacked;
    }
}
