package org.pyd4j;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.util.List;
import java.util.Map;
import java.nio.MappedByteBuffer;

import org.bytedeco.javacpp.Pointer;

import org.nd4j.linalg.api.ndarray.INDArray;

import py4j.GatewayServer;

/**
 * Entry point of pyd4j's out-of-process JVM (Py4J). Python starts it with the auth token in the
 * environment variable {@code PYD4J_GATEWAY_TOKEN} (never on the command line), it listens on the
 * loopback address at a free port, prints {@code PYD4J_GATEWAY_PORT <port>} on stdout, and exits
 * when its stdin closes, that is when the Python parent closes the gateway or dies.
 *
 * <p>Bulk arrays never travel through the Py4J socket: they go through a shared-memory file (the
 * arena) that both processes map, in chunks of at most the arena's size, each one memcpy here.
 */
public final class Gateway {
    public static final String TOKEN_ENV = "PYD4J_GATEWAY_TOKEN";
    public static final String PORT_LINE = "PYD4J_GATEWAY_PORT ";

    private Gateway() {}

    /** The object Python sees as {@code gateway.entry_point}. */
    public static final class Entry {
        private MappedByteBuffer arena;
        private long arenaAddress;
        private long arenaBytes;

        /** Process id of this JVM. */
        public long pid() {
            return ProcessHandle.current().pid();
        }

        /** Facts for `pyd4j doctor` (see {@link Nd4jInfo#describe}). */
        public Map<String, String> describe() {
            return Nd4jInfo.describe();
        }

        /** Map the transfer arena, a shared-memory file Python also maps (replaces the previous one). */
        public synchronized void attachArena(String path, long bytes) throws IOException {
            if (arena != null) {
                Buffers.unmap(arena);
            }
            arena = Buffers.map(path, bytes);
            arenaAddress = new Pointer(arena).address();
            arenaBytes = bytes;
        }

        /** A new ND4J-owned array (uninitialized unless empty) that Python fills through the arena. */
        public INDArray allocate(String dtype, List<?> shape, String order) {
            return Buffers.allocate(dtype, Buffers.longs(shape), order.charAt(0));
        }

        /** x itself when one memcpy can move it, else a dense C-order copy. */
        public INDArray dense(INDArray x) {
            return Buffers.isDense(x) ? x : x.dup('c');
        }

        /** x itself when it is dense in C order, else a dense C-order copy. */
        public INDArray denseC(INDArray x) {
            return Buffers.isDense(x) && (x.ordering() == 'c' || x.rank() <= 1) ? x : x.dup('c');
        }

        /** dtype, byte size, order and dimensions of a dense x, in one round trip. */
        public String header(INDArray x) {
            StringBuilder sb = new StringBuilder(x.dataType().name()).append(',')
                    .append(x.length() * x.dataType().width()).append(',').append(x.ordering());
            for (long d : x.shape()) {
                sb.append(',').append(d);
            }
            return sb.toString();
        }

        /** Copy {@code bytes} from the arena's start into dense x at byte {@code offset}. */
        public synchronized void fromArena(INDArray x, long offset, long bytes) {
            checkRange(x, offset, bytes);
            Pointer.memcpy(Buffers.at(Buffers.firstElement(x) + offset), Buffers.at(arenaAddress), bytes);
        }

        /** Copy {@code bytes} of dense x from byte {@code offset} to the arena's start. */
        public synchronized void toArena(INDArray x, long offset, long bytes) {
            checkRange(x, offset, bytes);
            Pointer.memcpy(Buffers.at(arenaAddress), Buffers.at(Buffers.firstElement(x) + offset), bytes);
        }

        private void checkRange(INDArray x, long offset, long bytes) {
            long size = x.length() * x.dataType().width();
            if (arena == null || bytes > arenaBytes || offset < 0 || offset + bytes > size || !Buffers.isDense(x)) {
                throw new IllegalArgumentException("transfer of " + bytes + " bytes at " + offset + " does not fit: array "
                        + size + " bytes (dense " + Buffers.isDense(x) + "), arena " + arenaBytes + " bytes");
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String token = System.getenv(TOKEN_ENV);
        if (token == null || token.isEmpty()) {
            System.err.println("pyd4j gateway: set " + TOKEN_ENV + " to the auth token (the Python side does this)");
            System.exit(2);
        }
        GatewayServer server = new GatewayServer.GatewayServerBuilder(new Entry())
                .javaPort(0)
                .javaAddress(InetAddress.getLoopbackAddress())
                .authToken(token)
                .build();
        server.start();
        System.out.println(PORT_LINE + server.getListeningPort());
        System.out.flush();

        // Die with the parent: stdin is a pipe the Python side holds open.
        InputStream in = System.in;
        byte[] sink = new byte[256];
        try {
            while (in.read(sink) >= 0) {
                // Nothing is sent on stdin; anything read is ignored.
            }
        } catch (IOException ignored) {
            // A broken pipe means the parent is gone, too.
        }
        server.shutdown();
        System.exit(0);
    }
}
