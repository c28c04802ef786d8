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
 * ({@code pyd4j/dl4j/plan_file.py}; its schema: {@code pyd4j.schemas.PlanDocument}); this class only reads it and checks what it reads.
 */
public final class PlanFile {
    /** The format name and the only version this reader accepts. */
    public static final String FORMAT = "pyd4j-plan";
    public static final int VERSION = 1;
    /** The plan schema this reader checks ({@code "schema"} in the file; absent in files written before it). */
    public static final int SCHEMA = 2;
    /** Schema 1 is schema 2 without sliced nodes: both are read. */
    public static final int OLDEST_SCHEMA = 1;

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
        public final long[] shape;       // the node's output shape, batch first (empty when the file has none)
        public final boolean sliced;     // its steps run pyd4j's batch-sliced form (SlicedBatchNorm), not DL4J's

        Node(int id, String name, String type, String dl4jClass, int layerIndex, String vertex,
             int inputIndex, int[] inputs, long yBytes) {
            this(id, name, type, dl4jClass, layerIndex, vertex, inputIndex, inputs, yBytes, new long[0], false);
        }

        Node(int id, String name, String type, String dl4jClass, int layerIndex, String vertex,
             int inputIndex, int[] inputs, long yBytes, long[] shape, boolean sliced) {
            this.shape = shape;
            this.sliced = sliced;
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
     *  otherwise); a convolution's or LRN's compute record may run in batch chunks ({@link ChunkedStep}). */
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

    /** Reads a regular file of at most this many bytes: a FIFO would block, a huge file is no plan. */
    public static final long MAX_BYTES = 256L << 20;

    public static PlanFile read(Path path) throws IOException {
        java.nio.file.attribute.BasicFileAttributes attrs;
        try {
            attrs = Files.readAttributes(path, java.nio.file.attribute.BasicFileAttributes.class);
        } catch (java.nio.file.NoSuchFileException e) {
            throw bad(path.toString(), "does not exist; give the file `pyd4j plan --emit-plan FILE` wrote");
        } catch (IOException e) {
            throw bad(path.toString(), "cannot be read (" + e.getMessage() + "); give the file `pyd4j plan --emit-plan FILE` wrote");
        }
        if (!attrs.isRegularFile()) {
            throw bad(path.toString(), "is " + (attrs.isDirectory() ? "a directory" : "not a regular file (a FIFO or device)")
                    + "; give the plan file `pyd4j plan --emit-plan FILE` wrote");
        }
        if (attrs.size() > MAX_BYTES) {
            throw bad(path.toString(), "is " + attrs.size() + " bytes, more than the " + MAX_BYTES + " a plan file holds; "
                    + "give the file `pyd4j plan --emit-plan FILE` wrote");
        }
        return parse(new String(Files.readAllBytes(path), java.nio.charset.StandardCharsets.UTF_8), path.toString());
    }

    /** Parse plan JSON; {@code source} names it in errors. The rules are the plan schema's
     *  ({@code pyd4j.schemas.PlanDocument}): the same documents pass and fail in both readers. */
    public static PlanFile parse(String json, String source) throws IOException {
        JsonNode doc = readDocument(json, source);
        checkHeader(doc, source);
        JsonNode net = doc.path("network");
        if (!net.isObject()) throw bad(source, "has no network object");
        String kind = net.path("kind").asText();
        if (!kind.equals("MultiLayerNetwork") && !kind.equals("ComputationGraph")) {
            throw bad(source, "network.kind is '" + kind + "'; expected MultiLayerNetwork or ComputationGraph");
        }
        int batch = (int) whole(net.path("batch"), 1, Integer.MAX_VALUE, "network.batch", source);
        if (net.hasNonNull("dtype") && !net.get("dtype").isTextual()) throw bad(source, "network.dtype must be a string");
        if (net.hasNonNull("source") && !net.get("source").isTextual()) throw bad(source, "network.source must be a string");
        checkPredicted(doc.path("predicted"), source);
        List<Node> nodes = parseNodes(doc, source);
        List<Record> records = parseRecords(doc.path("records"), nodes.size(), source);
        return new PlanFile(source, kind, doc.path("policy").asText(), batch,
                doc.path("predicted").path("peak_bytes").asLong(-1), nodes, records);
    }

    /** The JSON object, or the error saying the text is no plan (not JSON, empty, not an object). */
    private static JsonNode readDocument(String json, String source) throws IOException {
        JsonNode doc;
        try {
            doc = new ObjectMapper().readTree(json);
        } catch (org.nd4j.shade.jackson.core.JsonProcessingException e) {
            throw bad(source, "is not valid JSON (" + e.getOriginalMessage() + ", at line "
                    + (e.getLocation() == null ? "?" : e.getLocation().getLineNr()) + "): cut short or not a plan; write it again "
                    + "with `pyd4j plan --model net.json --batch N --emit-plan FILE`");
        }
        if (doc == null || doc.isMissingNode() || !doc.isObject()) {
            throw bad(source, "is empty or not a JSON object; write one with `pyd4j plan --model net.json --batch N --emit-plan FILE`");
        }
        return doc;
    }

