"""Java exceptions become Python exceptions: one table, most specific Java class first.

Each translated exception keeps the Java class name and the Java stack trace, and is raised
`from None` so the Python traceback stays readable (as pyspark does).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from typing import Iterator


class JavaError(Exception):
    """A Java exception seen from Python. `java_class` and `java_stacktrace` keep the Java side."""

    fix = ""  # what the user should change, where the exception class alone tells it

    def __init__(self, message: str, java_class: str = "", java_stacktrace: str = "") -> None:
        super().__init__(message)
        self.java_class = java_class
        self.java_stacktrace = java_stacktrace

    def __str__(self) -> str:
        base = super().__str__()
        return f"{self.java_class}: {base}" if self.java_class else base


class JavaOutOfMemoryError(JavaError, MemoryError):
    """java.lang.OutOfMemoryError from the Java heap (raise -Xmx)."""

    fix = "raise -Xmx/-Xms (the Java heap) to the generated value"


class JavaCppOutOfMemoryError(JavaOutOfMemoryError):
    """ND4J off-heap memory refused by JavaCPP's maxbytes / maxphysicalbytes limits."""

    fix = ("raise -Dorg.bytedeco.javacpp.maxphysicalbytes (and the container limit) to the generated values, "
           "or lower the batch")

    @property
    def limit_property(self) -> str:
        """The system property to raise. JavaCPP puts the limit that refused in the *cause*
        ("Physical memory usage is too high" or "... > maxBytes"), so the whole chain is read."""
        text = f"{self}\n{self.java_stacktrace}"
        if "maxPhysicalBytes" in text or "Physical memory usage is too high" in text:
            return "org.bytedeco.javacpp.maxphysicalbytes"
        return "org.bytedeco.javacpp.maxbytes"


class DirectBufferOutOfMemoryError(JavaOutOfMemoryError):
    """NIO direct buffer memory exhausted (raise -XX:MaxDirectMemorySize)."""

    fix = "raise -XX:MaxDirectMemorySize (NIO direct buffers; ND4J arrays do not use them)"


class MetaspaceOutOfMemoryError(JavaOutOfMemoryError):
    """Class metadata space exhausted (raise -XX:MaxMetaspaceSize, or look for a class-loader leak)."""

    fix = "raise -XX:MaxMetaspaceSize, or look for a class-loader leak (classes loaded again and again)"


class JavaIllegalArgumentError(JavaError, ValueError):
    """java.lang.IllegalArgumentException."""


class JavaIllegalStateError(JavaError, RuntimeError):
    """java.lang.IllegalStateException (ND4J's ND4JIllegalStateException among them)."""


class WorkspaceScopeError(JavaIllegalStateError):
    """An INDArray used after the workspace scope holding its memory closed (ND4J's
    'leaked workspace pointer' check, or pyd4j.workspaces' own check)."""

    fix = "keep the array with .leverage() (to the parent workspace) or .detach() before the scope closes"


class JavaIndexError(JavaError, IndexError):
    """java.lang.IndexOutOfBoundsException and its kin."""


class JavaUnsupportedOperationError(JavaError, NotImplementedError):
    """java.lang.UnsupportedOperationException."""


class JavaNullPointerError(JavaError, ValueError):
    """java.lang.NullPointerException: usually a missing argument."""


class JavaIOError(JavaError, OSError):
    """java.io.IOException."""


# Java class (or any superclass of the thrown one) -> Python class. The walk goes up the Java
# hierarchy of the thrown exception and stops at the first class found here, so the most
# specific match wins.
EXCEPTION_TABLE: dict[str, type[JavaError]] = {
    "java.lang.OutOfMemoryError": JavaOutOfMemoryError,
    "org.nd4j.linalg.exception.ND4JIllegalArgumentException": JavaIllegalArgumentError,
    "org.nd4j.linalg.exception.ND4JIllegalStateException": JavaIllegalStateError,
    "org.nd4j.linalg.workspace.ND4JWorkspaceException": JavaIllegalStateError,
    "java.lang.IllegalArgumentException": JavaIllegalArgumentError,
    "java.lang.IllegalStateException": JavaIllegalStateError,
    "java.lang.IndexOutOfBoundsException": JavaIndexError,
    "java.lang.UnsupportedOperationException": JavaUnsupportedOperationError,
    "java.lang.NullPointerException": JavaNullPointerError,
    "java.io.IOException": JavaIOError,
}

