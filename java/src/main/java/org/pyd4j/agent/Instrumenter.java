package org.pyd4j.agent;

import java.lang.instrument.ClassFileTransformer;
import java.security.ProtectionDomain;

import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.Type;

/**
 * Adds three tiny hooks (ASM, no frames recomputed: only straight-line calls are inserted):
 * <ul>
 *   <li>end of JavaCPP {@code Pointer.<clinit>}: JavaCPP is ready, its counters may be read;</li>
 *   <li>entry of {@code Nd4jWorkspace.init()}: a workspace exists (workspaces are thread-local in ND4J,
 *       so a sampler thread cannot list them otherwise);</li>
 *   <li>entry of every {@code fit} of MultiLayerNetwork / ComputationGraph: attach the iteration listener.</li>
 * </ul>
 */
final class Instrumenter implements ClassFileTransformer {
    static final String POINTER = "org/bytedeco/javacpp/Pointer";
    static final String WORKSPACE = "org/nd4j/linalg/api/memory/abstracts/Nd4jWorkspace";
    static final String MLN = "org/deeplearning4j/nn/multilayer/MultiLayerNetwork";
    static final String GRAPH = "org/deeplearning4j/nn/graph/ComputationGraph";
    private static final String HOOKS = "org/pyd4j/agent/Hooks";

    static boolean isTarget(String internalName) {
        return POINTER.equals(internalName) || WORKSPACE.equals(internalName)
                || MLN.equals(internalName) || GRAPH.equals(internalName);
    }

    @Override
    public byte[] transform(ClassLoader loader, String className, Class<?> redefined,
                            ProtectionDomain domain, byte[] bytes) {
        if (className == null || !isTarget(className)) return null;
        try {
            ClassReader reader = new ClassReader(bytes);
            ClassWriter writer = new ClassWriter(reader, ClassWriter.COMPUTE_MAXS);
            reader.accept(new Weaver(writer, className), 0);
            return writer.toByteArray();
        } catch (Throwable e) {
            Agent.warn("could not hook " + className + ": " + e);
            return null;
        }
    }

    private static final class Weaver extends ClassVisitor {
        private final String owner;

        Weaver(ClassVisitor next, String owner) {
            super(Opcodes.ASM9, next);
            this.owner = owner;
        }

        @Override
        public MethodVisitor visitMethod(int access, String name, String desc, String sig, String[] exceptions) {
            MethodVisitor mv = super.visitMethod(access, name, desc, sig, exceptions);
            boolean isStatic = (access & Opcodes.ACC_STATIC) != 0;
            boolean hasCode = (access & (Opcodes.ACC_ABSTRACT | Opcodes.ACC_NATIVE)) == 0;
            if (mv == null || !hasCode) return mv;
            if (owner.equals(POINTER) && name.equals("<clinit>")) {
                return new MethodVisitor(Opcodes.ASM9, mv) {
                    @Override
                    public void visitInsn(int opcode) {
                        if (opcode == Opcodes.RETURN) {
                            super.visitLdcInsn(Type.getObjectType(owner));
                            super.visitMethodInsn(Opcodes.INVOKESTATIC, HOOKS, "javacppReady", "(Ljava/lang/Class;)V", false);
                        }
                        super.visitInsn(opcode);
                    }
                };
            }
            String hook = null;
            if (owner.equals(WORKSPACE) && name.equals("init") && desc.equals("()V") && !isStatic) hook = "workspace";
            if ((owner.equals(MLN) || owner.equals(GRAPH)) && name.equals("fit") && !isStatic) hook = "model";
            if (hook == null) return mv;
            final String target = hook;
            return new MethodVisitor(Opcodes.ASM9, mv) {
                @Override
                public void visitCode() {
                    super.visitCode();
                    super.visitVarInsn(Opcodes.ALOAD, 0);
                    super.visitMethodInsn(Opcodes.INVOKESTATIC, HOOKS, target, "(Ljava/lang/Object;)V", false);
                }
            };
        }
    }
}