    /** The top-level fields: format, schema and version this reader reads, a policy, and the optional
     *  tensor_cache and budget_bytes well formed. */
    private static void checkHeader(JsonNode doc, String source) throws IOException {
        if (!FORMAT.equals(doc.path("format").asText())) {
            throw bad(source, "is not a " + FORMAT + " file (no \"format\": \"" + FORMAT + "\"); write one with "
                    + "`pyd4j plan --model net.json --batch N --emit-plan FILE`");
        }
        if (doc.has("schema") && !(doc.get("schema").isIntegralNumber() && doc.get("schema").asLong() >= OLDEST_SCHEMA
                && doc.get("schema").asLong() <= SCHEMA)) {
            throw bad(source, "has plan schema " + doc.get("schema") + "; this pyd4j reads plan schemas " + OLDEST_SCHEMA + " to " + SCHEMA
                    + ": write the plan again with this pyd4j's `pyd4j plan --emit-plan`");
        }
        int version = doc.path("version").isIntegralNumber() ? doc.path("version").asInt(-1) : -1;
        if (version != VERSION) {
            throw bad(source, "has format version " + doc.path("version") + "; this pyd4j reads version " + VERSION
                    + ": write the plan again with this pyd4j's `pyd4j plan --emit-plan`");
        }
        JsonNode policy = doc.path("policy");
        if (!policy.isTextual() || policy.asText().isEmpty()) throw bad(source, "has no policy (a planner policy name)");
        if (doc.has("tensor_cache") && !doc.get("tensor_cache").isBoolean()) throw bad(source, "tensor_cache must be true or false");
        if (doc.hasNonNull("budget_bytes")) whole(doc.get("budget_bytes"), 1, Long.MAX_VALUE, "budget_bytes", source);
    }

    /** The optional "predicted" object: its byte figures whole and its time a number >= 0. */
    private static void checkPredicted(JsonNode predicted, String source) throws IOException {
        if (predicted.isMissingNode() || predicted.isNull()) return;
        if (!predicted.isObject()) throw bad(source, "predicted must be an object");
        for (String k : new String[] {"peak_bytes", "device_peak_bytes", "lower_bound_bytes"}) {
            if (predicted.hasNonNull(k)) whole(predicted.get(k), 0, Long.MAX_VALUE, "predicted." + k, source);
        }
        if (predicted.hasNonNull("time_s") && !(predicted.get("time_s").isNumber() && predicted.get("time_s").asDouble() >= 0)) {
            throw bad(source, "predicted.time_s = " + predicted.get("time_s") + " must be a number >= 0");
        }
    }

    /** The nodes array: ids 0, 1, 2, ... in order, each reading only nodes before it. */
    private static List<Node> parseNodes(JsonNode doc, String source) throws IOException {
        if (!doc.path("nodes").isArray()) throw bad(source, "has no nodes array");
        boolean newestSchema = doc.path("schema").asText("").equals(String.valueOf(SCHEMA));
        List<Node> nodes = new ArrayList<>();
        for (JsonNode n : doc.path("nodes")) nodes.add(parseNode(n, nodes.size(), newestSchema, source));
        if (nodes.isEmpty()) throw bad(source, "has no nodes");
        return nodes;
    }

    /** Node {@code position} of the nodes array; only the newest schema's nodes may be sliced. */
    private static Node parseNode(JsonNode n, int position, boolean newestSchema, String source) throws IOException {
        if (!n.isObject()) throw bad(source, "node " + position + " is not an object");
        int id = n.path("id").isIntegralNumber() ? n.path("id").asInt(-1) : -1;
        if (id != position) throw bad(source, "node ids must be 0, 1, 2, ... in order; got " + n.path("id") + " at position " + position);
        if (!n.path("name").isMissingNode() && !n.path("name").isTextual()) throw bad(source, "node " + id + " name must be a string");
        if (!n.path("type").isTextual() || n.path("type").asText().isEmpty()) throw bad(source, "node " + id + " has no type");
        JsonNode d = n.path("dl4j");
        if (!d.isObject()) throw bad(source, "node " + id + " has no dl4j object (its layer, vertex or input)");
        JsonNode ins = n.path("inputs");
        if (!ins.isArray()) throw bad(source, "node " + id + " has no inputs array");
        int[] inputs = new int[ins.size()];
        for (int k = 0; k < inputs.length; k++) {
            inputs[k] = (int) whole(ins.get(k), 0, Integer.MAX_VALUE, "node " + id + " input", source);
            if (inputs[k] >= id) {
                throw bad(source, "node " + id + " reads node " + inputs[k] + ", which is not before it");
            }
        }
        long[] shape = new long[0];
        if (n.has("shape")) {
            if (!n.get("shape").isArray()) throw bad(source, "node " + id + " shape must be a list of sizes");
            shape = new long[n.get("shape").size()];
            for (int k = 0; k < shape.length; k++) shape[k] = whole(n.get("shape").get(k), 1, Integer.MAX_VALUE, "node " + id + " shape", source);
        }
        long yBytes = n.has("y_bytes") ? whole(n.get("y_bytes"), 0, Long.MAX_VALUE, "node " + id + " y_bytes", source) : 0;
        if (n.has("sliced") && !n.get("sliced").isBoolean()) throw bad(source, "node " + id + " sliced must be true or false");
        boolean sliced = n.path("sliced").asBoolean(false);
        if (sliced && !newestSchema) {
            throw bad(source, "node " + id + " is sliced, which plan schema " + SCHEMA + " has and this file's does not");
        }
        return new Node(id, n.path("name").asText("node" + id), n.path("type").asText(),
                d.hasNonNull("class") ? d.get("class").asText() : null,
                d.has("layer") ? (int) whole(d.get("layer"), 0, Integer.MAX_VALUE, "node " + id + " dl4j.layer", source) : -1,
                d.hasNonNull("vertex") ? d.get("vertex").asText() : null,
                d.has("input") ? (int) whole(d.get("input"), 0, Integer.MAX_VALUE, "node " + id + " dl4j.input", source) : -1,
                inputs, yBytes, shape, sliced);
    }

