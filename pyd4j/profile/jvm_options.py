"""What every reader of a job's command shares: the memory flags pyd4j tune owns, and the error of a
command that cannot start a job (pyd4j.profile.command reads java commands, pyd4j.profile.spark_submit
spark-submit's)."""

from __future__ import annotations

# Memory flags pyd4j tune owns: dropped from the user's command when recommended ones are added.
MEMORY_FLAG_PREFIXES = ("-Xmx", "-Xms", "-XX:MaxDirectMemorySize=", "-Dorg.bytedeco.javacpp.maxbytes=",
                        "-Dorg.bytedeco.javacpp.maxphysicalbytes=", "-XX:MaxRAMPercentage=", "-XX:MaxNodeLimit=")


class JobCommandError(ValueError):
    """The command given to profile/tune cannot start a job (no program, no main class, ...)."""