# Messages that tell one OutOfMemoryError from another (JavaCPP's Pointer.deallocator and NIO Bits).
_JAVACPP_OOM = re.compile(r"maxBytes|maxPhysicalBytes|Physical memory usage is too high|Cannot allocate new \w*Pointer")
_DIRECT_OOM = re.compile(r"Direct buffer memory|Cannot reserve .* direct buffer memory")
_METASPACE_OOM = re.compile(r"Metaspace|Compressed class space")
_WORKSPACE_SCOPE = re.compile(r"leaked workspace pointer|no longer open|was closed")


def python_class_for(java_classes: list[str], message: str) -> type[JavaError]:
    """Pick the Python class for a Java exception given its class chain (thrown class first)."""
    for name in java_classes:
        cls = EXCEPTION_TABLE.get(name)
        if cls is None:
            continue
        if cls is JavaOutOfMemoryError:
            if _JAVACPP_OOM.search(message):
                return JavaCppOutOfMemoryError
            if _DIRECT_OOM.search(message):
                return DirectBufferOutOfMemoryError
            if _METASPACE_OOM.search(message):
                return MetaspaceOutOfMemoryError
        if cls is JavaIllegalStateError and _WORKSPACE_SCOPE.search(message):
            return WorkspaceScopeError
        return cls
    return JavaError


def _stacktrace(throwable) -> str:
    import jpype  # noqa: PLC0415  (needs a started JVM)

    writer = jpype.JClass("java.io.StringWriter")()
    throwable.printStackTrace(jpype.JClass("java.io.PrintWriter")(writer))
    return str(writer.toString())


def _class_chain(throwable) -> list[str]:
    chain = []
    cls = throwable.getClass()
    while cls is not None:
        chain.append(str(cls.getName()))
        cls = cls.getSuperclass()
    return chain


def translate(throwable) -> JavaError:
    """A Python exception for a Java Throwable (JPype JException). Looks through wrapping
    RuntimeExceptions to an OutOfMemoryError cause, since ND4J often wraps allocation failures."""
    root = throwable
    candidate = throwable
    while candidate is not None:
        if "java.lang.OutOfMemoryError" in _class_chain(candidate):
            root = candidate
            break
        candidate = candidate.getCause()
    message = str(root.getMessage()) if root.getMessage() is not None else ""
    chain = _class_chain(root)
    cls = python_class_for(chain, message)
    if cls is WorkspaceScopeError:
        message = f"{message}; {WorkspaceScopeError.fix}"
    return cls(message, java_class=chain[0], java_stacktrace=_stacktrace(throwable))


# Python exceptions raised inside Python code that Java called back (e.g. a batch source on
# DL4J's prefetch thread) travel through Java as org.pyd4j.PythonException carrying an id;
# java_errors() raises the original object again in the Python caller.
_python_exceptions: dict[int, BaseException] = {}
_python_exceptions_lock = threading.Lock()
_python_exception_ids = itertools.count(1)
_MAX_KEPT = 64  # failures nobody re-raises (the Java caller was not Python) are dropped oldest first


def remember_python_exception(exc: BaseException) -> int:
    """Keep `exc` under a new id, for the Java exception that carries it to its Python caller."""
    with _python_exceptions_lock:
        key = next(_python_exception_ids)
        _python_exceptions[key] = exc
        while len(_python_exceptions) > _MAX_KEPT:
            _python_exceptions.pop(next(iter(_python_exceptions)))
        return key


def original_python_exception(throwable) -> BaseException | None:
    """The Python exception a Java exception carries (anywhere in its cause chain), or None."""
    candidate = throwable
    while candidate is not None:
        if "org.pyd4j.PythonException" in _class_chain(candidate):
            with _python_exceptions_lock:
                return _python_exceptions.pop(int(candidate.getId()), None)
        cause = candidate.getCause()
        candidate = None if cause is None or cause.equals(candidate) else cause
    return None


@contextlib.contextmanager
def java_errors() -> Iterator[None]:
    """Run Java calls; a Java exception leaves as the matching Python exception, or as the
    original Python exception when Java was only carrying one back from a Python callback."""
    import jpype  # noqa: PLC0415

    try:
        yield
    except jpype.JException as exc:
        original = original_python_exception(exc)
        if original is not None:
            raise original from None
        raise translate(exc) from None
