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
import java.util.List;
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
 * The disk tier's transport: slots of a memory-mapped file, written and read on two background
 * threads (see {@link DiskTier} for what it guarantees).
 */
final class DiskTransport implements TierTransport<DiskTransport.Slot> {
    private static final long CLOSE_TIMEOUT_SECONDS = 120;
    private static final AtomicInteger OPENED = new AtomicInteger();

    final Path directory;
    final Path file;
    final long maxBytes;
    private final boolean unlinked;
    final boolean memoryBacked;
    private final RandomAccessFile raf;
    private final FileChannel channel;
    private final FileSpace space;
    private long fileLength;  // guarded by space
    private final ExecutorService writer;
    private final ExecutorService reader;

    private final AtomicLong bytesOffloaded = new AtomicLong();
    private final AtomicLong bytesPrefetched = new AtomicLong();
    private final AtomicLong copyNanos = new AtomicLong();

    /** One key's extents of the file and its write. */
    static final class Slot {
        final ArraySpec spec;
        final List<FileSpace.Extent> extents;
        Future<?> written;

        Slot(ArraySpec spec, List<FileSpace.Extent> extents) {
            this.spec = spec;
            this.extents = extents;
        }
    }

    /** A transport whose file lives in {@code directory} and never exceeds {@code maxBytes}. */
    DiskTransport(Path directory, long maxBytes) {
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
        this.space = new FileSpace(maxBytes, DiskTier.PAGE);
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
    public Slot write(int key, ArraySpec spec, INDArray array, int keysHeld) {
        Slot slot = new Slot(spec, allocate(key, spec, keysHeld));
        INDArray owned = null;
        INDArray source = array;
        try {
            if (!ArraySpec.isContiguous(array)) {
                owned = ArraySpec.contiguousCopy(array);
                source = owned;
            }
        } catch (RuntimeException | Error e) {
            space.release(slot.extents);
            throw e;
        }
        long address = spec.bytes == 0 ? 0 : ArraySpec.hostAddress(source);
        INDArray toClose = owned;
        slot.written = writer.submit(() -> {
            try {
                timedCopy(slot, address, true);
            } finally {
                if (toClose != null) {
                    toClose.close();
                }
            }
            bytesOffloaded.addAndGet(spec.bytes);
            return null;
        });
        return slot;
    }

    @Override
    public void awaitWritten(int key, Slot slot) {
        await(slot.written, key, "writing");
    }

    @Override
    public Copy read(int key, Slot slot, INDArray fresh) {
        long address = slot.spec.bytes == 0 ? 0 : ArraySpec.hostAddress(fresh);
        Future<?> written = slot.written;
        Future<?> reading = reader.submit(() -> {
            written.get();  // the write has finished (or its failure is this read's)
            timedCopy(slot, address, false);
            bytesPrefetched.addAndGet(slot.spec.bytes);
            return null;
        });
        return new Copy() {
            @Override
            public void await() {
                DiskTransport.this.await(reading, key, "reading back");
            }

            @Override
            public void settle() {
                awaitQuietly(reading);
            }
        };
    }

    @Override
    public void settle(int key, Slot slot, Copy reading) {
        awaitQuietly(slot.written);
        if (reading != null) {
            reading.settle();
        }
    }

    @Override
    public void drop(Slot slot, boolean open) {
        space.release(slot.extents);
    }

    @Override
    public TierStats stats(long waitNanos) {
        return new TierStats("disk", space.held(), space.peak(), bytesOffloaded.get(),
                bytesPrefetched.get(), copyNanos.get(), waitNanos);
    }

    @Override
    public boolean stop() {
        // Queued copies still run (their sources may be the tier's own copies, closed by them).
        writer.shutdown();
        reader.shutdown();
        return awaitTermination(writer) & awaitTermination(reader);
    }

    @Override
    public void close() {
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

    /** The file's length: the most its slots ever needed at once, page-rounded. */
    long fileLength() {
        synchronized (space) {
            return fileLength;
        }
    }

    // -- slots and the file's length --------------------------------------------------------

    private List<FileSpace.Extent> allocate(int key, ArraySpec spec, int keysHeld) {
        synchronized (space) {
            List<FileSpace.Extent> extents = space.allocate(spec.bytes);
            if (extents == null) {
                throw new IllegalStateException("the disk tier is full: key " + key + " needs "
                        + FileSpace.roundUp(spec.bytes, DiskTier.PAGE) + " bytes (" + spec + ") but "
                        + space.held() + " of its " + maxBytes + "-byte limit are in use by "
                        + keysHeld + " keys; create the tier with a larger maxBytes "
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

    private void timedCopy(Slot slot, long address, boolean toFile) throws IOException {
        long t0 = System.nanoTime();
        try {
            copy(slot.extents, address, slot.spec.bytes, toFile);
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
                long n = Math.min(Math.min(e.length - pos, DiskTier.MAX_MAPPING), bytes - done);
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

    // -- waiting ----------------------------------------------------------------------------

    private void await(Future<?> f, int key, String what) {
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
        }
    }

    private static void awaitQuietly(Future<?> f) {
        if (f == null) {
            return;
        }
        try {
            f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException | CancellationException e) {
            // the key is being dropped: its copy's failure no longer matters
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
