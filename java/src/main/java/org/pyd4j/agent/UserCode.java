package org.pyd4j.agent;

import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Which code on a stack is the job's own and which is a library's, and how a frame is named in the
 * report. Allocation sites and workspace sites are reported at the job's own line, so the user sees
 * their code, not ND4J's; telling the two apart needs the classpath entry a class came from, which is
 * its own piece of work apart from counting allocations.
 */
final class UserCode {
    /** Frames walked from an allocation: deep enough to get out of ND4J and DL4J. */
    static final int MAX_DEPTH = 64;
    private static final StackWalker WALKER = StackWalker.getInstance(StackWalker.Option.RETAIN_CLASS_REFERENCE);
    /**
     * Packages of the libraries: used only where a class's classpath entry cannot tell (a fat jar holding
     * the job and its libraries together, a class without a code source). pyd4j's own helper classes
     * (the agent, the Python-fed iterators, the gateway) always count as library.
     */
    private static final String[] LIBRARY = {"org.nd4j.", "org.deeplearning4j.", "org.datavec.", "org.bytedeco.",
            "java.", "javax.", "jdk.", "sun.", "com.sun.", "org.pyd4j.agent.", "org.pyd4j.data.", "org.pyd4j.train."};
    /** Maven groups of the libraries whose code is never the user's (read from a jar's META-INF/maven). */
    private static final String[] LIBRARY_GROUPS = {"org.nd4j", "org.deeplearning4j", "org.datavec", "org.bytedeco",
            "org.eclipse.deeplearning4j", "org.apache.", "com.google.", "org.slf4j", "ch.qos.", "com.fasterxml.",
            "org.codehaus.", "org.ow2.asm", "commons-"};
    /** Whether a class is the job's own code, decided once per class from the classpath entry it was loaded from. */
    private static final ClassValue<Boolean> USER_CODE = new ClassValue<Boolean>() {
        @Override
        protected Boolean computeValue(Class<?> c) {
            return userCode(c);
        }
    };
    private static final ConcurrentHashMap<String, Boolean> LIBRARY_JARS = new ConcurrentHashMap<>();

    private UserCode() {
    }

    /** The stack of the method that calls this one, from that method outwards, at most {@link #MAX_DEPTH} frames. */
    static List<StackWalker.StackFrame> callerFrames() {
        return WALKER.walk(s -> s.skip(1).limit(MAX_DEPTH).collect(java.util.stream.Collectors.toList()));
    }

    /** The first frame of the job's own code on this thread's stack, described, or null. */
    static String userLine() {
        List<StackWalker.StackFrame> frames = WALKER.walk(s -> s.limit(MAX_DEPTH).collect(java.util.stream.Collectors.toList()));
        for (StackWalker.StackFrame f : frames) {
            if (isUser(f)) return describe(f);
        }
        return null;
    }

    static boolean isUser(StackWalker.StackFrame frame) {
        try {
            return USER_CODE.get(frame.getDeclaringClass());
        } catch (Throwable e) {
            return !isLibrary(frame.getClassName());
        }
    }

    /**
     * The job's own code is told from library code by the classpath entry it was loaded from, not by its
     * package (org.deeplearning4j.examples.* is a user's): the JDK and pyd4j's helpers are library; a class
     * directory (target/classes, an IDE's output) and the jar holding the job's main class are the job's;
     * another jar is library when it sits in a Maven or Gradle repository or carries Maven metadata of a
     * library group (ND4J, DL4J, DataVec, JavaCPP and the like), else the job's. In a jar that holds the
     * libraries too (a fat jar), the main class's own package is the job's and library packages are not.
     */
    static boolean userCode(Class<?> c) {
        String name = c.getName();
        if (name.startsWith("org.pyd4j.agent.") || name.startsWith("org.pyd4j.data.") || name.startsWith("org.pyd4j.train.")
                || (name.startsWith("org.pyd4j.") && name.indexOf('.', "org.pyd4j.".length()) < 0)) return false;
        ClassLoader loader = c.getClassLoader();
        if (loader == null || loader == ClassLoader.getPlatformClassLoader()) return false;
        String path = location(c);
        if (path == null) return !isLibrary(name);
        if (!path.endsWith(".jar")) return true;
        if (path.equals(MainClass.JAR)) {
            if (!MainClass.FAT) return true;
            return (MainClass.PACKAGE != null && name.startsWith(MainClass.PACKAGE + ".")) || !isLibrary(name);
        }
        return !LIBRARY_JARS.computeIfAbsent(path, UserCode::libraryJar);
    }

