"""JVM options for ND4J: heap, NIO direct memory, JavaCPP off-heap limits, system properties.

Options are fixed when a JVM starts, so they are a frozen value that can be compared.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from pyd4j.units import SizeError, jvm_size, parse_bytes

_PROPERTY_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


class JvmOptionError(ValueError):
    """An option the JVM would refuse; the message names it and the fix."""


@dataclass(frozen=True)
class JvmOptions:
    """What a JVM is started with. Sizes accept '4g', '512m' or bytes.

    heap_max                  -Xmx: Java heap (objects, INDArray wrappers, DL4J configs)
    heap_initial              -Xms
    max_direct_memory         -XX:MaxDirectMemorySize: NIO direct buffers only, not ND4J arrays
    javacpp_maxbytes          -Dorg.bytedeco.javacpp.maxbytes: ND4J's off-heap arrays (default = Xmx)
    javacpp_maxphysicalbytes  -Dorg.bytedeco.javacpp.maxphysicalbytes: whole-process RSS cap JavaCPP checks
    properties                more -Dkey=value
    extra                     any other JVM argument, checked by `java` itself before start
    """

    heap_max: int | None = None
    heap_initial: int | None = None
    max_direct_memory: int | None = None
    javacpp_maxbytes: int | None = None
    javacpp_maxphysicalbytes: int | None = None
    properties: tuple[tuple[str, str], ...] = ()
    extra: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def of(
        cls,
        heap_max: str | int | None = None,
        heap_initial: str | int | None = None,
        max_direct_memory: str | int | None = None,
        javacpp_maxbytes: str | int | None = None,
        javacpp_maxphysicalbytes: str | int | None = None,
        properties: dict[str, str] | None = None,
        extra: list[str] | tuple[str, ...] | None = None,
    ) -> "JvmOptions":
        """Build options from user-friendly values; raises JvmOptionError on a bad one."""
        def size(name: str, value: str | int | None) -> int | None:
            if value is None:
                return None
            try:
                return parse_bytes(value, what=name)
            except SizeError as err:
                raise JvmOptionError(str(err)) from None

        props = []
        for key, value in sorted((properties or {}).items()):
            if not _PROPERTY_NAME.match(key):
                raise JvmOptionError(f"system property name {key!r} is not valid; use e.g. 'org.nd4j.x'")
            props.append((key, str(value)))
        extras = tuple(extra or ())
        for arg in extras:
            if not isinstance(arg, str) or not arg.startswith("-"):
                raise JvmOptionError(f"JVM option {arg!r} must start with '-' (e.g. '-XX:+UseG1GC')")
        options = cls(
            heap_max=size("heap_max", heap_max),
            heap_initial=size("heap_initial", heap_initial),
            max_direct_memory=size("max_direct_memory", max_direct_memory),
            javacpp_maxbytes=size("javacpp_maxbytes", javacpp_maxbytes),
            javacpp_maxphysicalbytes=size("javacpp_maxphysicalbytes", javacpp_maxphysicalbytes),
            properties=tuple(props),
            extra=extras,
        )
        if options.heap_initial and options.heap_max and options.heap_initial > options.heap_max:
            raise JvmOptionError(
                f"heap_initial {jvm_size(options.heap_initial)} is larger than heap_max "
                f"{jvm_size(options.heap_max)}; lower heap_initial or raise heap_max"
            )
        return options

    def args(self) -> list[str]:
        """The JVM command-line arguments these options mean."""
        out = []
        if self.heap_initial is not None:
            out.append(f"-Xms{jvm_size(self.heap_initial)}")
        if self.heap_max is not None:
            out.append(f"-Xmx{jvm_size(self.heap_max)}")
        if self.max_direct_memory is not None:
            out.append(f"-XX:MaxDirectMemorySize={jvm_size(self.max_direct_memory)}")
        if self.javacpp_maxbytes is not None:
            out.append(f"-Dorg.bytedeco.javacpp.maxbytes={self.javacpp_maxbytes}")
        if self.javacpp_maxphysicalbytes is not None:
            out.append(f"-Dorg.bytedeco.javacpp.maxphysicalbytes={self.javacpp_maxphysicalbytes}")
        out.extend(f"-D{k}={v}" for k, v in self.properties)
        out.extend(self.extra)
        return out


def refusal(java: str, args: list[str], env: dict[str, str] | None = None) -> tuple[str, list[str]] | None:
    """What `java` says when it will not start with `args` (its error lines, and the options it names as
    unrecognized), or None when it starts. A throwaway `java ... -version`: nothing of the job runs."""
    if not args:
        return None
    try:
        result = subprocess.run([java, *args, "-version"], capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return f"`{java} ... -version` did not end within 120 s", []
    except OSError as err:
        return f"`{java}` could not be started: {err}", []
    if result.returncode == 0:
        return None
    message = " ".join(line for line in result.stderr.splitlines() if "Error" in line or "Unrecognized" in line or "Invalid" in line)
    named = {_xx_name(n) for n in _UNRECOGNIZED.findall(result.stderr)}
    return message or result.stderr.strip()[-400:], [a for a in args if a.startswith("-XX:") and _xx_name(a[4:]) in named]


_UNRECOGNIZED = re.compile(r"Unrecognized VM option '([^']+)'")   # HotSpot: 'UseFoo' for -XX:+UseFoo, 'Foo=1' for -XX:Foo=1


def _xx_name(option: str) -> str:
    return option.lstrip("+-").split("=")[0]


def check_with_java(java: str, args: list[str]) -> None:
    """Let `java` itself reject a typo ('Unrecognized VM option ...') before we commit to a JVM.

    An in-process JVM that fails to start cannot be started again, so we ask a throwaway one first.
    """
    refused = refusal(java, args)
    if refused is not None:
        raise JvmOptionError(
            f"the JVM rejects the options {args}: {refused[0]}; "
            f"fix the spelling (see `java -X` and `java -XX:+PrintFlagsFinal -version`)"
        )
