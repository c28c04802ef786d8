package org.pyd4j;

import java.io.IOException;
import java.io.InputStream;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.nativeblas.NativeOpsHolder;

/** What ND4J runs on, as flat string keys: the facts `pyd4j doctor` reports. */
public final class Nd4jInfo {
    private Nd4jInfo() {}

    /** The version of the nd4j-api jar on the classpath, from its Maven pom.properties. */
    public static String nd4jVersion() {
        try (InputStream in = Nd4j.class.getResourceAsStream("/META-INF/maven/org.nd4j/nd4j-api/pom.properties")) {
            if (in == null) {
                return "unknown";
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "unknown");
        } catch (IOException e) {
            return "unknown";
        }
    }

    /** The DL4J/ND4J version the helper jar was built against (its DL4J-Version manifest entry). */
    public static String builtAgainst() {
        try (InputStream in = Nd4jInfo.class.getResourceAsStream("/META-INF/MANIFEST.MF")) {
            if (in == null) {
                return "unknown";
            }
            java.util.jar.Manifest m = new java.util.jar.Manifest(in);
            String v = m.getMainAttributes().getValue("DL4J-Version");
            return v == null ? "unknown" : v;
        } catch (IOException e) {
            return "unknown";
        }
    }

    /** Flat facts: nd4j.version, nd4j.backend, nd4j.backend_class, blas.vendor, omp.threads, ... */
    public static Map<String, String> describe() {
        Map<String, String> out = new LinkedHashMap<>();
        out.put("nd4j.version", nd4jVersion());
        out.put("nd4j.built_against", builtAgainst());
        Properties env = Nd4j.getExecutioner().getEnvironmentInformation();
        out.put("nd4j.backend", String.valueOf(env.getOrDefault("backend", "unknown")));
        out.put("nd4j.backend_class", Nd4j.getBackend().getClass().getName());
        out.put("nd4j.default_dtype", String.valueOf(Nd4j.dataType()));
        out.put("blas.vendor", String.valueOf(env.getOrDefault("blas.vendor", "unknown")));
        out.put("blas.threads", String.valueOf(env.getOrDefault("blas.threads", "")));
        out.put("omp.threads", String.valueOf(env.getOrDefault("omp.threads", "")));
        out.put("cores", String.valueOf(env.getOrDefault("cores", "")));
        out.put("memory.available", String.valueOf(env.getOrDefault("memory.available", "")));
        try {
            String build = NativeOpsHolder.getInstance().getDeviceNativeOps().buildInfo();
            out.put("native.build_info", build == null ? "" : build.trim());
            out.put("native.minimal_requirements_met",
                    String.valueOf(NativeOpsHolder.getInstance().getDeviceNativeOps().isMinimalRequirementsMet()));
            out.put("native.optimal_requirements_met",
                    String.valueOf(NativeOpsHolder.getInstance().getDeviceNativeOps().isOptimalRequirementsMet()));
        } catch (RuntimeException | LinkageError e) {
            out.put("native.build_info", "unavailable: " + e);
        }
        out.put("java.version", System.getProperty("java.version"));
        out.put("java.home", System.getProperty("java.home"));
        out.put("jvm.max_heap_bytes", String.valueOf(Runtime.getRuntime().maxMemory()));
        out.put("javacpp.max_bytes", String.valueOf(org.bytedeco.javacpp.Pointer.maxBytes()));
        out.put("javacpp.max_physical_bytes", String.valueOf(org.bytedeco.javacpp.Pointer.maxPhysicalBytes()));
        return out;
    }

    /** A 2x3 @ 3x2 product computed by ND4J (row-major values), for a smoke check against numpy. */
    public static double[] smokeMmul() {
        INDArray a = Nd4j.linspace(1, 6, 6).reshape('c', 2, 3).castTo(org.nd4j.linalg.api.buffer.DataType.DOUBLE);
        INDArray b = Nd4j.linspace(1, 6, 6).reshape('c', 3, 2).castTo(org.nd4j.linalg.api.buffer.DataType.DOUBLE);
        return a.mmul(b).dup('c').data().asDouble();
    }
}
