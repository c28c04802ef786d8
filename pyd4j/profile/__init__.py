"""Profile existing DL4J jobs: run them under pyd4j's Java agent, keep the timeline, diagnose
OOMs, leaks, GC pressure and workspace spills, write reports, and tune JVM flags by re-running.

    from pyd4j.profile import profile_job, diagnose, write_report
    run = profile_job(["java", "-Xmx2g", "-cp", "job.jar", "com.acme.Train"])
    for finding in diagnose(run.timeline): print(finding.title, finding.fix)
"""

from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.finding import Finding
from pyd4j.profile.launch import JobRun, profile_job
from pyd4j.profile.session import session
from pyd4j.profile.timeline import Timeline

__all__ = ["Finding", "JobRun", "Timeline", "diagnose", "profile_job", "session"]
