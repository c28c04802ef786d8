"""Reading and rewriting a user's `java ...` command line: where the JVM options end and the
main class (or -jar / -m) begins, and which memory flags it already sets."""

from __future__ import annotations

from dataclasses import dataclass

from pyd4j.jvm import find_java

# JVM options that take their value as the next argument.
_WITH_VALUE = {"-cp", "-classpath", "--class-path", "-p", "--module-path", "--upgrade-module-path",
               "--add-modules", "--add-opens", "--add-exports", "--add-reads", "--limit-modules",
               "--patch-module", "--enable-native-access"}
# Memory flags pyd4j tune owns: dropped from the user's command when recommended ones are added.
MEMORY_FLAG_PREFIXES = ("-Xmx", "-Xms", "-XX:MaxDirectMemorySize=", "-Dorg.bytedeco.javacpp.maxbytes=",
                        "-Dorg.bytedeco.javacpp.maxphysicalbytes=", "-XX:MaxRAMPercentage=")


class JobCommandError(ValueError):
    """The command given to profile/tune is not a `java ... Main` command line."""


@dataclass(frozen=True)
class JavaCommand:
    java: str
    jvm_options: tuple[str, ...]
    main: tuple[str, ...]  # main class (or -jar X / -m mod) and the job's own arguments

    @classmethod
    def parse(cls, argv: list[str] | tuple[str, ...]) -> "JavaCommand":
        """Split `java [options] Main args...`; raises JobCommandError naming what is missing."""
        if not argv:
            raise JobCommandError("no job command: write it after `--`, e.g. `-- java -cp job.jar com.acme.Train`")
        java = argv[0]
        if not java.endswith("java"):
            raise JobCommandError(
                f"the job command must start with `java` (got {java!r}); "
                f"write e.g. `-- java -Xmx2g -cp job.jar com.acme.Train`"
            )
        if java == "java":
            java = str(find_java().java)  # JAVA_HOME first, as for every JVM pyd4j starts
        options: list[str] = []
        i = 1
        while i < len(argv):
            arg = argv[i]
            if arg in ("-jar", "-m", "--module"):
                return cls(java, tuple(options), tuple(argv[i:]))
            if not arg.startswith("-"):
                return cls(java, tuple(options), tuple(argv[i:]))
            options.append(arg)
            if arg in _WITH_VALUE and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
            i += 1
        raise JobCommandError(
            f"no main class in {' '.join(argv)!r}: add the class to run (or -jar job.jar) after the JVM options"
        )

    def argv(self, extra_options: list[str] | tuple[str, ...] = (), drop_memory_flags: bool = False) -> list[str]:
        """The command line, with extra JVM options placed before the user's own (so the user's
        win) unless drop_memory_flags removes the user's memory flags first."""
        own = [o for o in self.jvm_options if not (drop_memory_flags and o.startswith(MEMORY_FLAG_PREFIXES))]
        return [self.java, *extra_options, *own, *self.main]

    def memory_flags(self) -> list[str]:
        """The memory flags the user's command sets."""
        return [o for o in self.jvm_options if o.startswith(MEMORY_FLAG_PREFIXES)]

    @property
    def title(self) -> str:
        """Main class or jar: how the job is named in reports."""
        if self.main and self.main[0] in ("-jar", "-m", "--module") and len(self.main) > 1:
            return self.main[1]
        return self.main[0] if self.main else "job"
