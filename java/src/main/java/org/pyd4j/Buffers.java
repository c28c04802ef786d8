package org.pyd4j;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.ref.Cleaner;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.util.List;

import org.bytedeco.javacpp.Pointer;
import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * INDArrays over memory that ND4J does not own (numpy arrays, shared-memory files), and the
 * facts Python needs to view ND4J memory without copying.
 *
 * <p>Lifetime: {@link #wrap} registers the wrapped {@link ByteBuffer} with a {@link Cleaner} on the
 * new {@link DataBuffer}. The cleaning action holds the ByteBuffer strongly, so the foreign memory
 * (and, through JPype, the numpy array behind it; or the file mapping) stays valid while any
 * INDArray or view on that DataBuffer is reachable, and is released once none is. Nothing is kept
 * in a global list.
 */
public final class Buffers {
    private static final Cleaner CLEANER = Cleaner.create();

    private Buffers() {}

    /** Holds foreign memory until the DataBuffer that points into it is unreachable. */
    private static final class KeepAlive implements Runnable {
        private Object memory;

        KeepAlive(Object memory) {
            this.memory = memory;
        }

        @Override
        public void run() {
            memory = null;
        }
    }

    /**
     * An INDArray over the whole of {@code memory} (a direct buffer), without copying.
     *
     * @param dtype  ND4J DataType name (FLOAT, DOUBLE, ...)
     * @param shape  dimensions
     * @param stride strides in elements (all >= 0)
     * @param order  'c' or 'f'
     */
    public static INDArray wrap(ByteBuffer memory, String dtype, long[] shape, long[] stride, char order) {
        if (!memory.isDirect()) {
            throw new IllegalArgumentException("wrap needs a direct ByteBuffer, got a heap buffer");
        }
        DataType type = DataType.valueOf(dtype);
        long length = memory.capacity() / type.width();
        DataBuffer buffer = Nd4j.createBuffer(new Pointer(memory), length, type);
        CLEANER.register(buffer, new KeepAlive(memory));
        return Nd4j.create(buffer, shape, stride, 0L, order, type);
    }

    /**
     * An INDArray over {@code bytes} of memory at {@code address}, without copying, for memory a
     * ByteBuffer cannot span (over 2 GiB). {@code owner} keeps that memory valid (a JPype proxy that
     * holds the numpy array) and is held as long as any array on the new buffer is reachable.
     */
    public static INDArray wrapAddress(long address, long bytes, Object owner, String dtype,
                                       long[] shape, long[] stride, char order) {
        DataType type = DataType.valueOf(dtype);
        long length = bytes / type.width();
        Pointer pointer = at(address).capacity(bytes).limit(bytes);
        DataBuffer buffer = Nd4j.createBuffer(pointer, length, type);
        CLEANER.register(buffer, new KeepAlive(owner));
        return Nd4j.create(buffer, shape, stride, 0L, order, type);
    }

    /** A new ND4J-owned array (uninitialized unless empty), for copies into ND4J memory. */
    public static INDArray allocate(String dtype, long[] shape, char order) {
        DataType type = DataType.valueOf(dtype);
        for (long d : shape) {
            if (d == 0) {
                return Nd4j.create(type, shape, Nd4j.getStrides(shape, order), order);
            }
        }
        return Nd4j.createUninitialized(type, shape, order);
    }

    /**
     * What Python needs to view {@code x}'s memory: {address of the first element, DataType
     * ordinal, attached-to-a-workspace (0/1), empty (0/1), rank, shape..., stride...}. One call, so
     * that crossing the JNI boundary stays cheap.
     */
    public static long[] describe(INDArray x) {
        int rank = x.rank();
        long[] out = new long[5 + 2 * rank];
        boolean empty = x.isEmpty();
        if (!empty) {
            DataBuffer data = x.data();
            out[0] = data.address() + x.offset() * data.getElementSize();
        }
        out[1] = x.dataType().ordinal();
        out[2] = x.isAttached() ? 1 : 0;
        out[3] = empty ? 1 : 0;
        out[4] = rank;
        long[] shape = x.shape();
        long[] stride = x.stride();
        for (int i = 0; i < rank; i++) {
            out[5 + i] = shape[i];
            out[5 + rank + i] = stride[i];
        }
        return out;
    }

    /** DataType names by ordinal, for decoding {@link #describe}. */
    public static String[] dataTypeNames() {
        DataType[] values = DataType.values();
        String[] names = new String[values.length];
        for (int i = 0; i < values.length; i++) {
            names[i] = values[i].name();
        }
        return names;
    }

    /** Map {@code bytes} of a file read-write (shared memory between processes). At most 2 GiB - 1. */
    public static MappedByteBuffer map(String path, long bytes) throws IOException {
        if (bytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("a shared-memory transfer maps at most "
                    + Integer.MAX_VALUE + " bytes, asked for " + bytes + "; split the array");
        }
        try (RandomAccessFile file = new RandomAccessFile(path, "rw");
             FileChannel channel = file.getChannel()) {
            return channel.map(FileChannel.MapMode.READ_WRITE, 0, bytes);
        }
    }

    /** A JavaCPP pointer at a raw address (for memcpy between ND4J memory and a mapping). */
    static Pointer at(long where) {
        // (A parameter named `address` would be shadowed by Pointer's own field in the initializer.)
        return new Pointer() {
            {
                this.address = where;
            }
        };
    }

    /** Whether x's elements lie densely in its own order ('c' or 'f'), so one memcpy moves them. */
    public static boolean isDense(INDArray x) {
        if (x.isEmpty()) {
            return true;
        }
        long[] shape = x.shape();
        long[] stride = x.stride();
        long[] dense = Nd4j.getStrides(shape, x.ordering());
        for (int i = 0; i < shape.length; i++) {
            if (shape[i] > 1 && stride[i] != dense[i]) {
                return false;
            }
        }
        return true;
    }

    /** Address of x's first element. */
    public static long firstElement(INDArray x) {
        return x.data().address() + x.offset() * x.data().getElementSize();
    }

    /** Release a file mapping now rather than at some later GC (the copy is done with it). */
    static void unmap(MappedByteBuffer mapped) {
        try {
            java.lang.reflect.Field f = Class.forName("sun.misc.Unsafe").getDeclaredField("theUnsafe");
            f.setAccessible(true);
            Object unsafe = f.get(null);
            unsafe.getClass().getMethod("invokeCleaner", ByteBuffer.class).invoke(unsafe, mapped);
        } catch (ReflectiveOperationException | RuntimeException e) {
            // Not available: the mapping goes when the GC collects it.
        }
    }

    /** List of Python ints (Py4J) to long[]. */
    public static long[] longs(List<?> values) {
        long[] out = new long[values.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) values.get(i)).longValue();
        }
        return out;
    }
}
