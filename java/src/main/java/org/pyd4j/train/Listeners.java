package org.pyd4j.train;

import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;

import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.optimize.api.TrainingListener;

/** The network's training listeners, as planned training sees them: one that reads every layer's activations
 *  (onForwardPass) cannot run under a plan, which frees them as it goes. */
final class Listeners {
    private Listeners() {
    }

    /** One problem per listener that reads every layer's activations. */
    static List<String> problems(Model net) {
        List<String> out = new ArrayList<>();
        for (TrainingListener l : listeners(net)) {
            if (usesForwardPass(l)) {
                out.add("listener " + l.getClass().getName() + " reads every layer's activations (onForwardPass), which "
                        + "planned training frees as it goes; remove the listener or use DL4J's own fit()");
            }
        }
        return out;
    }

    private static Collection<TrainingListener> listeners(Model net) {
        Collection<TrainingListener> l = net instanceof MultiLayerNetwork ? ((MultiLayerNetwork) net).getListeners()
                : ((ComputationGraph) net).getListeners();
        return l == null ? Collections.emptyList() : l;
    }

    private static boolean usesForwardPass(TrainingListener l) {
        if (Proxy.isProxyClass(l.getClass())) {
            // pyd4j's profiling agent listens through a proxy that ignores onForwardPass
            return !Proxy.getInvocationHandler(l).getClass().getName().startsWith("org.pyd4j.");
        }
        try {
            for (Class<?> arg : new Class<?>[] {List.class, java.util.Map.class}) {
                Method m = l.getClass().getMethod("onForwardPass", Model.class, arg);
                if (m.getDeclaringClass() != org.deeplearning4j.optimize.api.BaseTrainingListener.class) return true;
            }
            return false;
        } catch (NoSuchMethodException e) {
            return true;
        }
    }
}
