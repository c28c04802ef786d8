package org.pyd4j.data;

import java.util.Random;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;

/**
 * Minibatches over whole arrays that live in memory (pyd4j wraps the user's numpy arrays without
 * copying), sliced on the Java side so that no Python runs per batch. In order, a batch is a view
 * of rows [start, end); shuffled, its rows are gathered (one copy per batch, as DL4J's own
 * shuffling makes). Rows are axis 0 of every array.
 */
public class ArrayBatchSource implements BatchSource {
    private final INDArray features;
    private final INDArray labels;
    private final INDArray featuresMask;
    private final INDArray labelsMask;
    private final int batchSize;
    private final boolean shuffle;
    private final boolean dropLast;
    private final Random random;
    private final long rows;
    private int[] order;
    private long position;

    public ArrayBatchSource(INDArray features, INDArray labels, INDArray featuresMask, INDArray labelsMask,
                            int batchSize, boolean shuffle, long seed, boolean dropLast) {
        if (batchSize < 1) {
            throw new IllegalArgumentException("batch size " + batchSize + " must be >= 1");
        }
        if (labels != null && labels.size(0) != features.size(0)) {
            throw new IllegalArgumentException("features have " + features.size(0) + " rows but labels "
                    + labels.size(0) + "; they must match");
        }
        this.features = features;
        this.labels = labels;
        this.featuresMask = featuresMask;
        this.labelsMask = labelsMask;
        this.batchSize = batchSize;
        this.shuffle = shuffle;
        this.dropLast = dropLast;
        this.random = new Random(seed);
        this.rows = features.size(0);
        reset();
    }

    @Override
    public DataSet next() {
        long end = Math.min(position + batchSize, rows);
        if (position >= rows || (dropLast && end - position < batchSize)) {
            return null;
        }
        DataSet ds;
        if (order == null) {
            ds = new DataSet(slice(features, position, end), slice(labels, position, end),
                    slice(featuresMask, position, end), slice(labelsMask, position, end));
        } else {
            int[] idx = java.util.Arrays.copyOfRange(order, (int) position, (int) end);
            java.util.Arrays.sort(idx);
            ds = new DataSet(gather(features, idx), gather(labels, idx), gather(featuresMask, idx),
                    gather(labelsMask, idx));
        }
        position = end;
        return ds;
    }

    private static INDArray slice(INDArray a, long start, long end) {
        if (a == null) {
            return null;
        }
        INDArrayIndex[] index = new INDArrayIndex[a.rank()];
        index[0] = NDArrayIndex.interval(start, end);
        for (int i = 1; i < index.length; i++) {
            index[i] = NDArrayIndex.all();
        }
        return a.get(index);
    }

    private static INDArray gather(INDArray a, int[] rows) {
        if (a == null) {
            return null;
        }
        if (a.rank() == 2) {
            return Nd4j.pullRows(a, 1, rows);
        }
        INDArray[] parts = new INDArray[rows.length];
        for (int i = 0; i < rows.length; i++) {
            parts[i] = slice(a, rows[i], rows[i] + 1);
        }
        return Nd4j.concat(0, parts);
    }

    @Override
    public void reset() {
        position = 0;
        if (shuffle) {
            order = new int[(int) rows];
            for (int i = 0; i < order.length; i++) {
                order[i] = i;
            }
            for (int i = order.length - 1; i > 0; i--) {
                int j = random.nextInt(i + 1);
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
    }

    @Override
    public boolean resetSupported() {
        return true;
    }
}
