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
 * Adds tiny hooks (ASM, no frames recomputed: only straight-line calls are inserted, never a branch):
 * <ul>
 *   <li>end of JavaCPP {@code Pointer.<clinit>}: JavaCPP is ready, its counters may be read;</li>
 *   <li>entry of {@code Nd4jWorkspace.init()}: a workspace exists (workspaces are thread-local in ND4J,
 *       so a sampler thread cannot list them otherwise);</li>
 *   <li>entry of every {@code fit} of MultiLayerNetwork / ComputationGraph: attach the iteration listener;
 *       then, in MultiLayerNetwork.fit(DataSetIterator) and ComputationGraph.fit(MultiDataSetIterator), hand
 *       the iterator argument to {@link SpeedSettings#iterator} (prefetch=N) and go on with what it returns;</li>
 *   <li>entry of their {@code computeGradientAndScore()} and around their calls of the iterator's
 *       {@code next()} and {@code hasNext()}: where each iteration's time goes ({@link TimeSplit});</li>
 *   <li>the allocation paths ({@link Allocations}): return of {@code OpaqueDataBuffer.allocateDataBuffer}
 *       (a libnd4j buffer), entry of {@code OpaqueDataBuffer.closeBuffer}/{@code setPrimaryBuffer} and
 *       {@code CpuDeallocator.deallocate} (its memory freed or replaced), and where JavaCPP's
 *       {@code DeallocatorReference.add/remove} update {@code totalBytes} (a JavaCPP Pointer);</li>
 *   <li>entry of {@code DeallocatorService.pickObject}: ND4J's deallocation service, whose queue of
 *       registered objects shows when its threads have caught up after a collection.</li>
 * </ul>
 */
final class Instrumenter implements ClassFileTransformer {
    static final String POINTER = "org/bytedeco/javacpp/Pointer";
    static final String DEALLOCATOR_REF = "org/bytedeco/javacpp/Pointer$DeallocatorReference";
    static final String WORKSPACE = "org/nd4j/linalg/api/memory/abstracts/Nd4jWorkspace";
    static final String OPAQUE = "org/nd4j/nativeblas/OpaqueDataBuffer";
    static final String CPU_DEALLOCATOR = "org/nd4j/linalg/cpu/nativecpu/buffer/CpuDeallocator";
    static final String DEALLOCATOR_SERVICE = "org/nd4j/linalg/api/memory/deallocation/DeallocatorService";
    static final String DATA_TYPE = "org/nd4j/linalg/api/buffer/DataType";
    static final String MLN = "org/deeplearning4j/nn/multilayer/MultiLayerNetwork";
    static final String GRAPH = "org/deeplearning4j/nn/graph/ComputationGraph";
    private static final String HOOKS = "org/pyd4j/agent/Hooks";
    private static final String SPLIT = "org/pyd4j/agent/TimeSplit";
    static final String DATASET_ITERATOR = "org/nd4j/linalg/dataset/api/iterator/DataSetIterator";
    static final String MULTI_DATASET_ITERATOR = "org/nd4j/linalg/dataset/api/iterator/MultiDataSetIterator";
    private final boolean allocations;

    /** @param allocations hook the allocation paths too (only when the agent starts before the job's classes). */
    Instrumenter(boolean allocations) {
        this.allocations = allocations;
    }

    boolean isTarget(String internalName) {
        return POINTER.equals(internalName) || WORKSPACE.equals(internalName)
                || MLN.equals(internalName) || GRAPH.equals(internalName)
                || (allocations && (DEALLOCATOR_REF.equals(internalName) || OPAQUE.equals(internalName)
                || CPU_DEALLOCATOR.equals(internalName) || DEALLOCATOR_SERVICE.equals(internalName)));
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
            MethodVisitor visitor = super.visitMethod(access, name, desc, sig, exceptions);
            boolean isStatic = (access & Opcodes.ACC_STATIC) != 0;
            boolean hasCode = (access & (Opcodes.ACC_ABSTRACT | Opcodes.ACC_NATIVE)) == 0;
            if (visitor == null || !hasCode) return visitor;
            MethodVisitor mv = owner.equals(MLN) || owner.equals(GRAPH)
                    ? timeSplit(visitor, !isStatic && name.equals("computeGradientAndScore") && desc.equals("()V")) : visitor;
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
            if (owner.equals(DEALLOCATOR_REF) && !isStatic && desc.equals("()V") && (name.equals("add") || name.equals("remove"))) {
                return javacppCounter(mv, name.equals("add"));
            }
            if (owner.equals(OPAQUE) && isStatic && name.equals("allocateDataBuffer")
                    && desc.equals("(JL" + DATA_TYPE + ";Z)L" + OPAQUE + ";")) {
                return new MethodVisitor(Opcodes.ASM9, mv) {
                    @Override
                    public void visitInsn(int opcode) {
                        if (opcode == Opcodes.ARETURN) {
                            // stack: buffer -> buffer, buffer, elements * dataType.width()
                            super.visitInsn(Opcodes.DUP);
                            super.visitVarInsn(Opcodes.LLOAD, 0);
                            super.visitVarInsn(Opcodes.ALOAD, 2);
                            super.visitMethodInsn(Opcodes.INVOKEVIRTUAL, DATA_TYPE, "width", "()I", false);
                            super.visitInsn(Opcodes.I2L);
                            super.visitInsn(Opcodes.LMUL);
                            super.visitMethodInsn(Opcodes.INVOKESTATIC, HOOKS, "nd4jAllocated", "(Ljava/lang/Object;J)V", false);
                        }
                        super.visitInsn(opcode);
                    }
                };
            }
            if (owner.equals(OPAQUE) && !isStatic && (name.equals("closeBuffer") && desc.equals("()V")
                    || name.equals("setPrimaryBuffer"))) {
                return atEntry(mv, () -> mv.visitVarInsn(Opcodes.ALOAD, 0), "nd4jReleased");
            }
            if (owner.equals(CPU_DEALLOCATOR) && !isStatic && name.equals("deallocate") && desc.equals("()V")) {
                return atEntry(mv, () -> {
                    mv.visitVarInsn(Opcodes.ALOAD, 0);
                    mv.visitFieldInsn(Opcodes.GETFIELD, CPU_DEALLOCATOR, "opaqueDataBuffer", "L" + OPAQUE + ";");
                }, "nd4jReleased");
            }
            if (owner.equals(DEALLOCATOR_SERVICE) && !isStatic && name.equals("pickObject")) {
                return atEntry(mv, () -> mv.visitVarInsn(Opcodes.ALOAD, 0), "deallocatorService");
            }
            String hook = null;
            if (owner.equals(WORKSPACE) && name.equals("init") && desc.equals("()V") && !isStatic) hook = "workspace";
            if ((owner.equals(MLN) || owner.equals(GRAPH)) && name.equals("fit") && !isStatic) hook = "model";
            if (hook == null) return mv;
            MethodVisitor entry = atEntry(mv, () -> mv.visitVarInsn(Opcodes.ALOAD, 0), hook);
            String iteratorType = owner.equals(MLN) ? DATASET_ITERATOR : MULTI_DATASET_ITERATOR;
            if (hook.equals("model") && desc.equals("(L" + iteratorType + ";)V")) return iteratorArgument(entry, iteratorType);
            return entry;
        }

        /** TimeSplit: its forwardStart() at the entry of computeGradientAndScore(), dataStart()/dataEnd()
         *  around every call of a DataSetIterator's or MultiDataSetIterator's next() and hasNext(). */
        private static MethodVisitor timeSplit(MethodVisitor mv, boolean forward) {
            return new MethodVisitor(Opcodes.ASM9, mv) {
                @Override
                public void visitCode() {
                    super.visitCode();
                    if (forward) super.visitMethodInsn(Opcodes.INVOKESTATIC, SPLIT, "forwardStart", "()V", false);
                }

                @Override
                public void visitMethodInsn(int opcode, String callee, String method, String mdesc, boolean itf) {
                    // next(), and hasNext(): an async prefetcher waits for its queue in hasNext()
                    boolean next = opcode == Opcodes.INVOKEINTERFACE
                            && (method.equals("next") && mdesc.equals("()Ljava/lang/Object;") || method.equals("hasNext") && mdesc.equals("()Z"))
                            && (callee.equals(DATASET_ITERATOR) || callee.equals(MULTI_DATASET_ITERATOR));
                    if (next) super.visitMethodInsn(Opcodes.INVOKESTATIC, SPLIT, "dataStart", "()V", false);
                    super.visitMethodInsn(opcode, callee, method, mdesc, itf);
                    if (next) super.visitMethodInsn(Opcodes.INVOKESTATIC, SPLIT, "dataEnd", "()V", false);
                }
            };
        }

        /** At method entry (after the model hook): argument 1 = (type) Hooks.iterator(this, argument 1). */
        private static MethodVisitor iteratorArgument(MethodVisitor mv, String type) {
            return new MethodVisitor(Opcodes.ASM9, mv) {
                @Override
                public void visitCode() {
                    super.visitCode();
                    super.visitVarInsn(Opcodes.ALOAD, 0);
                    super.visitVarInsn(Opcodes.ALOAD, 1);
                    super.visitMethodInsn(Opcodes.INVOKESTATIC, HOOKS, "iterator", "(Ljava/lang/Object;Ljava/lang/Object;)Ljava/lang/Object;", false);
                    super.visitTypeInsn(Opcodes.CHECKCAST, type);
                    super.visitVarInsn(Opcodes.ASTORE, 1);
                }
            };
        }

        /** At method entry: push one object (loader), call Hooks.hook(Object). */
        private static MethodVisitor atEntry(MethodVisitor mv, Runnable loader, String hook) {
            return new MethodVisitor(Opcodes.ASM9, mv) {
                @Override
                public void visitCode() {
                    super.visitCode();
                    loader.run();
                    super.visitMethodInsn(Opcodes.INVOKESTATIC, HOOKS, hook, "(Ljava/lang/Object;)V", false);
                }
            };
        }

        /**
         * Right after DeallocatorReference.add()/remove() store JavaCPP's totalBytes (inside its lock for
         * remove, which returns early when already removed; at the return of add, outside the lock).
         */
        private MethodVisitor javacppCounter(MethodVisitor mv, boolean add) {
            return new MethodVisitor(Opcodes.ASM9, mv) {
                @Override
                public void visitInsn(int opcode) {
                    if (add && opcode == Opcodes.RETURN) {
                        super.visitVarInsn(Opcodes.ALOAD, 0);
                        super.visitVarInsn(Opcodes.ALOAD, 0);
                        super.visitFieldInsn(Opcodes.GETFIELD, owner, "bytes", "J");
                        super.visitFieldInsn(Opcodes.GETSTATIC, owner, "totalBytes", "J");
                        super.visitMethodInsn(Opcodes.INVOKESTATIC, HOOKS, "javacppAdded", "(Ljava/lang/Object;JJ)V", false);
                    }
                    super.visitInsn(opcode);
                }

                @Override
                public void visitFieldInsn(int opcode, String fieldOwner, String field, String fieldDesc) {
                    super.visitFieldInsn(opcode, fieldOwner, field, fieldDesc);
                    if (!add && opcode == Opcodes.PUTSTATIC && field.equals("totalBytes") && fieldOwner.equals(owner)) {
                        super.visitVarInsn(Opcodes.ALOAD, 0);
                        super.visitVarInsn(Opcodes.ALOAD, 0);
                        super.visitFieldInsn(Opcodes.GETFIELD, owner, "bytes", "J");
                        super.visitMethodInsn(Opcodes.INVOKESTATIC, HOOKS, "javacppRemoved", "(Ljava/lang/Object;J)V", false);
                    }
                }
            };
        }
    }
}
