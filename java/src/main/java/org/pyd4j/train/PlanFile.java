package org.pyd4j.train;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.nd4j.shade.jackson.databind.JsonNode;
import org.nd4j.shade.jackson.databind.ObjectMapper;

/**
 * A training plan written by {@code pyd4j plan --emit-plan FILE}: the network's nodes (one per
 * DL4J layer or graph vertex, plus one per network input) and the schedule records one training
 * iteration replays. The format is documented in one place, the Python module that writes it
 * ({@code pyd4j/sched/plan_file.py}); this class only reads it and checks what it reads.
 */
public final class PlanFile {
    /** The format name and the only version this reader accepts. */
    public static final String FORMAT = "pyd4j-plan";
    public static final int VERSION = 1;

    /** Record operations, numbered as in pyd4j.sched.plan.Op. */
    public enum Op { ALLOC, FREE, OFFLOAD, PREFETCH, FORWARD, BACKWARD, RECOMPUTE, MOVE }

    /** The five tensors of a node, numbered as in pyd4j.sched.plan.Kind: tensor id = 5 * node + kind;
     *  what node i's forward step keeps for its backward step (batch norm's xMu/xHat/std, dropout
     *  masks) is tensor 5 * n + i (pyd4j.sched.plan.state_tid). */
    public static final int KINDS = 5;
    public static final int Y = 0;
    public static final int DY = 1;

    /** One node of the plan's graph. */
    public static final class Node {
        public final int id;
        public final String name;
        public final String type;        // planner layer type: DATA, CONV, FC, BN, SOFTMAX, ...
        public final String dl4jClass;   // simple class name of the DL4J layer or vertex
        public final int layerIndex;     // MultiLayerNetwork layer index, -1 otherwise
        public final String vertex;      // ComputationGraph vertex name (or input name), null otherwise
        public final int inputIndex;     // network input index for DATA nodes, -1 otherwise
        public final int[] inputs;
        public final long yBytes;

        Node(int id, String name, String type, String dl4jClass, int layerIndex, String vertex,
             int inputIndex, int[] inputs, long yBytes) {
            this.id = id;
            this.name = name;
            this.type = type;
            this.dl4jClass = dl4jClass;
            this.layerIndex = layerIndex;
            this.vertex = vertex;
            this.inputIndex = inputIndex;
            this.inputs = inputs;
            this.yBytes = yBytes;
        }

        public boolean isInput() {
            return inputIndex >= 0;
        }

        @Override
        public String toString() {
            return name + " (" + (dl4jClass == null ? type : dl4jClass) + ")";
        }
    }

    /** One record: an operation and its argument (a node id for compute records, a tensor id
     *  otherwise); a convolution's compute record may run in batch chunks ({@link ChunkedConv}). */
    public static final class Record {
        public final Op op;
        public final int arg;
        public final int src;   // MOVE: the tensor whose buffer becomes arg's; -1 otherwise
        public final int chunks;   // compute records: batch slices the step runs in (1: the whole batch)

        Record(Op op, int arg, int src) {
            this(op, arg, src, 1);
        }

        Record(Op op, int arg, int src, int chunks) {
            this.op = op;
            this.arg = arg;
            this.src = src;
            this.chunks = chunks;
        }

        public boolean isCompute() {
            return op == Op.FORWARD || op == Op.BACKWARD || op == Op.RECOMPUTE;
        }
    }

    public final String source;
    public final String networkKind;   // "MultiLayerNetwork" or "ComputationGraph"
    public final String policy;
    public final int batch;
    public final long predictedPeakBytes;
    public final List<Node> nodes;
    public final List<Record> records;

    private PlanFile(String source, String networkKind, String policy, int batch, long predictedPeakBytes,
                     List<Node> nodes, List<Record> records) {
        this.source = source;
        this.networkKind = networkKind;
        this.policy = policy;
        this.batch = batch;
        this.predictedPeakBytes = predictedPeakBytes;
        this.nodes = Collections.unmodifiableList(nodes);
        this.records = Collections.unmodifiableList(records);
    }

    public static PlanFile read(String path) throws IOException {
        return read(Paths.get(path));
    }

    public static PlanFile read(Path path) throws IOException {
        return parse(new String(Files.readAllBytes(path), java.nio.charset.StandardCharsets.UTF_8), path.toString());
    }

