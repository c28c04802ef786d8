package org.pyd4j.agent;

import java.io.BufferedWriter;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * Where JSON lines go: a file (appended, flushed every sampling tick so a crash loses at most one
 * interval) or a loopback socket whose first line carries the token the listener handed out.
 */
final class Sink {
    private final Writer out;
    private final Socket socket;
    private volatile boolean broken;

    private Sink(Writer out, Socket socket) {
        this.out = out;
        this.socket = socket;
    }

    /**
     * Append to a file. A {@code %p} in the path becomes this JVM's pid, so every JVM of a job
     * started with the same option (JAVA_TOOL_OPTIONS reaches them all) writes its own file; a pid
     * used again in the same directory gets {@code -2}, {@code -3}, ... before the extension.
     */
    static Sink file(String path) throws IOException {
        return new Sink(new BufferedWriter(new OutputStreamWriter(new FileOutputStream(resolve(path), true), StandardCharsets.UTF_8), 1 << 16), null);
    }

    static String resolve(String path) {
        if (!path.contains("%p")) return path;
        String pid = String.valueOf(ProcessHandle.current().pid());
        String candidate = path.replace("%p", pid);
        for (int n = 2; new java.io.File(candidate).exists(); n++) {
            candidate = path.replace("%p", pid + "-" + n);
        }
        return candidate;
    }

    static Sink loopback(int port, String token) throws IOException {
        if (token == null || token.isEmpty()) {
            throw new IOException("socket mode needs a token (agent arg token=... or env PYD4J_AGENT_TOKEN)");
        }
        Socket s = new Socket(InetAddress.getLoopbackAddress(), port);
        s.setTcpNoDelay(true);
        Sink sink = new Sink(new BufferedWriter(new OutputStreamWriter(s.getOutputStream(), StandardCharsets.UTF_8), 1 << 16), s);
        sink.line(new Json().put("type", "hello").put("token", token).put("pid", ProcessHandle.current().pid()).close());
        sink.flush();
        return sink;
    }

    synchronized void line(String json) {
        if (broken) return;
        try {
            out.write(json);
            out.write('\n');
        } catch (IOException e) {
            fail(e);
        }
    }

    synchronized void flush() {
        if (broken) return;
        try {
            out.flush();
        } catch (IOException e) {
            fail(e);
        }
    }

    /** The reader went away or the disk is full: say so once on stderr; the job goes on untouched. */
    private void fail(IOException e) {
        broken = true;
        Agent.warn("could not write the timeline of pid " + ProcessHandle.current().pid() + " (" + e.getMessage() + ") at "
                + System.currentTimeMillis() + " ms since the epoch: this JVM's later samples are lost; the job goes on");
    }

    synchronized void close() {
        flush();
        try {
            out.close();
            if (socket != null) socket.close();
        } catch (IOException ignored) {
            // closing at exit: nothing left to tell
        }
    }
}
