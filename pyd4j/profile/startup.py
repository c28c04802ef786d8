"""Why a job never started: the `java` launcher's own error lines in the job's stderr (a wrong
main class, a missing jar, an unknown option), each turned into what went wrong and the fix, so
`pyd4j profile` says "main class com.acme.Trian not found" rather than "exited with code 1"; and the
last lines of the job's stderr, for a job that died before it reached ND4J."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StartupError:
    what: str      # one line: what the launcher refused
    fix: str
    line: str      # the launcher's own words, as evidence


# (pattern on one stderr line, what, fix); {0} is the pattern's first group.
_LAUNCHER_ERRORS = (
    (re.compile(r"Error: Could not find or load main class (\S+)"),
     "main class {0} not found (the JVM could not load it)",
     "check the class name (package included, e.g. com.acme.Train) and that -cp / --class-path holds the jar "
     "or directory with it; with -cp 'lib/*' quote the * so the shell does not expand it"),
    (re.compile(r"Error: Unable to access jarfile (\S+)"),
     "jar {0} not found or not readable",
     "give the path of the job's jar after -jar (relative to the directory pyd4j runs in)"),
    (re.compile(r"no main manifest attribute, in (\S+)"),
     "{0} has no Main-Class in its manifest",
     "run it with -cp {0} com.acme.Train (naming the class), or build the jar with a Main-Class"),
    (re.compile(r"Error: Invalid or corrupt jarfile (\S+)"),
     "{0} is not a valid jar",
     "rebuild the jar, or give the right file after -jar"),
    (re.compile(r"Unrecognized option: (\S+)"),
     "the JVM does not know the option {0}",
     "fix or remove {0} (JVM options go before the main class, the job's own arguments after it)"),
    (re.compile(r"Invalid maximum heap size: (\S+)"),
     "invalid heap size {0}",
     "write -Xmx with a unit, e.g. -Xmx4g"),
    (re.compile(r"Initial heap size set to a larger value than the maximum heap size"),
     "-Xms is larger than -Xmx",
     "lower -Xms or raise -Xmx; options from JAVA_TOOL_OPTIONS and from the JVM's command line both count, "
     "the command line's last"),
    (re.compile(r"Error occurred during initialization of (?:boot layer|VM)"),
     "the JVM failed to initialise",
     "read the lines after this one in stderr.log: a bad option, module setting or too little memory for -Xms"),
    (re.compile(r"Error: LinkageError occurred while loading main class (\S+)"),
     "main class {0} could not be linked (built for a newer Java, or a broken class path)",
     "run it with the Java it was built for (JAVA_HOME), or rebuild it for this one"),
)


def startup_error(stderr: str) -> StartupError | None:
    """The most specific launcher error in a job's stderr text (the table's order), or None."""
    lines = stderr.splitlines()
    for pattern, what, fix in _LAUNCHER_ERRORS:
        for line in lines:
            match = pattern.search(line)
            if match:
                args = match.groups() or ("",)
                return StartupError(what.format(*args), fix.format(*args), line.strip())
    return None


def startup_error_in(run_dir: Path) -> StartupError | None:
    """The launcher error in a run directory's stderr.log, if any."""
    try:
        return startup_error((run_dir / "stderr.log").read_text(errors="replace"))
    except OSError:
        return None


_AGENT_REFUSED = re.compile(r"\[pyd4j agent\] profiling agent not started \((.*)\); the job runs unprofiled")


def agent_refusal_in(run_dir: Path) -> str | None:
    """Why the profiling agent refused to start (its own words: a bad -Dpyd4j.agent= option
    value), from the job's stderr.log, or None."""
    try:
        text = (run_dir / "stderr.log").read_text(errors="replace")
    except OSError:
        return None
    match = _AGENT_REFUSED.search(text)
    if match is None:
        return None
    reason = match.group(1)
    for prefix in ("java.lang.IllegalArgumentException: ", "java.lang.NumberFormatException: "):
        reason = reason.removeprefix(prefix)
    return reason


def stderr_tail(run_dir: Path, lines: int = 3) -> list[str]:
    """The job's last few stderr lines (stack frames and the JVM's "Picked up JAVA_TOOL_OPTIONS" echo of
    the agent's option left out): why a job that never reached ND4J died."""
    stderr = run_dir / "stderr.log"
    if not stderr.exists():
        return []
    text = [ln.strip() for ln in stderr.read_text(errors="replace").splitlines()]
    return [ln for ln in text if ln and not ln.startswith(("at ", "Picked up "))][-lines:]
