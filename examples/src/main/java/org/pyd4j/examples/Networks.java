package org.pyd4j.examples;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.Map;

import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.ConvolutionMode;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.ElementWiseVertex;
import org.deeplearning4j.nn.conf.graph.MergeVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.ActivationLayer;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.ConvolutionLayer;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.DropoutLayer;
import org.deeplearning4j.nn.conf.layers.GlobalPoolingLayer;
import org.deeplearning4j.nn.conf.layers.LSTM;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.conf.layers.PoolingType;
import org.deeplearning4j.nn.conf.layers.RnnOutputLayer;
import org.deeplearning4j.nn.conf.layers.SubsamplingLayer;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions.LossFunction;

/**
 * The example DL4J networks pyd4j estimates memory for and trains in its benchmarks.
 *
 * <p>{@code main(dir)} writes each configuration as DL4J's own JSON ({@code name.json}) plus a
 * sidecar {@code name.input.json} holding the network's input types, because a
 * MultiLayerConfiguration's JSON does not record the InputType it was built for (its
 * preprocessors do, only in part).
 */
public final class Networks {

    private Networks() {
    }

    /** Input-type sidecar: the same keys {@link TrainSynthetic} and pyd4j's estimator read. */
    static String feedForward(long size) {
        return "{\"type\": \"feedForward\", \"size\": " + size + "}";
    }

    static String convolutional(long h, long w, long c) {
        return "{\"type\": \"convolutional\", \"height\": " + h + ", \"width\": " + w + ", \"channels\": " + c + "}";
    }

    static String convolutionalFlat(long h, long w, long c) {
        return "{\"type\": \"convolutionalFlat\", \"height\": " + h + ", \"width\": " + w + ", \"channels\": " + c + "}";
    }

    static String recurrent(long size, long length) {
        return "{\"type\": \"recurrent\", \"size\": " + size + ", \"timeSeriesLength\": " + length + "}";
    }

    private static NeuralNetConfiguration.Builder base() {
        return new NeuralNetConfiguration.Builder()
                .seed(42)
                .dataType(DataType.FLOAT)
                .updater(new Adam(1e-3))
                .weightInit(WeightInit.XAVIER);
    }

    /** MLP for flattened 28x28 images: 784-512-256-10. */
    public static MultiLayerConfiguration mlp() {
        return base().list()
                .layer(new DenseLayer.Builder().nIn(784).nOut(512).activation(Activation.RELU).build())
                .layer(new DenseLayer.Builder().nOut(256).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.feedForward(784))
                .build();
    }

