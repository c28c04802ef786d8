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

    static Sink file(String path) throws IOException {
        return new Sink(new BufferedWriter(new OutputStreamWriter(new FileOutputStream(path, true), StandardCharsets.UTF_8), 1 << 16), null);
    }

    static Sink loopback(int port, String token) throws IOException {
        if (token == null || token.isEmpty()) {
            throw new IOException("socket mode needs a token (agent arg token=... or env PYD4J_AGENT_TOKEN)");
        }
        Socket s = new Socket(InetAddress.getLoopbackAddress(), port);
        s.setTcpNoDelay(true);
        Sink sink = new Sink(new BufferedWriter(new OutputStreamWriter(s.getOutputStream(), StandardCharsets.UTF_8), 1 << 16), s);
        sink.line(new Json().put("type", "hello").put("token", token).close());
        sink.flush();
        return sink;
    }

    synchronized void line(String json) {
        if (broken) return;
        try {
            out.write(json);
            out.write('\n');
        } catch (IOException e) {
            broken = true;  // the reader went away; the job must go on untouched
        }
    }

    synchronized void flush() {
        if (broken) return;
        try {
            out.flush();
        } catch (IOException e) {
            broken = true;
        }
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
