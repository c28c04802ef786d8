package org.pyd4j.examples;

import java.util.Map;

import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;

/**
 * A multi-layer perceptron on the 8x8 digits: 64 - 256 - 128 - 10, ReLU, Adam.
 * {@code examples/python/digits.py} builds the same network from Python.
 *
 * <p>Usage: {@code DigitsMlp [--workspaces ENABLED|NONE] [--epochs 30] [--batch 64] [--data examples/data/digits.csv]}
 */
public final class DigitsMlp {
    private DigitsMlp() {}

    public static MultiLayerConfiguration conf(long seed) {
        return new NeuralNetConfiguration.Builder()
                .seed(seed)
                .updater(new Adam(5e-3))
                .weightInit(WeightInit.XAVIER)
                .list()
                .layer(new DenseLayer.Builder().nIn(DigitsData.FEATURES).nOut(256).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nIn(256).nOut(128).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT)
                        .nIn(128).nOut(DigitsData.CLASSES).activation(Activation.SOFTMAX).build())
                .build();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> opts = DigitsData.args(argv, 30);
        MultiLayerNetwork net = new MultiLayerNetwork(conf(Long.parseLong(opts.get("seed"))));
        net.init();
        DigitsData.run("digits_mlp", net, opts, x -> x);
    }
}