    /** LeNet-5 style CNN on 28x28x1 images given flat (as MNIST iterators give them). */
    public static MultiLayerConfiguration lenet() {
        return base().list()
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(20).stride(1, 1).activation(Activation.IDENTITY).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new ConvolutionLayer.Builder(5, 5).nOut(50).stride(1, 1).activation(Activation.IDENTITY).build())
                .layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build())
                .layer(new DenseLayer.Builder().nOut(500).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutionalFlat(28, 28, 1))
                .build();
    }

    /** A deeper VGG-like CNN with batch normalization on 32x32x3 images. */
    public static MultiLayerConfiguration deepCnnBn() {
        NeuralNetConfiguration.ListBuilder b = base().convolutionMode(ConvolutionMode.Same).list();
        int[] channels = {32, 32, 64, 64, 128, 128};
        for (int i = 0; i < channels.length; i++) {
            b.layer(new ConvolutionLayer.Builder(3, 3).nOut(channels[i]).activation(Activation.IDENTITY).build());
            b.layer(new BatchNormalization.Builder().build());
            b.layer(new ActivationLayer.Builder().activation(Activation.RELU).build());
            if (i % 2 == 1) {
                b.layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build());
            }
        }
        return b.layer(new DenseLayer.Builder().nOut(256).activation(Activation.RELU).build())
                .layer(new OutputLayer.Builder(LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(32, 32, 3))
                .build();
    }

    /**
     * A deep CNN of 30 convolution layers (3 stages of 10 conv3x3 + batch norm + ReLU blocks,
     * 8-16-32 channels, a 2x2 max pool after each stage) with dropout on the first convolution of
     * each stage (input dropout), a dropout layer after each stage and on the dense layer, on
     * 16x16x3 images. Small maps keep it quick to train on a CPU; it is deep enough that keeping
     * every activation costs many times what one block needs.
     */
    public static MultiLayerConfiguration deepCnn30() {
        NeuralNetConfiguration.ListBuilder b = base().convolutionMode(ConvolutionMode.Same).list();
        int[] channels = {8, 16, 32};
        for (int stage = 0; stage < channels.length; stage++) {
            for (int i = 0; i < 10; i++) {
                ConvolutionLayer.Builder conv = new ConvolutionLayer.Builder(3, 3).nOut(channels[stage]).activation(Activation.IDENTITY);
                if (i == 0 && stage > 0) conv.dropOut(0.9);
                b.layer(conv.build());
                b.layer(new BatchNormalization.Builder().build());
                b.layer(new ActivationLayer.Builder().activation(Activation.RELU).build());
            }
            b.layer(new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build());
            b.layer(new DropoutLayer.Builder(0.8).build());
        }
        return b.layer(new DenseLayer.Builder().nOut(64).activation(Activation.RELU).dropOut(0.5).build())
                .layer(new OutputLayer.Builder(LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.convolutional(16, 16, 3))
                .build();
    }

    /** Two stacked LSTMs over sequences of 50 steps of 32 features, per-step 10-way output. */
    public static MultiLayerConfiguration lstm() {
        return base().list()
                .layer(new LSTM.Builder().nIn(32).nOut(128).activation(Activation.TANH).build())
                .layer(new LSTM.Builder().nOut(128).activation(Activation.TANH).build())
                .layer(new RnnOutputLayer.Builder(LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX).build())
                .setInputType(InputType.recurrent(32, 50))
                .build();
    }

    /** A small ResNet-style ComputationGraph: a residual (add) block and a merge of two branches. */
    public static ComputationGraphConfiguration residualGraph() {
        return base().convolutionMode(ConvolutionMode.Same).graphBuilder()
                .addInputs("input")
                .setInputTypes(InputType.convolutional(32, 32, 3))
                .addLayer("stem", new ConvolutionLayer.Builder(3, 3).nOut(32).activation(Activation.RELU).build(), "input")
                .addLayer("res_conv1", new ConvolutionLayer.Builder(3, 3).nOut(32).activation(Activation.IDENTITY).build(), "stem")
                .addLayer("res_bn1", new BatchNormalization.Builder().build(), "res_conv1")
                .addLayer("res_act1", new ActivationLayer.Builder().activation(Activation.RELU).build(), "res_bn1")
                .addLayer("res_conv2", new ConvolutionLayer.Builder(3, 3).nOut(32).activation(Activation.IDENTITY).build(), "res_act1")
                .addLayer("res_bn2", new BatchNormalization.Builder().build(), "res_conv2")
                .addVertex("res_add", new ElementWiseVertex(ElementWiseVertex.Op.Add), "res_bn2", "stem")
                .addLayer("res_out", new ActivationLayer.Builder().activation(Activation.RELU).build(), "res_add")
                .addLayer("branch_1x1", new ConvolutionLayer.Builder(1, 1).nOut(16).activation(Activation.RELU).build(), "res_out")
                .addLayer("branch_5x5", new ConvolutionLayer.Builder(5, 5).nOut(16).activation(Activation.RELU).build(), "res_out")
                .addVertex("merge", new MergeVertex(), "branch_1x1", "branch_5x5")
                .addLayer("pool", new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build(), "merge")
                .addLayer("gap", new GlobalPoolingLayer.Builder(PoolingType.AVG).build(), "pool")
                .addLayer("fc", new DenseLayer.Builder().nOut(128).activation(Activation.RELU).build(), "gap")
                .addLayer("output", new OutputLayer.Builder(LossFunction.MCXENT).nOut(10).activation(Activation.SOFTMAX).build(), "fc")
                .setOutputs("output")
                .build();
    }

    /**
     * An AlphaZero-style policy/value network on 8x8 boards of 4 planes: a convolutional trunk with
     * batch norm and a residual block, a policy head (softmax over 8x8+1 moves) and a value head
     * (global average pool, dense with dropout, tanh, MSE): two output layers, L2 on the weights.
     */
    public static ComputationGraphConfiguration policyValue() {
        return base().l2(1e-4).convolutionMode(ConvolutionMode.Same).graphBuilder()
                .addInputs("board")
                .setInputTypes(InputType.convolutional(8, 8, 4))
                .addLayer("stem", new ConvolutionLayer.Builder(3, 3).nOut(16).activation(Activation.IDENTITY).build(), "board")
                .addLayer("stem_bn", new BatchNormalization.Builder().build(), "stem")
                .addLayer("stem_act", new ActivationLayer.Builder().activation(Activation.RELU).build(), "stem_bn")
                .addLayer("res_conv", new ConvolutionLayer.Builder(3, 3).nOut(16).activation(Activation.IDENTITY).build(), "stem_act")
                .addLayer("res_bn", new BatchNormalization.Builder().build(), "res_conv")
                .addVertex("res_add", new ElementWiseVertex(ElementWiseVertex.Op.Add), "res_bn", "stem_act")
                .addLayer("trunk", new ActivationLayer.Builder().activation(Activation.RELU).build(), "res_add")
                .addLayer("policy_conv", new ConvolutionLayer.Builder(1, 1).nOut(2).activation(Activation.RELU).build(), "trunk")
                .addLayer("policy", new OutputLayer.Builder(LossFunction.MCXENT).nOut(65).activation(Activation.SOFTMAX).build(), "policy_conv")
                .addLayer("value_pool", new GlobalPoolingLayer.Builder(PoolingType.AVG).build(), "trunk")
                .addLayer("value_fc", new DenseLayer.Builder().nOut(32).activation(Activation.RELU).dropOut(0.8).build(), "value_pool")
                .addLayer("value", new OutputLayer.Builder(LossFunction.MSE).nOut(1).activation(Activation.TANH).build(), "value_fc")
                .setOutputs("policy", "value")
                .build();
    }

    /** Two inputs: a 12x12 image branch (conv, max pool, dense) and a 6-feature branch (dense), merged, softmax(5). */
    public static ComputationGraphConfiguration twoInput() {
        return base().convolutionMode(ConvolutionMode.Same).graphBuilder()
                .addInputs("image", "meta")
                .setInputTypes(InputType.convolutional(12, 12, 1), InputType.feedForward(6))
                .addLayer("img_conv", new ConvolutionLayer.Builder(3, 3).nOut(8).activation(Activation.RELU).build(), "image")
                .addLayer("img_pool", new SubsamplingLayer.Builder(PoolingType.MAX).kernelSize(2, 2).stride(2, 2).build(), "img_conv")
                .addLayer("img_fc", new DenseLayer.Builder().nOut(32).activation(Activation.RELU).build(), "img_pool")
                .addLayer("meta_fc", new DenseLayer.Builder().nOut(16).activation(Activation.TANH).build(), "meta")
                .addVertex("merge", new MergeVertex(), "img_fc", "meta_fc")
                .addLayer("fc", new DenseLayer.Builder().nOut(32).activation(Activation.RELU).build(), "merge")
                .addLayer("output", new OutputLayer.Builder(LossFunction.MCXENT).nOut(5).activation(Activation.SOFTMAX).build(), "fc")
                .setOutputs("output")
                .build();
    }

    /** name -> {configuration JSON, sidecar JSON}. */
    public static Map<String, String[]> all() {
        Map<String, String[]> out = new LinkedHashMap<>();
        out.put("mlp", new String[] {mlp().toJson(), sidecar("MultiLayerNetwork", feedForward(784),
                "MLP 784-512-256-10 (ReLU, softmax), Adam")});
        out.put("lenet", new String[] {lenet().toJson(), sidecar("MultiLayerNetwork", convolutionalFlat(28, 28, 1),
                "LeNet-5 style CNN, 28x28x1 flat input, Adam")});
        out.put("deep_cnn_bn", new String[] {deepCnnBn().toJson(), sidecar("MultiLayerNetwork", convolutional(32, 32, 3),
                "6 conv3x3 + batch norm + ReLU blocks (32-32-64-64-128-128), 3 max pools, dense 256, Adam")});
        out.put("deep_cnn30", new String[] {deepCnn30().toJson(), sidecar("MultiLayerNetwork", convolutional(16, 16, 3),
                "30 conv3x3 + batch norm + ReLU blocks (3 stages x 10, 8-16-32 channels, max pool and dropout after each stage, "
                + "input dropout on each stage's first conv), dense 64 with dropout, Adam")});
        out.put("lstm", new String[] {lstm().toJson(), sidecar("MultiLayerNetwork", recurrent(32, 50),
                "2 x LSTM(128) over 50 steps of 32 features, per-step softmax(10), Adam")});
        out.put("resnet_graph", new String[] {residualGraph().toJson(), sidecar("ComputationGraph", convolutional(32, 32, 3),
                "ComputationGraph: conv stem, residual block (ElementWiseVertex add), two-branch MergeVertex, Adam")});
        out.put("policy_value", new String[] {policyValue().toJson(), sidecar("ComputationGraph", convolutional(8, 8, 4),
                "ComputationGraph, two output layers: conv trunk with batch norm and a residual block, policy head "
                + "softmax(65), value head tanh(1) with MSE and dropout, L2, Adam")});
        out.put("two_input", new String[] {twoInput().toJson(), sidecar("ComputationGraph",
                convolutional(12, 12, 1) + ", " + feedForward(6),
                "ComputationGraph, two inputs: 12x12x1 image (conv, max pool, dense) and 6 features (dense), merged, "
                + "softmax(5), Adam")});
        return out;
    }

    static String sidecar(String model, String input, String description) {
        return "{\n  \"model\": \"" + model + "\",\n  \"inputs\": [" + input + "],\n  \"description\": \""
                + description + "\"\n}\n";
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 1) {
            System.err.println("usage: Networks <output-folder>");
            System.exit(2);
        }
        Path dir = Paths.get(args[0]);
        Files.createDirectories(dir);
        for (Map.Entry<String, String[]> e : all().entrySet()) {
            Files.write(dir.resolve(e.getKey() + ".json"), (e.getValue()[0] + "\n").getBytes(StandardCharsets.UTF_8));
            Files.write(dir.resolve(e.getKey() + ".input.json"), e.getValue()[1].getBytes(StandardCharsets.UTF_8));
            System.out.println("wrote " + dir.resolve(e.getKey() + ".json"));
        }
    }
}
