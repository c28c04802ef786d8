package org.pyd4j.examples;

import java.util.ArrayList;
import java.util.List;

import org.bytedeco.javacpp.Pointer;
import org.deeplearning4j.datasets.iterator.utilty.ListDataSetIterator;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * LeNet (MNIST-shaped, 28x28x1, 10 classes) trained on synthetic data through DL4J's own
 * fit(iterator): the job pyd4j's profiler and tuner are shown on. It watches its own JavaCPP
 * counters (Pointer.physicalBytes / totalBytes) every 5 ms on a thread of its own and prints the
 * peaks at the end, so the profiler's timeline can be checked against what the job itself saw.
 *
 * <p>Usage: {@code TrainLeNetSynthetic [iterations=60] [batch=32] [epochs=2]}. Last stdout line:
 * {@code JOB_PEAKS {"physical_bytes":...,"total_bytes":...,"iterations":...,"seconds":...}}.
 */
public final class TrainLeNetSynthetic {
    private TrainLeNetSynthetic() {
    }

    public static void main(String[] args) throws Exception {
        int iterations = args.length > 0 ? Integer.parseInt(args[0]) : 60;
        int batch = args.length > 1 ? Integer.parseInt(args[1]) : 32;
        int epochs = args.length > 2 ? Integer.parseInt(args[2]) : 2;
        final long[] peaks = new long[2];
        Thread watcher = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                peaks[0] = Math.max(peaks[0], Pointer.physicalBytes());
                peaks[1] = Math.max(peaks[1], Pointer.totalBytes());
                try {
                    Thread.sleep(5);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "job-peak-watcher");
        watcher.setDaemon(true);

        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder()
                .seed(123).updater(new Adam(1e-3)).dataType(DataType.FLOAT).list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(20).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(50).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(500).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.NEGATIVELOGLIKELIHOOD).nOut(10).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutionalFlat(28, 28, 1))
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        watcher.start();

        Nd4j.getRandom().setSeed(123);
        int perEpoch = Math.max(1, iterations / epochs);
        List<DataSet> batches = new ArrayList<>();
        for (int i = 0; i < perEpoch; i++) {
            INDArray features = Nd4j.rand(DataType.FLOAT, batch, 28 * 28);
            INDArray labels = Nd4j.zeros(DataType.FLOAT, batch, 10);
            for (int r = 0; r < batch; r++) labels.putScalar(r, (r + i) % 10, 1f);
            batches.add(new DataSet(features, labels));
        }
        long start = System.nanoTime();
        for (int e = 0; e < epochs; e++) {
            net.fit(new ListDataSetIterator<>(batches, 1));
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        watcher.interrupt();
        watcher.join();
        peaks[0] = Math.max(peaks[0], Pointer.physicalBytes());
        peaks[1] = Math.max(peaks[1], Pointer.totalBytes());
        System.out.println("JOB_PEAKS {\"physical_bytes\":" + peaks[0] + ",\"total_bytes\":" + peaks[1]
                + ",\"iterations\":" + (perEpoch * epochs) + ",\"seconds\":" + seconds + "}");
    }
}