    /** The records array, each naming a node or tensor of the plan's {@code nodeCount} nodes. */
    private static List<Record> parseRecords(JsonNode array, int nodeCount, String source) throws IOException {
        if (!array.isArray()) throw bad(source, "has no records array");
        List<Record> records = new ArrayList<>();
        for (JsonNode r : array) records.add(parseRecord(r, records.size(), nodeCount, source));
        if (records.isEmpty()) throw bad(source, "has no records");
        return records;
    }

    /** Record {@code index}: [op, arg] or [op, arg, extra], extra a MOVE's source tensor or a compute
     *  record's {"algo": ..., "chunks": k}. */
    private static Record parseRecord(JsonNode r, int index, int nodeCount, String source) throws IOException {
        if (!r.isArray() || r.size() < 2 || r.size() > 3 || !r.get(0).isTextual()) {
            throw bad(source, "record " + index + " is " + r + "; a record is [op, arg] or [op, arg, extra]");
        }
        whole(r.get(1), 0, Integer.MAX_VALUE, "record " + index + " argument", source);
        if (r.size() == 3 && !(r.get(2).isObject() || r.get(2).isIntegralNumber())) {
            throw bad(source, "record " + index + " has a third element " + r.get(2) + "; a MOVE's source "
                    + "tensor or a compute record's {\"algo\": ..., \"chunks\": k}");
        }
        if (r.size() == 3 && r.get(2).isObject()) whole(r.get(2).path("chunks"), 1, Integer.MAX_VALUE, "record " + index + " chunks", source);
        String name = r.get(0).asText();
        Op op;
        try {
            op = Op.valueOf(name);
        } catch (IllegalArgumentException e) {
            throw bad(source, "record " + index + " has operation '" + name + "'; this trainer runs "
                    + java.util.Arrays.toString(Op.values()));
        }
        int arg = r.get(1).asInt();
        int src = op == Op.MOVE ? r.path(2).asInt(-1) : -1;
        int chunks = op != Op.MOVE && r.path(2).isObject() ? r.get(2).path("chunks").asInt(1) : 1;
        Record rec = new Record(op, arg, src, chunks);
        if (chunks < 1 || (chunks > 1 && !rec.isCompute())) {
            throw bad(source, "record " + index + " (" + name + " " + arg + ") has chunks " + chunks
                    + "; a compute record runs in 1 or more batch chunks, other records in none");
        }
        int limit = rec.isCompute() ? nodeCount : (KINDS + 1) * nodeCount;
        if (arg < 0 || arg >= limit || (op == Op.MOVE && (src < 0 || src >= KINDS * nodeCount))) {
            throw bad(source, "record " + index + " (" + name + " " + arg + (op == Op.MOVE ? " " + src : "")
                    + ") names no " + (rec.isCompute() ? "node" : "tensor") + " of its " + nodeCount + " nodes");
        }
        if ((op == Op.OFFLOAD || op == Op.PREFETCH) && arg >= KINDS * nodeCount) {
            throw bad(source, "record " + index + " (" + name + " " + arg + ") moves what a layer keeps for "
                    + "its backward step; only activations (Y) go to an offload tier");
        }
        return rec;
    }

    /** A whole number from {@code min} to {@code max}, or the error naming the field, the value and the range. */
    private static long whole(JsonNode v, long min, long max, String what, String source) throws IOException {
        if (v == null || !v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < min || v.asLong() > max) {
            throw bad(source, what + " = " + (v == null || v.isMissingNode() ? "(missing)" : v.toString())
                    + " must be a whole number from " + min + " to " + max + "; write the plan again with `pyd4j plan --emit-plan`");
        }
        return v.asLong();
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