    /** The file a class was loaded from (a jar or a class directory), or null. */
    private static String location(Class<?> c) {
        try {
            java.security.CodeSource source = c.getProtectionDomain().getCodeSource();
            java.net.URL url = source == null ? null : source.getLocation();
            return url == null || !"file".equals(url.getProtocol()) ? null : new java.io.File(url.toURI()).getAbsolutePath();
        } catch (Throwable e) {
            return null;
        }
    }

    private static Boolean libraryJar(String path) {
        String p = path.replace('\\', '/');
        if (p.contains("/.m2/repository/") || p.contains("/.gradle/caches/")) return true;
        try (java.util.jar.JarFile jar = new java.util.jar.JarFile(path)) {
            java.util.Enumeration<java.util.jar.JarEntry> entries = jar.entries();
            while (entries.hasMoreElements()) {
                String e = entries.nextElement().getName();
                if (!e.startsWith("META-INF/maven/")) continue;
                String group = e.substring("META-INF/maven/".length());
                for (String g : LIBRARY_GROUPS) {
                    if (group.startsWith(g)) return true;
                }
            }
        } catch (Throwable e) {
            return true;  // unreadable: do not claim it as the user's
        }
        return false;
    }

    /** The job's main class (from the java command line), the jar it came from, and whether that jar holds the libraries too. */
    private static final class MainClass {
        static final String NAME = mainName();
        static final String JAR = NAME == null ? null : jarOf(NAME);
        static final String PACKAGE = NAME == null || NAME.indexOf('.') < 0 ? null
                : String.join(".", java.util.Arrays.copyOf(NAME.split("\\."), Math.min(3, NAME.split("\\.").length - 1)));
        static final boolean FAT = JAR != null && holdsLibraries(JAR);

        private static String mainName() {
            String first = System.getProperty("sun.java.command", "").split(" ", 2)[0];
            if (!first.endsWith(".jar")) return first.isEmpty() ? null : first;
            try (java.util.jar.JarFile jar = new java.util.jar.JarFile(first)) {
                java.util.jar.Manifest m = jar.getManifest();
                return m == null ? null : m.getMainAttributes().getValue("Main-Class");
            } catch (Throwable e) {
                return null;
            }
        }

        private static String jarOf(String className) {
            try {
                return location(Class.forName(className, false, ClassLoader.getSystemClassLoader()));
            } catch (Throwable e) {
                return null;
            }
        }

        private static boolean holdsLibraries(String path) {
            try (java.util.jar.JarFile jar = new java.util.jar.JarFile(path)) {
                return jar.getEntry("org/nd4j/linalg/factory/Nd4j.class") != null
                        || jar.getEntry("org/deeplearning4j/nn/multilayer/MultiLayerNetwork.class") != null;
            } catch (Throwable e) {
                return false;
            }
        }
    }

    static boolean isLibrary(String className) {
        for (String prefix : LIBRARY) {
            if (className.startsWith(prefix)) return true;
        }
        return className.startsWith("org.pyd4j.") && className.indexOf('.', "org.pyd4j.".length()) < 0;
    }

    static String describe(StackWalker.StackFrame f) {
        String file = f.getFileName();
        int line = f.getLineNumber();
        return f.getClassName() + "." + f.getMethodName() + "(" + (file == null ? "Unknown Source" : file)
                + (line >= 0 ? ":" + line : "") + ")";
    }
}
