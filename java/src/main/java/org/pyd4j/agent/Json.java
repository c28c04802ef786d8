package org.pyd4j.agent;

/** A tiny JSON line builder: the agent must not bring a JSON library into the job's classpath. */
final class Json {
    private final StringBuilder sb = new StringBuilder(512);
    private boolean first = true;

    Json() {
        sb.append('{');
    }

    private void key(String k) {
        if (!first) sb.append(',');
        first = false;
        str(sb, k);
        sb.append(':');
    }

    Json put(String k, long v) {
        key(k);
        sb.append(v);
        return this;
    }

    Json put(String k, double v) {
        key(k);
        if (Double.isNaN(v) || Double.isInfinite(v)) sb.append("null");
        else sb.append(v);
        return this;
    }

    Json put(String k, boolean v) {
        key(k);
        sb.append(v);
        return this;
    }

    Json put(String k, String v) {
        key(k);
        if (v == null) sb.append("null");
        else str(sb, v);
        return this;
    }

    /** Insert raw, already valid JSON (an object or array built by another Json). */
    Json raw(String k, String json) {
        key(k);
        sb.append(json == null ? "null" : json);
        return this;
    }

    String close() {
        sb.append('}');
        return sb.toString();
    }

    static String array(java.util.List<String> rawItems) {
        StringBuilder out = new StringBuilder().append('[');
        for (int i = 0; i < rawItems.size(); i++) {
            if (i > 0) out.append(',');
            out.append(rawItems.get(i));
        }
        return out.append(']').toString();
    }

    static String strings(java.util.List<String> items) {
        StringBuilder out = new StringBuilder().append('[');
        for (int i = 0; i < items.size(); i++) {
            if (i > 0) out.append(',');
            str(out, items.get(i));
        }
        return out.append(']').toString();
    }

    static void str(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
            }
        }
        out.append('"');
    }
}
