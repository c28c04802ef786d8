"""`pyd4j flags`: JVM flags that hold a DL4J network, for java, Maven, Gradle, Spark or Kubernetes.

`--json` keys: ok, flags (list of arguments), environment (variables the job must start with:
glibc's malloc setting the estimate assumes), total_bytes (container limit), breakdown (term -> bytes),
sources (term -> dl4j-report / measured / estimate), reasons (argument -> why), heap_bytes, maxbytes,
maxphysicalbytes, max_direct_bytes, budget_bytes, rendered (the chosen --format). A budget that cannot hold
the network exits 3 with ok=false, needed_bytes, biggest_term and largest_batch.

`--verify -- java ... Main args` runs that Java job with the generated flags (replacing its own memory flags) inside a fresh memory cgroup limited to the generated container limit, and reports
pass/fail (`verify` key in --json: ok, diagnosis kind, memory_exhausted, peak_bytes, exit_code). A
failed job exits 4; a machine without a writable cgroup exits 2 and says why.
"""

from __future__ import annotations

import os

import click

from pyd4j.commands import _params as params
from pyd4j.commands._common import network_options, no_pin_option, print_estimate
from pyd4j.output import emit_json, fail, human_bytes, print_table


@click.command("flags")
@network_options
@click.option("--batch", required=True, type=params.BATCH, help="Minibatch size.")
@click.option("--total", default=None, type=params.SIZE, help="Total memory budget, e.g. 8g (default: cgroup limit, else RAM).")
@click.option("--gpu-mem", default=None, type=params.SIZE, help="GPU memory budget, e.g. 16g (CUDA backend).")
@click.option("--headroom", default=0.15, show_default=True, type=params.HEADROOM, help="Fraction added to estimates.")
@click.option("--format", "fmt", default="args", show_default=True,
              type=click.Choice(["args", "env", "maven", "gradle", "spark", "k8s"]), help="Output format.")
@click.option("--executors", default=None, type=params.COUNT, help="With --format spark: executors in the cluster.")
@click.option("--executor-cores", default=None, type=params.COUNT, help="With --format spark: cores per executor (concurrent tasks).")
@click.option("--worker-memory", default=None, type=params.SIZE,
              help="With --format spark: memory each worker (node) has for its executors, e.g. 16g (default: --total).")
@click.option("--executors-per-worker", default=None, type=params.COUNT, help="With --format spark: executors sharing a worker.")
@click.option("--task-cpus", default=None, type=params.COUNT, help="With --format spark: spark.task.cpus (cores per task).")
@no_pin_option
@click.option("--verify", is_flag=True,
              help="Run the Java job given after -- with these flags inside a container at the generated limit.")
@click.option("--timeout", default=3600.0, show_default=True, type=params.SECONDS, help="With --verify: seconds before the job is killed.")
@click.argument("job", nargs=-1, type=click.UNPROCESSED)
def command(model: str, input_spec: str | None, dtype: str, mode: str, prefetch: int, as_json: bool, batch: int,
            total: int | None, gpu_mem: int | None, headroom: float, fmt: str, executors: int | None,
            executor_cores: int | None, worker_memory: int | None, executors_per_worker: int | None,
            task_cpus: int | None, no_pin: bool, verify: bool, timeout: float, job: tuple[str, ...]) -> None:
    """JVM flags (-Xmx, maxbytes, maxphysicalbytes, ...) that hold a DL4J network, each with its reason."""
    from pyd4j.memory.estimate import estimate  # noqa: PLC0415
    from pyd4j.memory.flags import BudgetError, flags  # noqa: PLC0415

    if job and not verify:
        fail(f"a job command was given ({' '.join(job)[:80]}) without --verify; add --verify to run it", as_json)
    if verify and not job:
        fail("--verify needs the Java job after --, e.g. pyd4j flags ... --verify -- java -cp app.jar Main", as_json)
    shape_options = {"--executors": executors, "--executor-cores": executor_cores, "--worker-memory": worker_memory,
                     "--executors-per-worker": executors_per_worker, "--task-cpus": task_cpus}
    given = [k for k, v in shape_options.items() if v is not None]
    if fmt != "spark" and given:
        fail(f"{', '.join(given)} describe a Spark cluster: add --format spark", as_json)
    if fmt == "spark" and verify:
        fail("--verify runs a plain java job; for Spark, run the job on a cluster with the printed settings", as_json)
    if verify:
        params.job_command(job)
    est = estimate(model, batch, dtype=dtype, mode=mode, input=input_spec, prefetch_queue=prefetch)
    if fmt == "spark":
        _spark(est, executors, executor_cores, worker_memory or total, executors_per_worker, task_cpus, headroom, as_json)
        return
    try:
        fs = flags(est, total=total, headroom=headroom, gpu_mem=gpu_mem, pin_jvm=not no_pin)
    except BudgetError as err:
        fail(str(err), as_json, code=3, needed_bytes=err.needed_bytes, budget_bytes=err.budget_bytes,
             biggest_term=err.biggest_term, largest_batch=err.largest_batch, breakdown=err.breakdown)
        return
    if verify:
        _verify(fs, list(job), timeout, as_json)
        return
    if as_json:
        emit_json({"ok": True, **fs.to_dict(), "rendered": fs.render(fmt)})
        return
    print_estimate(fs.sized)
    print_table("JVM flags", ["flag", "value", "reason"], [(f.name, f.arg, f.reason) for f in fs.flags]
                + [("environment", a, fs.environment_reason) for a in fs.environment_assignments()])
    for note in fs.notes:
        click.echo(note)
    if fs.budget_bytes:
        click.echo(f"budget {human_bytes(fs.budget_bytes)}: uses {human_bytes(fs.total_bytes)}, "
                   f"{human_bytes(fs.budget_bytes - fs.total_bytes)} to spare")
    click.echo("")
    if fmt == "args" and fs.environment:   # the other formats write the environment themselves
        click.echo(f"# in the job's environment: {' '.join(fs.environment_assignments())}")
    click.echo(fs.render(fmt))


