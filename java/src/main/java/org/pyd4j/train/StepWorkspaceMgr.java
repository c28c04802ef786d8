package org.pyd4j.train;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.memory.conf.WorkspaceConfiguration;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * DL4J's workspace manager for one planned step, which remembers every array it hands out
 * outside a workspace. DL4J's layers create their outputs, their input gradients, what they keep
 * for backprop and also some temporaries through it by array type (an ActivationLayer's backprop
 * copies its input as an ACTIVATION_GRAD array and drops it); in DL4J's own fit() those land in
 * workspaces that are reset, here they are separate arrays. After each step the trainer closes the
 * ones the step neither returned nor left in the layer ({@link #drain}), so their memory returns at
 * once instead of at the next garbage collection. Arrays out of workspaces are made on a buffer of
 * the trainer's {@link BufferPool} when it keeps one of their size.
 */
final class StepWorkspaceMgr extends LayerWorkspaceMgr {
    private final List<INDArray> made = new ArrayList<>();
    private final BufferPool pool;   // null: every array is new

    private StepWorkspaceMgr(Set<ArrayType> scopeOutOfWs, Map<ArrayType, WorkspaceConfiguration> configs,
                             Map<ArrayType, String> names, BufferPool pool) {
        super(scopeOutOfWs, configs, names);
        this.pool = pool;
        setHelperWorkspacePointers(new HashMap<>());
    }

    static StepWorkspaceMgr of(String name, WorkspaceConfiguration conf, boolean backward) {
        return of(name, conf, backward, null);
    }

    /** Step temporaries (FF/BP working memory, and in the backward pass activations, which a
     *  layer's backprop recomputes) in workspace {@code name}; every other type in no workspace.
     *  An opaque step's backward takes {@code backward = false}: a recurrent layer's backprop
     *  borrows its activations' workspace inside the working-memory one (LSTMHelpers), which
     *  one workspace for both refuses ("Can't borrow from borrowed workspace"). */
    static StepWorkspaceMgr of(String name, WorkspaceConfiguration conf, boolean backward, BufferPool pool) {
        Set<ArrayType> out = new java.util.HashSet<>();
        Map<ArrayType, WorkspaceConfiguration> configs = new HashMap<>();
        Map<ArrayType, String> names = new HashMap<>();
        for (ArrayType t : ArrayType.values()) {
            boolean working = t == ArrayType.FF_WORKING_MEM || t == ArrayType.BP_WORKING_MEM
                    || (backward && t == ArrayType.ACTIVATIONS);
            if (working) {
                configs.put(t, conf);
                names.put(t, name);
            } else if (t == ArrayType.RNN_FF_LOOP_WORKING_MEM || t == ArrayType.RNN_BP_LOOP_WORKING_MEM) {
                // a recurrent layer's per-time-step temporaries: their own workspace, as in DL4J's fit()
                configs.put(t, conf);
                names.put(t, name + "_RNN_LOOP");
            } else {
                out.add(t);
            }
        }
        return new StepWorkspaceMgr(out, configs, names, pool);
    }

    private INDArray note(INDArray a, INDArray from) {
        if (a != null && a != from && !a.isAttached() && !a.isView()) made.add(a);
        return a;
    }

    /** Whether {@code root} is the buffer of an array handed out outside workspaces since the last {@link #drain}. */
    boolean made(org.nd4j.linalg.api.buffer.DataBuffer root) {
        for (INDArray a : made) if (Held.root(a) == root) return true;
        return false;
    }

    /** The arrays handed out outside workspaces since the last call. */
    List<INDArray> drain() {
        List<INDArray> out = new ArrayList<>(made);
        made.clear();
        return out;
    }

    /** An array out of workspaces on a kept buffer, or null. */
    private INDArray reused(ArrayType t, DataType d, long[] shape, char order, boolean zeroed) {
        return pool != null && isScopedOut(t) ? pool.take(d, shape, order, zeroed) : null;
    }

    @Override
    public INDArray create(ArrayType t, DataType d, long... shape) {
        INDArray a = reused(t, d, shape, Nd4j.order(), true);
        return note(a != null ? a : super.create(t, d, shape), null);
    }

    @Override
    public INDArray create(ArrayType t, DataType d, long[] shape, char order) {
        INDArray a = reused(t, d, shape, order, true);
        return note(a != null ? a : super.create(t, d, shape, order), null);
    }

    @Override
    public INDArray createUninitialized(ArrayType t, DataType d, long... shape) {
        INDArray a = reused(t, d, shape, Nd4j.order(), false);
        return note(a != null ? a : super.createUninitialized(t, d, shape), null);
    }

    @Override
    public INDArray createUninitialized(ArrayType t, DataType d, long[] shape, char order) {
        INDArray a = reused(t, d, shape, order, false);
        return note(a != null ? a : super.createUninitialized(t, d, shape, order), null);
    }

    /** A new array out of workspaces that the step makes itself (a sliced step's whole output), counted with the step's arrays. */
    INDArray outside(DataType d, long[] shape, char order) {
        INDArray a = pool == null ? null : pool.take(d, shape, order, false);
        if (a == null) {
            try (MemoryWorkspace ws = Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
                a = Nd4j.createUninitialized(d, shape, order);
            }
        }
        return note(a, null);
    }

    /** A copy of {@code a} out of workspaces on a kept buffer, or null. */
    private INDArray reusedCopy(ArrayType t, INDArray a, char order) {
        if (a == null || a.isEmpty()) return null;
        INDArray c = reused(t, a.dataType(), a.shape(), order, false);
        return c == null ? null : c.assign(a);
    }

    @Override
    public INDArray dup(ArrayType t, INDArray a, char order) {
        INDArray c = reusedCopy(t, a, order);
        return note(c != null ? c : super.dup(t, a, order), a);
    }

    @Override
    public INDArray dup(ArrayType t, INDArray a) {
        INDArray c = reusedCopy(t, a, a == null ? Nd4j.order() : a.ordering());
        return note(c != null ? c : super.dup(t, a), a);
    }

    @Override
    public INDArray castTo(ArrayType t, DataType d, INDArray a, boolean dupIfCorrectType) {
        return note(super.castTo(t, d, a, dupIfCorrectType), a);
    }

    /** An array in a workspace leveraged to a type out of workspaces is copied out (detach()): onto a kept buffer when there is one. */
    @Override
    public INDArray leverageTo(ArrayType t, INDArray a) {
        boolean copied = a != null && a.isAttached() && (noLeverageOverride == null
                || !noLeverageOverride.contains(a.data().getParentWorkspace().getId()));
        INDArray c = copied ? reusedCopy(t, a, a.ordering()) : null;
        return note(c != null ? c : super.leverageTo(t, a), a);
    }
}
