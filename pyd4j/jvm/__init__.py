"""JVM lifecycle: find Java, the classpath from the Maven build, the in-process JVM (JPype),
child JVMs, and Java exceptions as Python ones.

    import pyd4j.jvm
    pyd4j.jvm.start(heap_max="2g", javacpp_maxbytes="4g")
"""

from pyd4j.jvm.classpath import ClasspathError, classpath, examples_jar
from pyd4j.jvm.core import JvmInfo, JvmRestartError, info, is_started, java_command, start
from pyd4j.jvm.errors import (
    DirectBufferOutOfMemoryError,
    JavaCppOutOfMemoryError,
    JavaError,
    JavaOutOfMemoryError,
    java_errors,
    translate,
)
from pyd4j.jvm.java import JavaInstall, JavaNotFoundError, find_java
from pyd4j.jvm.options import JvmOptionError, JvmOptions

__all__ = [
    "ClasspathError", "DirectBufferOutOfMemoryError", "JavaCppOutOfMemoryError", "JavaError",
    "JavaInstall", "JavaNotFoundError", "JavaOutOfMemoryError", "JvmInfo", "JvmOptionError",
    "JvmOptions", "JvmRestartError", "classpath", "examples_jar", "find_java", "info", "is_started",
    "java_command", "java_errors", "start", "translate", "Gateway", "GatewayError",
]


def __getattr__(name: str):
    """`pyd4j.jvm.Gateway` without importing numpy and Py4J for every `import pyd4j.jvm`."""
    if name in ("Gateway", "GatewayError"):
        from pyd4j.jvm import gateway  # noqa: PLC0415

        return getattr(gateway, name)
    raise AttributeError(f"module 'pyd4j.jvm' has no attribute {name!r}")
