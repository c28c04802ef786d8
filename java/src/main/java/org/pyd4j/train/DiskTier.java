package org.pyd4j.train;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.UncheckedIOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

import com.sun.jna.Pointer;

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
public final class DiskTier implements OffloadTier {
    /** Slots are whole pages, mapped at page offsets. */
    static final long PAGE = 4096;
    /** Largest single mapping (a MappedByteBuffer is int-indexed). */
    static final long MAX_MAPPING = 1L << 30;
    private static final long CLOSE_TIMEOUT_SECONDS = 120;
    private static final AtomicInteger OPENED = new AtomicInteger();

    private final Path directory;
    private final Path file;
    private final long maxBytes;
    private final boolean unlinked;
    private final boolean memoryBacked;
    private final RandomAccessFile raf;
    private final FileChannel channel;
    private final FileSpace space;
    private long fileLength;  // guarded by space
    private final ExecutorService writer;
    private final ExecutorService reader;
    private final Map<Integer, Entry> entries = new HashMap<>();
    private boolean closed;

    private final AtomicLong bytesOffloaded = new AtomicLong();
    private final AtomicLong bytesPrefetched = new AtomicLong();
    private final AtomicLong copyNanos = new AtomicLong();
    private final AtomicLong waitNanos = new AtomicLong();

    /** One key's slot and its copies in flight. */
    private static final class Entry {
        final ArraySpec spec;
        final List<FileSpace.Extent> extents;
        Future<?> written;
        Future<?> reading;  // a read-back not yet taken, or null
        INDArray fresh;     // its destination: the tier's until take hands it out

        Entry(ArraySpec spec, List<FileSpace.Extent> extents) {
            this.spec = spec;
            this.extents = extents;
        }
    }

    /** A tier whose file lives in {@code java.io.tmpdir} and never exceeds {@code maxBytes}. */
    public DiskTier(long maxBytes) {
        this(Paths.get(System.getProperty("java.io.tmpdir")), maxBytes);
    }

    /** A tier whose file lives in {@code directory} and never exceeds {@code maxBytes}. */
    public DiskTier(Path directory, long maxBytes) {
        if (maxBytes <= 0) {
            throw new IllegalArgumentException("maxBytes=" + maxBytes + ": give the largest size "
                    + "the disk tier's file may grow to, in bytes (at least the plan's peak of "
                    + "offloaded bytes)");
        }
        if (directory == null || !Files.isDirectory(directory)) {
            throw new IllegalArgumentException("directory " + directory + " does not exist or is "
                    + "not a directory; create it, or give the disk tier another directory");
        }
        if (!Nd4j.getEnvironment().isCPU()) {
            throw new IllegalStateException("DiskTier copies host memory, but ND4J runs on a "
                    + "device backend whose arrays live in device memory; use PinnedHostTier");
        }
        this.directory = directory.toAbsolutePath();
        this.maxBytes = maxBytes;
        this.space = new FileSpace(maxBytes, PAGE);
        try {
            this.file = Files.createTempFile(this.directory, "pyd4j-disk-tier-", ".bin");
            this.raf = new RandomAccessFile(file.toFile(), "rw");
        } catch (IOException | SecurityException e) {
            throw new UncheckedIOException(new IOException("cannot create the disk tier's file in "
                    + this.directory + " (" + e + "); give the tier a writable directory", e));
        }
        this.channel = raf.getChannel();
        this.unlinked = unlink(file);
        this.memoryBacked = isMemoryFileSystem(this.directory);
        if (memoryBacked) {
            System.err.println("[pyd4j disk tier] " + this.directory + " is a memory file system: "
                    + "offloaded arrays would stay in memory; give the tier a directory on disk");
        }
        int n = OPENED.incrementAndGet();
        this.writer = Executors.newSingleThreadExecutor(daemon("pyd4j-disk-tier-" + n + "-write"));
        this.reader = Executors.newSingleThreadExecutor(daemon("pyd4j-disk-tier-" + n + "-read"));
    }

    @Override
    public synchronized void offload(int key, INDArray array) {
        ensureOpen();
        ArraySpec spec = ArraySpec.of(key, array);
        if (entries.containsKey(key)) {
            throw new IllegalStateException("key " + key + " already holds an offloaded array in "
                    + "the disk tier; release(" + key + ") it before offloading under that key again");
        }
        Entry entry = new Entry(spec, allocate(key, spec));
        INDArray owned = null;
        INDArray source = array;
        try {
            if (!ArraySpec.isContiguous(array)) {
                owned = ArraySpec.contiguousCopy(array);
                source = owned;
            }
        } catch (RuntimeException | Error e) {
            space.release(entry.extents);
            throw e;
        }
        long address = spec.bytes == 0 ? 0 : ArraySpec.hostAddress(source);
        INDArray toClose = owned;
        entry.written = writer.submit(() -> {
            try {
                timedCopy(entry, address, true);
            } finally {
                if (toClose != null) {
                    toClose.close();
                }
            }
            bytesOffloaded.addAndGet(spec.bytes);
            return null;
        });
        entries.put(key, entry);
    }