    /** Parse plan JSON; {@code source} names it in errors. */
    public static PlanFile parse(String json, String source) throws IOException {
        JsonNode doc = new ObjectMapper().readTree(json);
        if (doc == null || !FORMAT.equals(doc.path("format").asText())) {
            throw bad(source, "is not a " + FORMAT + " file (no \"format\": \"" + FORMAT + "\"); write one with "
                    + "`pyd4j plan --model net.json --batch N --emit-plan FILE`");
        }
        int version = doc.path("version").asInt(-1);
        if (version != VERSION) {
            throw bad(source, "has format version " + version + "; this pyd4j reads version " + VERSION
                    + ": write the plan again with this pyd4j's `pyd4j plan --emit-plan`");
        }
        JsonNode net = doc.path("network");
        String kind = net.path("kind").asText();
        if (!kind.equals("MultiLayerNetwork") && !kind.equals("ComputationGraph")) {
            throw bad(source, "network.kind is '" + kind + "'; expected MultiLayerNetwork or ComputationGraph");
        }
        List<Node> nodes = new ArrayList<>();
        for (JsonNode n : doc.path("nodes")) {
            int id = n.path("id").asInt(-1);
            if (id != nodes.size()) throw bad(source, "node ids must be 0, 1, 2, ... in order; got " + id + " at position " + nodes.size());
            JsonNode d = n.path("dl4j");
            JsonNode ins = n.path("inputs");
            int[] inputs = new int[ins.size()];
            for (int k = 0; k < inputs.length; k++) {
                inputs[k] = ins.get(k).asInt();
                if (inputs[k] < 0 || inputs[k] >= id) {
                    throw bad(source, "node " + id + " reads node " + inputs[k] + ", which is not before it");
                }
            }
            nodes.add(new Node(id, n.path("name").asText("node" + id), n.path("type").asText(),
                    d.hasNonNull("class") ? d.get("class").asText() : null,
                    d.has("layer") ? d.get("layer").asInt() : -1,
                    d.hasNonNull("vertex") ? d.get("vertex").asText() : null,
                    d.has("input") ? d.get("input").asInt() : -1,
                    inputs, n.path("y_bytes").asLong(0)));
        }
        if (nodes.isEmpty()) throw bad(source, "has no nodes");
        List<Record> records = new ArrayList<>();
        Op[] ops = Op.values();
        for (JsonNode r : doc.path("records")) {
            String name = r.get(0).asText();
            Op op;
            try {
                op = Op.valueOf(name);
            } catch (IllegalArgumentException e) {
                throw bad(source, "record " + records.size() + " has operation '" + name + "'; this trainer runs "
                        + java.util.Arrays.toString(ops));
            }
            int arg = r.get(1).asInt();
            int src = op == Op.MOVE ? r.path(2).asInt(-1) : -1;
            int chunks = op != Op.MOVE && r.path(2).isObject() ? r.get(2).path("chunks").asInt(1) : 1;
            Record rec = new Record(op, arg, src, chunks);
            if (chunks < 1 || (chunks > 1 && !rec.isCompute())) {
                throw bad(source, "record " + records.size() + " (" + name + " " + arg + ") has chunks " + chunks
                        + "; a compute record runs in 1 or more batch chunks, other records in none");
            }
            int limit = rec.isCompute() ? nodes.size() : (KINDS + 1) * nodes.size();
            if (arg < 0 || arg >= limit || (op == Op.MOVE && (src < 0 || src >= KINDS * nodes.size()))) {
                throw bad(source, "record " + records.size() + " (" + name + " " + arg + (op == Op.MOVE ? " " + src : "")
                        + ") names no " + (rec.isCompute() ? "node" : "tensor") + " of its " + nodes.size() + " nodes");
            }
            if ((op == Op.OFFLOAD || op == Op.PREFETCH) && arg >= KINDS * nodes.size()) {
                throw bad(source, "record " + records.size() + " (" + name + " " + arg + ") moves what a layer keeps for "
                        + "its backward step; only activations (Y) go to an offload tier");
            }
            records.add(rec);
        }
        if (records.isEmpty()) throw bad(source, "has no records");
        return new PlanFile(source, kind, doc.path("policy").asText(), net.path("batch").asInt(),
                doc.path("predicted").path("peak_bytes").asLong(-1), nodes, records);
    }

    private static IOException bad(String source, String what) {
        return new IOException("plan " + source + " " + what);
    }

    /** Whether any record offloads a tensor (the plan then needs an {@link OffloadTier}). */
    public boolean offloads() {
        for (Record r : records) if (r.op == Op.OFFLOAD) return true;
        return false;
    }

    public static int node(int tensor) {
        return tensor / KINDS;
    }

    public static int kind(int tensor) {
        return tensor % KINDS;
    }

    /** Whether {@code tensor} is what a node keeps for its backward step (5 * n + node). */
    public boolean isSaved(int tensor) {
        return tensor >= KINDS * nodes.size();
    }

    /** The node whose kept arrays tensor {@code tensor} (5 * n + node) is. */
    public int savedNode(int tensor) {
        return tensor - KINDS * nodes.size();
    }
}
