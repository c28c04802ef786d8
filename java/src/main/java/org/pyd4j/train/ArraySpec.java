package org.pyd4j.train;

import java.util.Arrays;

import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * What a tier must remember to give an offloaded array back (data type, order, shape, bytes),
 * and the one block of memory it copies. Both tiers copy bytes, never elements, so an array
 * must be contiguous: a strided view is first copied into a detached contiguous array.
 */
final class ArraySpec {
    final DataType dataType;
    final char order;
    final long[] shape;
    final long bytes;

    private ArraySpec(DataType dataType, char order, long[] shape, long bytes) {
        this.dataType = dataType;
        this.order = order;
        this.shape = shape;
        this.bytes = bytes;
    }

    /** Checks that {@code array} can be offloaded under {@code key}, with the reason if not. */
    static ArraySpec of(int key, INDArray array) {
        if (array == null) {
            throw new IllegalArgumentException("key " + key + ": the array to offload is null");
        }
        if (array.wasClosed()) {
            throw new IllegalArgumentException("key " + key + ": the array was already closed; "
                    + "offload it before closing it, and close it after awaitOffloaded");
        }
        DataType type = array.dataType();
        int width = type.width();
        if (width <= 0) {
            throw new IllegalArgumentException("key " + key + ": arrays of data type " + type
                    + " have no fixed element size and cannot be offloaded; offload numeric or "
                    + "BOOL arrays");
        }
        return new ArraySpec(type, array.ordering(), array.shape(), array.length() * width);
    }

    /**
     * True when the elements lie in one gap-free block in the array's own order, starting at
     * its buffer's offset: then its bytes can be copied as they are.
     */
    static boolean isContiguous(INDArray array) {
        if (array.length() == 0) {
            return true;
        }
        if (array.offset() != array.data().offset()) {
            return false;  // the address of the first element is not the buffer's
        }
        long[] shape = array.shape();
        long[] stride = array.stride();
        long expected = 1;
        int rank = shape.length;
        for (int j = 0; j < rank; j++) {
            int i = array.ordering() == 'f' ? j : rank - 1 - j;
            if (shape[i] != 1 && stride[i] != expected) {
                return false;
            }
            expected *= shape[i];
        }
        return true;
    }

    /** A detached contiguous copy of {@code array} in its order (outside any workspace). */
    static INDArray contiguousCopy(INDArray array) {
        try (MemoryWorkspace ignored = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
            return array.dup(array.ordering());
        }
    }

    /** A fresh array of this shape, order and type, outside any workspace, not zeroed. */
    INDArray allocateDetached() {
        try (MemoryWorkspace ignored = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
            if (bytes == 0) {
                return Nd4j.create(dataType, shape, order);  // empty: nothing to allocate
            }
            return Nd4j.createUninitializedDetached(dataType, order, shape);
        }
    }

    /** Address of the first element in host memory (ND4J's CPU backend). */
    static long hostAddress(INDArray contiguous) {
        return contiguous.data().addressPointer().address();
    }

    @Override
    public String toString() {
        return dataType + " " + Arrays.toString(shape) + " '" + order + "' (" + bytes + " bytes)";
    }
}
