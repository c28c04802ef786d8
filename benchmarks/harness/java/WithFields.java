import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.Arrays;

/**
 * Runs a program's main after setting some of its public static fields, as its author invites users to
 * ("Tweak these"): a deeplearning4j-examples job made production-length without editing its source.
 *
 * <p>Usage: {@code WithFields <main class> [field=value ...] [-- program arguments]} (int, long, double,
 * boolean or String fields).
 */
public final class WithFields {
    private WithFields() {
    }

    public static void main(String[] args) throws Exception {
        Class<?> program = Class.forName(args[0]);
        int i = 1;
        for (; i < args.length && !args[i].equals("--"); i++) {
            String[] kv = args[i].split("=", 2);
            if (kv.length != 2) {
                throw new IllegalArgumentException("'" + args[i] + "': give field=value");
            }
            Field f = program.getField(kv[0]);
            if (!Modifier.isStatic(f.getModifiers())) {
                throw new IllegalArgumentException(program.getName() + "." + kv[0] + " is not static");
            }
            Class<?> t = f.getType();
            Object v = t == int.class ? Integer.valueOf(kv[1]) : t == long.class ? Long.valueOf(kv[1])
                    : t == double.class ? Double.valueOf(kv[1]) : t == boolean.class ? Boolean.valueOf(kv[1]) : kv[1];
            f.set(null, v);
        }
        String[] rest = i < args.length ? Arrays.copyOfRange(args, i + 1, args.length) : new String[0];
        program.getMethod("main", String[].class).invoke(null, (Object) rest);
    }
}
