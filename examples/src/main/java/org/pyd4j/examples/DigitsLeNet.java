package org.pyd4j.examples;

import java.util.Map;

import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * A LeNet-style CNN on the 8x8 digits: conv 3x3x20 - max pool 2 - conv 3x3x50 - max pool 2 -
 * dense 128 - softmax 10 (LeNet's layout, sized for 8x8 inputs), Adam.
 * {@code examples/python/digits.py} builds the same network from Python.
 *
 * <p>Usage: {@code DigitsLeNet [--workspaces ENABLED|NONE] [--epochs 30] [--batch 64] [--data examples/data/digits.csv]}
 */
public final class DigitsLeNet {
    private DigitsLeNet() {}

    public static MultiLayerConfiguration conf(long seed) {
        return new NeuralNetConfiguration.Builder()
                .seed(seed)
                .updater(new Adam(1e-2))
                .weightInit(WeightInit.XAVIER)
                .convolutionMode(ConvolutionMode.Same)
                .list()
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(20).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(3, 3).nOut(50).activation(Activation.RELU).build())
                .layer(new SubsamplingLayer.Builder(SubsamplingLayer.PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(128).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT)
                        .nOut(DigitsData.CLASSES).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(8, 8, 1))
                .build();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> opts = DigitsData.args(argv, 30);
        MultiLayerNetwork net = new MultiLayerNetwork(conf(Long.parseLong(opts.get("seed"))));
        net.init();
        DigitsData.run("digits_lenet", net, opts, x -> x.reshape('c', x.size(0), 1, 8, 8));
    }
}
