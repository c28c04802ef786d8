package org.pyd4j.train;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The few DL4J members planned training needs that DL4J does not make public (a layer's cached
 * arrays, a solver's optimizer, a network's epoch/iteration synchronization). Each is named in
 * one place; a DL4J version without it fails with the member's name.
 */
final class Reflect {
    private static final Map<String, Field> FIELDS = new ConcurrentHashMap<>();
    private static final Map<String, Method> METHODS = new ConcurrentHashMap<>();

    private Reflect() {
    }

    private static IllegalStateException missing(Class<?> owner, String what, Exception e) {
        return new IllegalStateException("DL4J " + owner.getName() + " has no " + what + ": this DL4J is not the "
                + "version planned training was measured on (1.0.0-M2.1)", e);
    }

    private static Field field(Class<?> owner, String name) {
        return FIELDS.computeIfAbsent(owner.getName() + "#" + name, k -> {
            try {
                Field f = owner.getDeclaredField(name);
                f.setAccessible(true);
                return f;
            } catch (NoSuchFieldException e) {
                throw missing(owner, "field " + name, e);
            }
        });
    }

    static Object get(Object o, Class<?> owner, String name) {
        try {
            return field(owner, name).get(o);
        } catch (IllegalAccessException e) {
            throw missing(owner, "accessible field " + name, e);
        }
    }

    static void set(Object o, Class<?> owner, String name, Object value) {
        try {
            field(owner, name).set(o, value);
        } catch (IllegalAccessException e) {
            throw missing(owner, "accessible field " + name, e);
        }
    }

    /** Call a no-argument method declared by {@code owner} on {@code o}. */
    static Object call(Object o, Class<?> owner, String name) {
        Method m = METHODS.computeIfAbsent(owner.getName() + "#" + name, k -> {
            try {
                Method found = owner.getDeclaredMethod(name);
                found.setAccessible(true);
                return found;
            } catch (NoSuchMethodException e) {
                throw missing(owner, "method " + name + "()", e);
            }
        });
        try {
            return m.invoke(o);
        } catch (IllegalAccessException e) {
            throw missing(owner, "accessible method " + name + "()", e);
        } catch (InvocationTargetException e) {
            Throwable c = e.getCause();
            if (c instanceof RuntimeException) throw (RuntimeException) c;
            if (c instanceof Error) throw (Error) c;
            throw new IllegalStateException(c);
        }
    }
}
