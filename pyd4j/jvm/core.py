"""The in-process JVM (JPype): started once per Python process, with fixed options.

A JVM cannot be restarted or re-configured, so `start()` with the same options is a no-op and
with other options raises JvmRestartError naming both sets. Use spawn, not fork, for child
processes once the JVM is up.

Threads: Java threads JPype attaches for Python threads have no context class loader, and ND4J
reads the context class loader once, in ND4JClassLoading's static initializer, on whichever
thread touches ND4J first; a null there breaks ND4J for the whole process
(ExceptionInInitializerError, then NoClassDefFoundError: Nd4j). `start()` gives the starting
thread the application class loader and initializes ND4JClassLoading on it at once, so the
first ND4J use may come from any thread; `attach()` gives a thread the same loader.

Signals: the JVM takes SIGTERM when it starts (its handler calls System.exit(143) on a Java
thread). Python threads inside Java calls then meet a JVM going down, and JPype aborts the
process (SIGABRT, "Fatal error in exception handling", no Python `finally` run). As soon as the
JVM is up, `start()` gives SIGTERM back to Python: the handler the program had, or one that raises
SystemExit(143) in the main thread, so the program's own clean-up stops the threads that use Java
before the JVM exits. A SIGTERM during `jpype.startJVM` itself still meets the JVM's handler.
"""

from __future__ import annotations

import os
import signal
import threading
import warnings
from dataclasses import dataclass

from pyd4j.jvm.classpath import classpath
from pyd4j.jvm.java import JavaInstall, find_java
from pyd4j.jvm.options import JvmOptions, check_with_java
from pyd4j.malloc import MallocSettingError, fix_in_process


class JvmRestartError(RuntimeError):
    """start() asked for options other than those of the JVM already running in this process."""


@dataclass(frozen=True)
class JvmInfo:
    java: JavaInstall
    options: JvmOptions
    classpath: tuple[str, ...]
    pid: int
    malloc: str = ""   # glibc's setting the memory model assumes, as fixed in this process (pyd4j.malloc)


_lock = threading.Lock()
_info: JvmInfo | None = None


def start(options: JvmOptions | None = None, **option_values) -> JvmInfo:
    """Start the in-process JVM with ND4J on the classpath, or return the one running.

    `start(heap_max="4g", javacpp_maxbytes="8g")` or `start(JvmOptions.of(...))`; see JvmOptions.
    Called with no options after a start, it returns the running JVM whatever its options.
    """
    global _info
    if options is not None and option_values:
        raise TypeError("pass either a JvmOptions or keyword options, not both")
    asked_anything = options is not None or bool(option_values)
    wanted = options if options is not None else JvmOptions.of(**option_values)
    with _lock:
        if _info is not None:
            if asked_anything and wanted != _info.options:
                raise JvmRestartError(
                    "the JVM in this process is already running with options "
                    f"{_info.options.args() or '(defaults)'}, and a JVM cannot restart; "
                    f"asked for {wanted.args() or '(defaults)'}. Start the JVM once with the options "
                    "you need, or run the work in a child process (pyd4j.jvm.gateway)"
                )
            return _info
        import jpype  # noqa: PLC0415  (keep `import pyd4j` light)

        if jpype.isJVMStarted():
            raise JvmRestartError(
                "a JVM was already started in this process by other code (jpype.startJVM); "
                "let pyd4j.jvm.start() start it, so its options and classpath are known"
            )
        java = find_java()
        cp = classpath()
        args = wanted.args()
        check_with_java(str(java.java), args)
        try:   # before the JVM and ND4J allocate: DL4J's arrays in this process as in a job run with pyd4j's flags
            malloc = fix_in_process()
        except MallocSettingError as err:
            warnings.warn(str(err), RuntimeWarning, stacklevel=2)
            malloc = str(err)
        jpype.startJVM(str(java.libjvm), *args, classpath=cp, convertStrings=False, ignoreUnrecognized=False)
        _python_owns_sigterm()
        import jpype.imports  # noqa: F401,PLC0415  (enables `from org.nd4j... import ...`)

        attach()
        try:  # ND4J's class loader, fixed now from this thread's (see the module doc)
            jpype.JClass("org.nd4j.common.config.ND4JClassLoading").getNd4jClassloader()
        except Exception:  # noqa: BLE001  (a classpath without ND4J: nothing to initialize)
            pass
        _info = JvmInfo(java=java, options=wanted, classpath=tuple(cp), pid=os.getpid(), malloc=malloc)
        return _info


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _python_owns_sigterm() -> None:
    """Give SIGTERM back to Python (module doc). Only the main thread may set a handler: a JVM
    started from another thread keeps the JVM's."""
    if threading.current_thread() is not threading.main_thread():
        return
    before = signal.getsignal(signal.SIGTERM)   # Python's own record: the JVM replaced it underneath
    signal.signal(signal.SIGTERM, _exit_on_sigterm if before in (signal.SIG_DFL, None) else before)


def attach() -> None:
    """Give the calling thread's Java side the application class loader if it has none (JPype
    attaches Python threads without one). The JVM must be running."""
    import jpype  # noqa: PLC0415

    thread = jpype.JClass("java.lang.Thread").currentThread()
    if thread.getContextClassLoader() is None:
        thread.setContextClassLoader(jpype.JClass("java.lang.ClassLoader").getSystemClassLoader())


def detach() -> None:
    """Detach the calling Python thread from the JVM (a Python thread that used Java and ends
    would otherwise leave its Java thread behind). Never call it from the thread that started the JVM."""
    import jpype  # noqa: PLC0415

    if jpype.isJVMStarted() and jpype.java.lang.Thread.isAttached():
        jpype.java.lang.Thread.detach()


def is_started() -> bool:
    """Whether pyd4j's in-process JVM is running."""
    return _info is not None


def info() -> JvmInfo:
    """The running JVM; starts one with default options if none runs yet."""
    return _info if _info is not None else start()


def java_command(options: JvmOptions, main_class: str, args: list[str] | None = None,
                 extra_classpath: list[str] | None = None, jvm_args: list[str] | None = None) -> list[str]:
    """The command line for a child JVM on pyd4j's classpath (gateway, profiled jobs, benchmarks)."""
    cp = os.pathsep.join([*(extra_classpath or []), *classpath()])
    return [str(find_java().java), *options.args(), *(jvm_args or []), "-cp", cp, main_class, *(args or [])]