    @Override
    public void awaitOffloaded(int key) {
        Future<?> written;
        synchronized (this) {
            written = entry(key).written;
        }
        await(written, key, "writing");
    }

    @Override
    public synchronized void prefetch(int key) {
        Entry entry = entry(key);
        if (entry.reading == null) {
            startRead(entry);
        }
    }

    @Override
    public INDArray take(int key) {
        Future<?> reading;
        INDArray fresh;
        synchronized (this) {
            Entry entry = entry(key);
            if (entry.reading == null) {
                startRead(entry);
            }
            reading = entry.reading;
            fresh = entry.fresh;
            entry.reading = null;
            entry.fresh = null;
        }
        try {
            await(reading, key, "reading back");
        } catch (RuntimeException e) {
            fresh.close();
            throw e;
        }
        return fresh;
    }

    @Override
    public void release(int key) {
        Entry entry;
        synchronized (this) {
            ensureOpen();
            entry = entries.remove(key);
            if (entry == null) {
                throw unknownKey(key);
            }
        }
        awaitQuietly(entry.written);
        awaitQuietly(entry.reading);
        if (entry.fresh != null) {
            entry.fresh.close();
        }
        space.release(entry.extents);
    }

    @Override
    public TierStats stats() {
        return new TierStats("disk", space.held(), space.peak(), bytesOffloaded.get(),
                bytesPrefetched.get(), copyNanos.get(), waitNanos.get());
    }

