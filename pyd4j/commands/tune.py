"""`pyd4j tune -- <job command>`: profile, recommend flags from measured peaks, verify by re-running;
every run ends at its measurement window (`--window`, auto by default)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pyd4j.commands import _params as params
from pyd4j.commands._tune_output import finish, report, stopped_exit


class WindowParam(click.ParamType):
    """--window: auto, full, N iterations, or a time of training (pyd4j.profile.window.parse_window)."""

    name = "window"

    def convert(self, value, param, ctx):
        from pyd4j.profile.window import WindowError, WindowSpec, parse_window  # noqa: PLC0415

        if isinstance(value, WindowSpec):
            return value
        try:
            return parse_window(value)
        except WindowError as err:
            self.fail(str(err), param, ctx)


@click.command("tune", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=params.OutputDir(agent_safe=True), default=None,
              help="directory for both runs (new or empty)")
@click.option("--interval", "interval_ms", type=params.INTERVAL_MS, default=100, show_default=True, help="sampling interval, ms")
@click.option("--total", default=None, type=params.SIZE,
              help="memory budget for the whole process, e.g. 8g (default: cgroup limit or RAM)")
@click.option("--headroom", type=params.HEADROOM, default=0.15, show_default=True, help="fraction added over measured needs")
@click.option("--no-verify", is_flag=True, help="skip the second run")
@click.option("--timeout", "timeout_s", type=params.SECONDS, default=None,
              help="stop each run after this many seconds (a stop as asked: never counted as a failure)")
@click.option("--window", "window", type=WindowParam(), default="auto", show_default=True,
              help="each run's measurement window: auto (until the leak verdicts are decided and the memory is "
                   "flat, or the speed is steady), full (the whole job), N iterations (2000) or a time of training "
                   "(90s, 5m); the agent ends the job there, cleanly")
@click.option("--verify-full", is_flag=True,
              help="the verifying re-run runs the whole job (the first run keeps its window)")
@click.option("--from", "from_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="recommend from a `pyd4j profile` run (its run directory), without starting the job")
@click.option("--repeat", type=params.Whole(1, 50, example="--repeat 3"), default=1, show_default=True,
              help="runs per side for the before/after throughput (median, min-max); the flags come from the first run")
@click.option("--plan", "plan_policy", type=click.Choice(["superneurons", "liveness", "recompute_in_memory"]),
              help="run the job again with its network under a pyd4j plan (planned training, same flags) instead "
              "of with new flags: before/after shows what the plan saves. superneurons: the smallest plan the "
              "trainer can run; or one policy's minimum-memory plan")
@click.option("--speed", is_flag=True, help="tune for speed instead of memory: try thread, ND4J GC, heap, workspace, "
              "prefetch and nd4j-native build settings the job's code does not see, keep only what an alternated A/B proves faster (exit 3: no verified change)")
@click.option("--max-runs", type=params.Whole(4, 50, example="--max-runs 8",
                                             why="4 runs a side are the fewest with which a 95% interval can exclude 1"),
              default=8, show_default=True,
              help="with --speed: the most runs per side of each A/B (it stops earlier once its 95% interval excludes 1, "
                   "or once more runs cannot make the change worth keeping)")
@click.option("--budget-runs", type=params.Whole(1, 10000, example="--budget-runs 40"), default=None,
              help="with --speed: the most runs after the probe, all A/Bs together")
@click.option("--budget-minutes", type=params.Real(0, 1e5, example="--budget-minutes 9", low_open=True), default=9.0,
              show_default=True, help="with --speed: the most minutes the speed tune spends, probe included")
@click.option("--memory", "and_memory", is_flag=True,
              help="with --speed: the memory tune first (its flags verified by a re-run), then the speed tune with "
              "those flags on every run of its A/Bs; one document with both")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.argument("job", nargs=-1, type=click.UNPROCESSED)
def command(out_dir, interval_ms, total, headroom, no_verify, timeout_s, repeat, as_json, job, plan_policy=None,
            speed=False, max_runs=8, and_memory=False, window="auto", verify_full=False, from_dir=None,
            budget_runs=None, budget_minutes=9.0) -> None:
    """Run the job, compute -Xmx / MaxDirectMemorySize / JavaCPP limits from what it used, run it
    again with them and print before/after.

    \b
    pyd4j tune -- java -cp job.jar com.acme.Train
    pyd4j tune -- mvn -q exec:java -Dexec.mainClass=com.acme.Train
    pyd4j tune --window 5m --verify-full -- java -cp job.jar com.acme.Train
    pyd4j tune --from runs/Train-20261207-101500
    pyd4j tune --plan superneurons -- java -cp job.jar com.acme.Train
    pyd4j tune --speed -- java -cp job.jar com.acme.Train
    pyd4j tune --speed --memory -- java -cp job.jar com.acme.Train

    The job is any command that starts JVMs (java, a shell command, mvn, gradle, spark-submit);
    the recommended flags reach its JVMs through JAVA_TOOL_OPTIONS (on the command line for a
    plain `java` command, replacing the job's own memory flags). A spark-submit job on a cluster gets
    them as Spark settings; with --speed, each change reaches its executors as spark.executorEnv.* and
    spark.executor.extraJavaOptions, and its speed is the executors' sum.

    Every run ends at its measurement window (--window; a spark-submit job runs whole): a job of hours
    is tuned in minutes. Flags from a windowed run are sized for the whole job only when its leak
    verdicts say no leak and its memory is flat; otherwise tune says what it could not rule out and
    keeps each limit at what the job ran with. A windowed re-run verifies the flags for its window
    (--verify-full: for the whole job). A run ended at its window or at --timeout is never counted as
    failed. Ctrl-C or SIGTERM ends the job and everything it started and reports the partial tune
    (with --json, one document with "partial": true) (exit 130 / 143).

    \b
    Exit status:
      0  verified: the re-run with the recommended flags finished cleanly, or ended at its window
         or --timeout having trained at least what the flags were sized from (or, with --no-verify
         or --from, recommended from a run whose memory is shown to hold for the whole job)
      1  nothing to tune: the first run recorded no measurements, or died before its
         first iteration for a reason other than memory (a wrong class path or main class)
      2  bad arguments
      3  not verified: the re-run finished but a run shows a problem (a leak in either
         run, GC pressure, a limit within 5%, no training iteration, or too little
         measured to rule a leak out, or a first run whose window did not show the memory
         flat), or with --plan: the plan was not applied (the reason is printed; the job was
         ended rather than trained unplanned); with --speed: no verified change (no change was
         proved faster by the A/B; nothing is recommended); with --speed --memory: the memory
         tune's code when it did not verify its flags (the speed tune is then not run), else
         the speed tune's
      4  re-run failed: the re-run with the recommended flags failed (out of memory or a
         crash), after new recommendations read from its errors: 3 re-runs at most
    """
    from pyd4j.commands._tune_speed import memory_first, speed_tune  # noqa: PLC0415
    from pyd4j.profile.command import JobCommandError  # noqa: PLC0415

    ctx = click.get_current_context()
    given = lambda name: ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT  # noqa: E731
    if from_dir is not None:
        _tune_from(from_dir, job, out_dir, total, headroom, as_json,
                   [o for o, n in (("--speed", "speed"), ("--plan", "plan_policy"), ("--repeat", "repeat"),
                                   ("--no-verify", "no_verify"), ("--window", "window"), ("--verify-full", "verify_full"),
                                   ("--timeout", "timeout_s"), ("--memory", "and_memory")) if given(n)])
    # Bad arguments are refused here, before the job runs (a run can take hours).
    try:
        params.job_command(job)
    except JobCommandError as err:
        raise click.UsageError(str(err)) from None
    budget = [o for o, n in (("--budget-runs", "budget_runs"), ("--budget-minutes", "budget_minutes")) if given(n)]
    _refuse_mixed_options(speed, and_memory, budget, no_verify, verify_full, plan_policy, repeat, total)
    if speed:
        memory_doc = memory_first(list(job), out_dir, interval_ms, total, headroom, timeout_s, as_json, window,
                                  verify_full) if and_memory else None
        speed_tune(list(job), out_dir, interval_ms, timeout_s, max_runs, as_json, memory_doc, window,
                   budget_runs, budget_minutes)
    _memory_tune(list(job), out_dir, interval_ms, total, headroom, no_verify, timeout_s, repeat, plan_policy,
                 window, verify_full, as_json)


def _refuse_mixed_options(speed: bool, and_memory: bool, budget: list[str], no_verify: bool, verify_full: bool,
                          plan_policy, repeat: int, total) -> None:
    """Options of the speed tune given to the memory tune, or the other way round, refused with which is which."""
    if and_memory and not speed:
        raise click.UsageError("--memory goes with --speed (the memory tune and then the speed tune); "
                               "`pyd4j tune` without --speed is the memory tune alone")
    if budget and not speed:
        raise click.UsageError(f"{', '.join(budget)} belong to --speed (the runs its A/Bs may spend); the memory tune "
                               f"makes two runs, each ended at its --window")
    if verify_full and no_verify:
        raise click.UsageError("--verify-full asks for a verifying re-run of the whole job, --no-verify for none: give one")
    if not speed:
        return
    given_memory = [o for o, v in (("--plan", plan_policy), ("--no-verify", no_verify), ("--repeat", repeat != 1),
                                   ("--total", total and not and_memory), ("--verify-full", verify_full and not and_memory)) if v]
    if given_memory:
        raise click.UsageError(f"{', '.join(given_memory)} belong to the memory tune; --speed runs its own A/B "
                               f"(--max-runs): run `pyd4j tune` without --speed for memory flags"
                               + ("" if and_memory else ", or add --memory for --total"))


def _memory_tune(job: list[str], out_dir, interval_ms: int, total, headroom: float, no_verify: bool, timeout_s,
                 repeat: int, plan_policy, window, verify_full: bool, as_json: bool) -> None:
    """The memory tune (or `--plan`): its document printed, pyd4j exits with its code."""
    from pyd4j.memory.flags import BudgetError  # noqa: PLC0415
    from pyd4j.output import fail  # noqa: PLC0415
    from pyd4j.profile.command import JobCommandError  # noqa: PLC0415
    from pyd4j.profile.signals import Stopped, stop_on_signals  # noqa: PLC0415
    from pyd4j.profile.tune import EXIT_ERROR, JobFailedError, tune_job  # noqa: PLC0415

    with stop_on_signals():
        try:
            doc = tune_job(job, out_dir, interval_ms=interval_ms, total=total, headroom=headroom,
                           verify=not no_verify, timeout_s=timeout_s, repeat=repeat, plan_policy=plan_policy,
                           window=window, verify_full=verify_full)
        except JobCommandError as err:
            raise click.UsageError(str(err)) from None
        except BudgetError as err:
            raise click.ClickException(str(err)) from None
        except JobFailedError as err:
            report(err.doc, "before")
            fail(str(err), as_json, code=EXIT_ERROR, **err.doc)
        except Stopped as err:
            stopped_exit(err, job, as_json, "the job and everything it started were ended; the partial tune is reported")
        finish(doc, as_json)
    sys.exit(doc["exit_code"])


def _tune_from(from_dir, job, out_dir, total, headroom: float, as_json: bool, given: list[str]) -> None:
    """`tune --from RUN_DIR`: the recommendation from a run that already happened; exits with its code."""
    from pyd4j.memory.flags import BudgetError  # noqa: PLC0415
    from pyd4j.output import fail  # noqa: PLC0415
    from pyd4j.profile.tune import EXIT_ERROR, JobFailedError  # noqa: PLC0415
    from pyd4j.profile.tune_from import NotARunError, tune_from  # noqa: PLC0415

    if job:
        raise click.UsageError(f"give either --from RUN_DIR (a run that already happened) or a job command after --, "
                               f"not both (got --from {from_dir} and {' '.join(job)[:80]})")
    if given:
        raise click.UsageError(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} runs of the job; --from {from_dir} "
                               f"starts none: leave {'it' if len(given) == 1 else 'them'} out, "
                               f"or tune the job itself with `pyd4j tune -- <job command>`")
    try:
        doc = tune_from(from_dir, out_dir, total=total, headroom=headroom)
    except NotARunError as err:
        raise click.UsageError(str(err)) from None
    except BudgetError as err:
        raise click.ClickException(str(err)) from None
    except JobFailedError as err:
        fail(str(err), as_json, code=EXIT_ERROR, **err.doc)
    finish(doc, as_json)
    sys.exit(doc["exit_code"])