def verify_command(fs, job: list[str]) -> list[str]:
    """The job with its own memory flags replaced by the generated ones (the job's arguments untouched)."""
    from pyd4j.profile.command import JavaCommand  # noqa: PLC0415  (the one parser of `java ... Main args`)

    return JavaCommand.parse(job).argv(fs.args(), drop_memory_flags=True)


def _verify(fs, job: list[str], timeout: float, as_json: bool) -> None:
    from pyd4j.memory.container import ContainerError, diagnose, run_limited  # noqa: PLC0415
    from pyd4j.profile.command import JavaCommand, JobCommandError  # noqa: PLC0415

    try:
        own = JavaCommand.parse(job).memory_flags()
        command = verify_command(fs, job)
    except JobCommandError as err:
        fail(str(err), as_json)
        return
    env = {**os.environ, **fs.environment} if fs.environment else None
    _check_jvm_takes(fs, command[0], env, as_json)
    try:
        result = run_limited(command, fs.container_bytes, timeout=timeout, capture=as_json, env=env)
    except ContainerError as err:
        fail(str(err), as_json)
        return
    d = diagnose(result)
    doc = {"ok": d.kind == "ok", **fs.to_dict(), "verify": {"ok": d.kind == "ok", "kind": d.kind,
           "memory_exhausted": d.memory_exhausted, "diagnosis": d.message, "exit_code": result.exit_code,
           "container_limit_bytes": fs.container_bytes, "peak_bytes": result.peak_bytes,
           "seconds": result.seconds, "replaced_job_flags": own}}
    if as_json:
        emit_json(doc)
    else:
        if own:
            click.echo(f"note: the job's own {' '.join(own)} replaced by the generated flags for this check", err=True)
        click.echo(f"{'PASS' if d.kind == 'ok' else 'FAIL'}: {d.message}")
        click.echo(f"flags: {' '.join([*fs.environment_assignments(), *fs.args()])}; container limit "
                   f"{human_bytes(fs.container_bytes)}")
    if d.kind != "ok":
        raise SystemExit(4)


def _check_jvm_takes(fs, java: str, env: dict[str, str] | None, as_json: bool) -> None:
    """Ask the job's JVM whether it starts with the flags before the job runs: a JVM that refuses an option
    (OpenJ9 or a VM without C2 refuse HotSpot's) fails here with the option named and the fix, exit 4."""
    from pyd4j.jvm.options import refusal  # noqa: PLC0415

    refused = refusal(java, fs.args(), env)
    if refused is None:
        return
    message, options = refused
    pinned = [a for a in options if a in fs.pinned_args()]
    if pinned:
        fail(f"the job's JVM ({java}) refuses {' '.join(pinned)}, which these flags pin for HotSpot's server VM "
             f"(C2's node limit, the collector): {message.rstrip('.')}. Rerun with --no-pin: the flags then leave the compiler and "
             f"the collector to the JVM and size for what a long run holds without the node limit",
             as_json, code=4, refused_options=pinned)
    fail(f"the job's JVM ({java}) refuses the generated flags {' '.join(options or fs.args())}: {message}",
         as_json, code=4, refused_options=options)


def _spark(est, executors: int | None, cores: int | None, worker_memory: int | None, per_worker: int | None,
           task_cpus: int | None, headroom: float, as_json: bool) -> None:
    """--format spark: settings for the cluster shape, or a refusal naming what does not fit."""
    from pyd4j.memory.flags import BudgetError, SparkShape, spark_flags  # noqa: PLC0415

    shape = SparkShape(executors=executors or 1, executor_cores=cores or 1, worker_memory=worker_memory,
                       executors_per_worker=per_worker or 1, task_cpus=task_cpus or 1)
    try:
        sf = spark_flags(est, shape, headroom=headroom)
    except BudgetError as err:
        fail(str(err), as_json, code=3, needed_bytes=err.needed_bytes, budget_bytes=err.budget_bytes,
             biggest_term=err.biggest_term, largest_batch=err.largest_batch, breakdown=err.breakdown)
        return
    if as_json:
        emit_json({"ok": True, **sf.to_dict(), "rendered": sf.render()})
        return
    print_estimate(sf.executor_estimate)
    print_table(f"Spark: {shape.executors} executor(s) x {shape.executor_cores} core(s), "
                f"{shape.concurrent_tasks} concurrent task(s) each", ["setting", "value", "reason"], sf.settings())
    click.echo(f"executor container (memory + memoryOverhead): {human_bytes(sf.executor_container_bytes)}")
    click.echo(f"\n{sf.render()}")