    @Override
    public void close() {
        List<Entry> left;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            left = new ArrayList<>(entries.values());
            entries.clear();
        }
        // Queued copies still run (their sources may be the tier's own copies, closed by them).
        writer.shutdown();
        reader.shutdown();
        boolean stopped = awaitTermination(writer) & awaitTermination(reader);
        for (Entry e : left) {
            if (e.fresh != null && stopped) {
                e.fresh.close();
            }
            space.release(e.extents);
        }
        try {
            channel.close();
            raf.close();
            if (!unlinked) {
                Files.deleteIfExists(file);
            }
        } catch (IOException e) {
            throw new UncheckedIOException(new IOException("closing the disk tier's file " + file
                    + " failed: " + e.getMessage() + "; delete it by hand", e));
        }
    }

    /** The directory the file was created in. */
    public Path directory() {
        return directory;
    }

    /** The file's name; unlinked at once where the OS allows it, so usually not in the directory. */
    public Path file() {
        return file;
    }

    public long maxBytes() {
        return maxBytes;
    }

    /** The file's length: the most its slots ever needed at once, page-rounded. */
    public long fileLength() {
        synchronized (space) {
            return fileLength;
        }
    }

    /** True when the directory is a memory file system (tmpfs): offloading there saves nothing. */
    public boolean isMemoryBacked() {
        return memoryBacked;
    }

    // -- slots and the file's length --------------------------------------------------------

    private List<FileSpace.Extent> allocate(int key, ArraySpec spec) {
        synchronized (space) {
            List<FileSpace.Extent> extents = space.allocate(spec.bytes);
            if (extents == null) {
                throw new IllegalStateException("the disk tier is full: key " + key + " needs "
                        + FileSpace.roundUp(spec.bytes, PAGE) + " bytes (" + spec + ") but "
                        + space.held() + " of its " + maxBytes + "-byte limit are in use by "
                        + entries.size() + " keys; create the tier with a larger maxBytes "
                        + "(new DiskTier(directory, maxBytes)) or release keys before offloading more");
            }
            try {
                grow(space.end(), key);
            } catch (RuntimeException e) {
                space.release(extents);
                throw e;
            }
            return extents;
        }
    }

    private void grow(long length, int key) {  // holds space
        if (length <= fileLength) {
            return;
        }
        try {
            long usable = Files.getFileStore(directory).getUsableSpace();
            if (length - fileLength > usable) {
                throw new IllegalStateException("the disk tier's file in " + directory
                        + " cannot grow by " + (length - fileLength) + " bytes for key " + key
                        + ": that file system has " + usable + " bytes free; free space there "
                        + "or give the tier a directory on a larger disk");
            }
            raf.setLength(length);
            fileLength = length;
        } catch (IOException e) {
            throw new UncheckedIOException(new IOException("resizing the disk tier's file in "
                    + directory + " to " + length + " bytes failed: " + e.getMessage(), e));
        }
    }

    // -- copies -----------------------------------------------------------------------------

    private void startRead(Entry entry) {  // holds this
        INDArray fresh = entry.spec.allocateDetached();
        long address = entry.spec.bytes == 0 ? 0 : ArraySpec.hostAddress(fresh);
        Future<?> written = entry.written;
        entry.fresh = fresh;
        entry.reading = reader.submit(() -> {
            written.get();  // the write has finished (or its failure is this read's)
            timedCopy(entry, address, false);
            bytesPrefetched.addAndGet(entry.spec.bytes);
            return null;
        });
    }

    private void timedCopy(Entry entry, long address, boolean toFile) throws IOException {
        long t0 = System.nanoTime();
        try {
            copy(entry.extents, address, entry.spec.bytes, toFile);
        } catch (InternalError e) {
            // The JVM reports a fault inside a mapping (SIGBUS: the disk filled up under a
            // sparse file) as an InternalError.
            throw new IOException("a memory-mapped copy faulted (" + e.getMessage() + "); is the "
                    + "file system of " + directory + " full?", e);
        } finally {
            copyNanos.addAndGet(System.nanoTime() - t0);
        }
    }

    private void copy(List<FileSpace.Extent> extents, long address, long bytes, boolean toFile)
            throws IOException {
        long done = 0;
        for (FileSpace.Extent e : extents) {
            for (long pos = 0; pos < e.length && done < bytes; ) {
                long n = Math.min(Math.min(e.length - pos, MAX_MAPPING), bytes - done);
                MappedByteBuffer map = channel.map(
                        toFile ? FileChannel.MapMode.READ_WRITE : FileChannel.MapMode.READ_ONLY,
                        e.offset + pos, n);
                try {
                    ByteBuffer memory = new Pointer(address + done).getByteBuffer(0, n);
                    if (toFile) {
                        map.put(memory);
                    } else {
                        memory.put(map);
                    }
                } finally {
                    Unmapper.unmap(map);
                }
                pos += n;
                done += n;
            }
        }
    }

    // -- waiting and errors -----------------------------------------------------------------

    private void await(Future<?> f, int key, String what) {
        long t0 = System.nanoTime();
        try {
            f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while " + what + " key " + key, e);
        } catch (CancellationException e) {
            throw new IllegalStateException("key " + key + ": the disk tier was closed while "
                    + what + " it", e);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            while (cause instanceof ExecutionException && cause.getCause() != null) {
                cause = cause.getCause();
            }
            String msg = what + " key " + key + " (" + directory + ") failed: " + cause;
            if (cause instanceof IOException) {
                throw new UncheckedIOException(new IOException(msg, cause));
            }
            throw new IllegalStateException(msg, cause);
        } finally {
            waitNanos.addAndGet(System.nanoTime() - t0);
        }
    }

    private void awaitQuietly(Future<?> f) {
        if (f == null) {
            return;
        }
        long t0 = System.nanoTime();
        try {
            f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException | CancellationException e) {
            // the key is being dropped: its copy's failure no longer matters
        } finally {
            waitNanos.addAndGet(System.nanoTime() - t0);
        }
    }

    private Entry entry(int key) {  // holds this
        ensureOpen();
        Entry e = entries.get(key);
        if (e == null) {
            throw unknownKey(key);
        }
        return e;
    }

    private static IllegalArgumentException unknownKey(int key) {
        return new IllegalArgumentException("key " + key + " is not in the disk tier (never "
                + "offloaded, or already released); offload(" + key + ", array) first");
    }

    private void ensureOpen() {  // holds this
        if (closed) {
            throw new IllegalStateException("the disk tier is closed; open a new DiskTier");
        }
    }

    // -- helpers ----------------------------------------------------------------------------

    private static boolean unlink(Path file) {
        try {
            Files.delete(file);  // POSIX: the open file lives on until it is closed
            return true;
        } catch (IOException e) {
            file.toFile().deleteOnExit();  // a system that cannot delete open files
            return false;
        }
    }

    private static boolean isMemoryFileSystem(Path directory) {
        try {
            String type = Files.getFileStore(directory).type();
            return "tmpfs".equals(type) || "ramfs".equals(type);
        } catch (IOException e) {
            return false;
        }
    }

    private static boolean awaitTermination(ExecutorService executor) {
        try {
            if (executor.awaitTermination(CLOSE_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
                return true;
            }
            executor.shutdownNow();
            return executor.awaitTermination(CLOSE_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            executor.shutdownNow();
            return false;
        }
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
    }

    /** Unmaps a mapping now instead of at garbage collection (JDK 9+ Unsafe.invokeCleaner). */
    private static final class Unmapper {
        private static final Object UNSAFE;
        private static final Method INVOKE_CLEANER;

        static {
            Object unsafe = null;
            Method invoke = null;
            try {
                Class<?> c = Class.forName("sun.misc.Unsafe");
                Field f = c.getDeclaredField("theUnsafe");
                f.setAccessible(true);
                unsafe = f.get(null);
                invoke = c.getMethod("invokeCleaner", ByteBuffer.class);
            } catch (ReflectiveOperationException | RuntimeException e) {
                // Left to the garbage collector: the mapping stays resident a while longer.
            }
            UNSAFE = unsafe;
            INVOKE_CLEANER = invoke;
        }

        static void unmap(MappedByteBuffer map) {
            if (INVOKE_CLEANER == null) {
                return;
            }
            try {
                INVOKE_CLEANER.invoke(UNSAFE, map);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("unmapping a disk tier mapping failed", e);
            }
        }
    }
}
