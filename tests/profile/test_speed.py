"""pyd4j tune --speed's own logic (pyd4j.profile.speed): which changes it tries from a probe's
evidence, and the greedy combination, with a fake job whose speed is a known function of the setup
(fakes isolate our logic; the real job is tests/profile/test_speed_job.py)."""

from __future__ import annotations

import pytest

from pyd4j.profile import ab
from pyd4j.profile.speed import Change, Measured, Probe, Setup, _mkl, _native_build, prefetch_candidate, candidates, greedy, prefetch_depth, \
    tune_speed


def _probe(**nd4j) -> Probe:
    return Probe(10.0, True, "", nd4j={"periodic_gc": False, "max_threads": 2, "cores": 2,
                                       "training_workspace_mode": "ENABLED", **nd4j}, gc_share=0.0, explicit_gc_share=0.0)


def test_candidates_from_evidence():
    # OMP_NUM_THREADS set to the cores and nothing else pointing anywhere: only half the cores is tried
    assert [c.setting for c in candidates(_probe(), {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "passive"}, 2)] \
        == ["threads=1"]
    # unset: both counts are tried (unset lets ND4J and OpenBLAS each choose), and sleeping OpenMP threads
    assert [c.setting for c in candidates(_probe(), {}, 2)] == ["threads=2", "threads=1", "omp_wait_policy"]
    oversub = candidates(_probe(max_threads=8), {"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "8"}, 4)
    assert [c.setting for c in oversub] == ["threads=4", "threads=2", "omp_wait_policy"]
    assert dict(oversub[2].env) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert dict(oversub[0].env) == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}
    p = _probe(periodic_gc=True, gc_window_ms=5, training_workspace_mode="NONE", max_threads=1)
    p.gc_share, p.explicit_gc_share, p.heap_max = 0.33, 0.3, 64 << 20
    got = {c.setting: c for c in candidates(p, {"OMP_NUM_THREADS": "1"}, 1, ram_bytes=8 << 30)}
    # GC time is nearly all System.gc(): the heap is not tried (3% left, under the 5% threshold)
    assert set(got) == {"nd4j.periodic_gc", "workspace_mode", "explicit_gc"}
    assert got["nd4j.periodic_gc"].agent == ("nd4j_periodic_gc=false",)
    p.explicit_gc_share = 0.0
    heap = {c.setting: c for c in candidates(p, {"OMP_NUM_THREADS": "1"}, 1, ram_bytes=8 << 30)}["heap"]
    assert heap.jvm == ("-Xmx256m",) and heap.replaces_memory_flags


AVX512 = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq")
CACHE = "/home/u/.javacpp/cache/nd4j-native-{v}-{c}.jar/org/nd4j/linalg/cpu/nativecpu/bindings/{c}/libjnind4jcpu.so"


def test_nd4j_build_candidate_from_the_library_the_job_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("MAVEN_OPTS", f"-Dmaven.repo.local={tmp_path}")
    monkeypatch.setattr("pyd4j.profile.nd4j_build.JAVA_TARGET", tmp_path / "target")
    jar = tmp_path / "org/nd4j/nd4j-native/1.0.0-M2.1/nd4j-native-1.0.0-M2.1-linux-x86_64-avx512.jar"
    generic = _probe(native_library=CACHE.format(v="1.0.0-M2.1", c="linux-x86_64"))
    # the jar is not at hand: not tried, and the note names the command that fetches it
    change, note = _native_build(generic, AVX512)
    assert change is None and "mvn dependency:get -Dartifact=org.nd4j:nd4j-native:1.0.0-M2.1:jar:linux-x86_64-avx512" in note
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"")
    change, note = _native_build(generic, AVX512)
    assert note is None and (change.before, change.after, change.build) == ("linux-x86_64", "linux-x86_64-avx512",
                                                                            "linux-x86_64-avx512")
    assert change.agent == (f"native_jar={jar}",) and "<classifier>linux-x86_64-avx512</classifier>" in change.maven
    assert [c.setting for c in candidates(generic, {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}, 2,
                                          features=AVX512)] == ["threads=1", "nd4j_build"]
    # a CPU with AVX2 only is offered nothing above it, and this jar is not for it
    assert _native_build(generic, ("avx", "avx2", "fma"))[0] is None
    # already the best build; another backend (no nd4jcpu library); an older release found by its directory
    assert _native_build(_probe(native_library=CACHE.format(v="1.0.0-M2.1", c="linux-x86_64-avx512")), AVX512) == (None, None)
    assert _native_build(_probe(native_library=""), AVX512) == (None, None)
    old = _native_build(_probe(native_library="/tmp/x/linux-x86_64/libjnind4jcpu.so"), AVX512)
    assert old[0] is None and "version" in old[1]


OPENBLAS = "/home/u/.javacpp/cache/openblas-0.3.19-1.5.7-linux-x86_64.jar/org/bytedeco/openblas/linux-x86_64/libopenblas_nolapack.so.0"


def test_mkl_candidate_where_the_job_calls_openblas(tmp_path, monkeypatch):
    monkeypatch.setenv("MAVEN_OPTS", f"-Dmaven.repo.local={tmp_path}")
    probe = _probe(blas="openblas", blas_library=OPENBLAS)
    change, note = _mkl(probe)
    assert change is None and "mvn dependency:get -Dartifact=org.bytedeco:mkl:2022.0-1.5.7:jar:linux-x86_64-redist" in note
    jar = tmp_path / "org/bytedeco/mkl/2022.0-1.5.7/mkl-2022.0-1.5.7-linux-x86_64-redist.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"")
    change, note = _mkl(probe)
    assert note is None and (change.setting, change.before, change.after, change.blas) == ("blas", "OpenBLAS", "MKL 2022.0", "mkl")
    assert change.jvm == ("-Dorg.bytedeco.openblas.load=mkl_rt",) and change.agent == (f"native_jar={jar}",)
    assert "<version>2022.0-1.5.7</version>" in change.maven
    # with a build change too, the agent gets one native_jar option naming both jars
    build = Change("nd4j_build", "linux-x86_64", "linux-x86_64-avx512", "", agent=("native_jar=/r/avx512.jar",))
    opts = Setup((build, change)).jvm_options()
    assert opts[0] == "-Dorg.bytedeco.openblas.load=mkl_rt"
    assert opts[-1] == f"-Dpyd4j.agent=live=0,sites=0,native_jar=/r/avx512.jar:{jar}"
    # already MKL, or no OpenBLAS reported (an older agent, another backend): nothing to try
    assert _mkl(_probe(blas="mkl", blas_library=OPENBLAS)) == (None, None)
    assert _mkl(_probe()) == (None, None)


def _split(data: float, compute: float, **quantiles: float) -> dict:
    total = data + compute
    return {"share": {"data": data / total}, "ms_per_iteration": {"data": data, "forward": compute / 2, "backward": compute / 2,
                                                                  "updater": 0.0, "outside": 0.0},
            "data_ms_quantiles": quantiles}


def test_prefetch_depth_worked_examples():
    # an even loader: two batches, whether it keeps up (3, 30 ms against 30 ms of compute) or not (a loader
    # slower than the step leaves the queue empty whatever its depth)
    assert [prefetch_depth(d, 30.0) for d in (3.0, 30.0, 31.0, 60.0, 1000.0)] == [2, 2, 2, 2, 2]
    # a loader that keeps up on average with slow batches: enough batches to train through the slowest,
    # 1 + ceil(slowest / compute): 130 ms -> 1 + 5; at most 8; a slow batch shorter than the step needs none
    assert prefetch_depth(10.0, 30.0, 130.0) == 6
    assert prefetch_depth(10.0, 30.0, 1000.0) == 8
    assert prefetch_depth(10.0, 30.0, 25.0) == 2
    # ... but not when it is slower than the step on average: nothing refills a deeper queue
    assert prefetch_depth(40.0, 30.0, 200.0) == 2
    assert prefetch_depth(5.0, 0.0) == 8


def test_prefetch_candidate_only_where_data_wait_shows_and_fit_does_not_prefetch():
    p = _probe(max_threads=1)
    p.iterator = {"class": "my.Loader", "async_supported": False, "prefetch": -1, "action": "fit() calls its next()"}
    p.time_split = _split(30.0, 40.0)
    got = {c.setting: c for c in candidates(p, {"OMP_NUM_THREADS": "1"}, 1)}
    assert got["prefetch"].agent == ("prefetch=2",) and "asyncSupported() false" in got["prefetch"].before
    assert "1.75x" in got["prefetch"].why          # (30 + 40) / 40: the most overlap can give
    p.time_split = _split(2.0, 40.0)              # 5% data wait: nothing to hide
    assert "prefetch" not in {c.setting for c in candidates(p, {"OMP_NUM_THREADS": "1"}, 1)}
    assert prefetch_candidate(p) == (None, None)
    # fit() already prefetches it (queue of 2) and the times call for no deeper queue: said, not tried
    p.time_split = _split(30.0, 40.0)
    p.iterator = {"class": "my.Loader", "async_supported": True, "prefetch": -1, "action": "fit() prefetches it (queue of 2)"}
    change, why = prefetch_candidate(p)
    assert change is None and "already prefetches" in why
    # ... training waits in most iterations behind fit()'s queue: a loader slower than the step, not tried
    p.time_split = _split(90.0, 40.0, p50=85.0, p90=120.0)
    change, why = prefetch_candidate(p)
    assert change is None and "slower than the training step" in why
    # ... it waits in a few (p50 0, p90 120 ms against 40 ms of compute): 2 + ceil(120 / 40) batches are tried
    p.time_split = _split(15.0, 40.0, p50=0.0, p90=120.0, p99=130.0)
    change, _ = prefetch_candidate(p)
    assert change.agent == ("prefetch=5",) and "a queue of 5" in change.why
    # not fit()'s: an uneven loader that keeps up on average gets the depth of its slowest batches
    p.iterator = {"class": "my.Loader", "async_supported": False, "prefetch": -1, "action": "fit() calls its next()"}
    p.time_split = _split(15.0, 40.0, p50=5.0, p90=125.0, p99=130.0)
    change, _ = prefetch_candidate(p)
    assert change.agent == ("prefetch=5",) and "125.0 ms or more (p90)" in change.why
    # a one-off slow batch (a collection, the JIT: the p99 alone) is not a pattern a queue is sized for
    p.time_split = _split(15.0, 40.0, p50=5.0, p90=6.0, p99=300.0)
    change, _ = prefetch_candidate(p)
    assert change.agent == ("prefetch=2",)
    # the agent wrapped it already (the job was started with prefetch=): nothing more to try
    p.iterator = {"class": "my.Loader", "async_supported": False, "prefetch": 4, "action": "wrapped by the agent"}
    change, why = prefetch_candidate(p)
    assert change is None and "already prefetched" in why


def test_setup_launch_form():
    s = Setup().plus(Change("threads=1", "unset", "OMP_NUM_THREADS=1", "", env=(("OMP_NUM_THREADS", "1"),)))
    s = s.plus(Change("workspace_mode", "NONE", "ENABLED", "", agent=("workspace_mode=ENABLED",)))
    assert s.env() == {"OMP_NUM_THREADS": "1"}
    assert s.jvm_options() == ["-Dpyd4j.agent=live=0,sites=0,workspace_mode=ENABLED"]
    assert not s.drop_memory_flags()


# A fake job: speed = 10 x the product of the factors of the changes in the setup, with a small
# deterministic jitter (the same sequence for every setup) so that the A/B sees spread; "boom" breaks the job.
FACTORS = {"threads=1": 3.0, "explicit_gc": 1.5, "neutral": 1.0, "worse": 0.7}


def _fake_compare(log):
    jitters: dict[str, object] = {}

    def speed(setup: Setup) -> float:
        jitter = jitters.setdefault(setup.label(), iter([1.0, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998, 1.003] * 20))
        v = 10.0
        for c in setup.changes:
            if c.setting == "boom":
                raise ab.RunFailed("exit code 1")
            v *= FACTORS[c.setting]
        return v * next(jitter)

    def compare(a: Setup, b: Setup) -> ab.Comparison:
        log.append((a.label(), b.label()))
        return ab.compare(lambda: speed(a), lambda: speed(b), min_runs=4, max_runs=6)
    return compare


def _change(name):
    return Change(name, "x", name, "fake")


def test_fake_greedy_keeps_proved_changes_best_first_each_verified_in_combination():
    log = []
    kept, rows, trials, first = greedy([_change(n) for n in ("neutral", "explicit_gc", "worse", "threads=1", "boom")],
                                       _fake_compare(log))
    assert [c.setting for c in kept.changes] == ["threads=1", "explicit_gc"]  # best first
    verdicts = {t["setting"]: t["verdict"] for t in trials if t["on_top_of"] == "the job as it is"}
    assert verdicts == {"neutral": "same", "explicit_gc": "faster", "worse": "slower", "threads=1": "faster",
                        "boom": "broken"}
    # the second kept change was compared again on top of the first
    assert ("threads=1=threads=1", "threads=1=threads=1 + explicit_gc=explicit_gc") in log
    assert rows[0]["ratio"] == pytest.approx(3.0, rel=0.02) and rows[1]["ratio"] == pytest.approx(1.5, rel=0.02)
    assert first.verdict == "faster"


def test_fake_greedy_with_nothing_proved_keeps_nothing():
    kept, rows, trials, first = greedy([_change("neutral"), _change("worse")], _fake_compare([]))
    assert kept.changes == () and rows == [] and first is None


def test_fake_job_tune_speed_document_and_exit_codes(tmp_path):
    """tune_speed end to end on a fake runner: threads unset is slow, OMP_NUM_THREADS=1 three times faster."""
    def runner(setup: Setup, side: str) -> Measured:
        env = setup.env()
        v = 30.0 if env.get("OMP_NUM_THREADS") == "1" else 10.0
        return Measured(v * (1 + 0.001 * len(side)), True, "")

    job = ["java", "-cp", "x.jar", "Main"]
    doc = tune_speed(job, tmp_path / "t", runner=runner, env={}, n_cores=2, ram_bytes=8 << 30)
    s = doc["speed"]
    assert doc["exit_code"] == 0 and s["verdict"] == "verified"
    assert [c["setting"] for c in s["changes"]] == ["threads=1"]
    assert s["paste"]["environment"] == {"OMP_NUM_THREADS": "1"}
    assert s["ratio"] == pytest.approx(3.0, rel=0.01) and s["interval"][0] > 1
    assert s["extra_runs"] == s["runs"] - 1

    same = tune_speed(job, tmp_path / "u", runner=lambda setup, side: Measured(10.0, True, ""), env={}, n_cores=2,
                      ram_bytes=8 << 30)
    assert same["exit_code"] == 3 and same["speed"]["verdict"] == "no verified change" and same["speed"]["changes"] == []

    dead = tune_speed(job, tmp_path / "v", runner=lambda setup, side: Measured(None, False, "exit code 1"), env={},
                      n_cores=2, ram_bytes=8 << 30)
    assert dead["exit_code"] == 1 and "did not train" in dead["error"]


def test_spark_cluster_settings_are_what_a_user_pastes(tmp_path):
    """Which spark-submit jobs are tuned through their executors' settings, and the settings a setup becomes."""
    from pyd4j.profile import spark_speed

    app = ["--class", "com.acme.Train", "app.jar", "--epochs", "1"]
    assert spark_speed.cluster_submit(["spark-submit", "--master", "local[2]", *app]) is None   # the driver trains
    assert spark_speed.cluster_submit(["java", "-cp", "app.jar", "com.acme.Train"]) is None
    props = tmp_path / "app.properties"
    props.write_text("spark.master spark://10.0.0.5:7077\nspark.executorEnv.OMP_NUM_THREADS 8\n")
    for job, master in ((["spark-submit", "--master", "yarn", "--conf", "spark.executorEnv.OMP_NUM_THREADS=8", *app], "yarn"),
                        (["spark-submit", "--properties-file", str(props), *app], "spark://10.0.0.5:7077")):
        submit = spark_speed.cluster_submit(job)
        assert submit is not None and submit.master == master
        assert spark_speed.executor_env(submit) == {"OMP_NUM_THREADS": "8"}
        # every run's base settings (the memory tune's) come after the job's: theirs is what the executors get
        assert spark_speed.executor_env(submit, {"spark.executorEnv.OMP_NUM_THREADS": "1", "spark.executor.memory": "1g"}) \
            == {"OMP_NUM_THREADS": "1"}
    setup = Setup((Change("threads=1", "8", "OMP_NUM_THREADS=1", "", env=(("OMP_NUM_THREADS", "1"),)),
                   Change("nd4j.periodic_gc", "on", "off", "", agent=("nd4j_periodic_gc=false",))))
    conf = spark_speed.executor_conf(setup.env(), setup.jvm_options())
    assert conf == {"spark.executorEnv.OMP_NUM_THREADS": "1",
                    "spark.executor.extraJavaOptions": "-Dpyd4j.agent=live=0,sites=0,nd4j_periodic_gc=false"}
    assert spark_speed.paste({"spark.executor.extraJavaOptions": "-Da=1 -Db=2"}) == \
        ["--conf 'spark.executor.extraJavaOptions=-Da=1 -Db=2'"]
    # on top of the memory tune's settings: JVM options appended, anything else replaced
    base = {"spark.executor.memory": "1g", "spark.executor.extraJavaOptions": "-Dorg.bytedeco.javacpp.maxbytes=1g",
            "spark.executorEnv.OMP_NUM_THREADS": "8"}
    assert spark_speed.merged(base, conf) == {
        "spark.executor.memory": "1g", "spark.executorEnv.OMP_NUM_THREADS": "1",
        "spark.executor.extraJavaOptions": "-Dorg.bytedeco.javacpp.maxbytes=1g -Dpyd4j.agent=live=0,sites=0,nd4j_periodic_gc=false"}
    # what Spark settings cannot carry is refused by name, never dropped
    with pytest.raises(ValueError, match="OMP_NUM_THREADS.*cannot be removed"):
        spark_speed.executor_conf({"OMP_NUM_THREADS": None}, [])
    with pytest.raises(ValueError, match="-Xmx2g.*spark.executor.memory"):
        spark_speed.executor_conf({}, ["-Xmx2g"])


def test_fake_runner_tune_speed_of_a_spark_cluster_job(tmp_path, monkeypatch):
    """tune_speed on a spark-submit job to a cluster (a fake runner): the candidates start from the executors'
    environment (spark.executorEnv.*), not this shell's; the heap is not tried and says why; what to paste is
    Spark settings."""
    seen = []

    def runner(setup: Setup, side: str) -> Measured:
        seen.append(setup.env())
        v = 30.0 if setup.env().get("OMP_NUM_THREADS") == "1" else 10.0
        return Measured(v * (1 + 0.001 * len(side)), True, "", per_executor=[v / 2, v / 2])

    from pyd4j.profile import speed
    from pyd4j.spark.install import spark_script

    job = [spark_script("spark-submit"), "--master", "spark://127.0.0.1:7077", "--conf",
           "spark.executorEnv.OMP_NUM_THREADS=8", "--class", "com.acme.Train", "app.jar"]
    real_probe = speed.probe_of

    def probe_with_gc(m):   # the probe of an executor that spends 30% of its time in GC
        p = real_probe(m)
        p.gc_share, p.heap_max, p.nd4j = 0.3, 512 << 20, {"max_threads": 8}
        return p
    monkeypatch.setattr(speed, "probe_of", probe_with_gc)
    doc = tune_speed(job, tmp_path / "t", runner=runner, env={"OMP_NUM_THREADS": "1"}, n_cores=1, ram_bytes=8 << 30)
    s = doc["speed"]
    assert doc["spark_cluster"]["executor_environment"] == {"OMP_NUM_THREADS": "8"}
    assert "threads=1" in {t["setting"] for t in s["tried"]}          # this shell's OMP_NUM_THREADS=1 is not the executors'
    assert "heap" not in {t["setting"] for t in s["tried"]} and "spark.executor.memory" in doc["probe"]["heap_not_tried"]
    assert doc["exit_code"] == 0 and [c["setting"] for c in s["changes"]] == ["threads=1"]
    assert s["paste"]["environment"] == {} and s["paste"]["spark_conf"] == {"spark.executorEnv.OMP_NUM_THREADS": "1"}
    assert s["paste"]["spark_submit"] == ["--conf spark.executorEnv.OMP_NUM_THREADS=1"]
    assert s["run_log"][0]["executors_iterations_per_s"] == [5.0, 5.0]
    # tune --speed --memory: the memory tune's Spark settings already give the executors 1 thread, so threads=1
    # is not tried (it would compare two equal setups); the probe then reads 1 thread on the executors
    monkeypatch.setattr(speed, "probe_of", lambda m: (lambda p: (setattr(p, "nd4j", {"max_threads": 1}), p)[1])(real_probe(m)))
    based = tune_speed(job, tmp_path / "b", runner=runner, env={}, n_cores=1, ram_bytes=8 << 30,
                       base_spark={"spark.executorEnv.OMP_NUM_THREADS": "1"})
    assert based["spark_cluster"]["executor_environment"] == {"OMP_NUM_THREADS": "1"}
    assert not {t["setting"] for t in based["speed"]["tried"]} & {"threads=1"}, based["speed"]["tried"]


def test_fake_runner_disable_explicit_gc_is_not_tried_under_memory_limits(tmp_path, monkeypatch):
    """A job whose own System.gc() calls take half its time: alone, -XX:+DisableExplicitGC is tried and kept;
    on top of a memory tune's limits (tune --speed --memory) it is not tried, and the document says why:
    it would also turn off the collection JavaCPP asks for at maxphysicalbytes, which holds those limits."""
    from pyd4j.profile import speed

    def runner(setup: Setup, side: str) -> Measured:
        v = 20.0 if "-XX:+DisableExplicitGC" in setup.jvm_options() else 10.0
        return Measured(v * (1 + 0.001 * len(side)), True, "")

    real_probe = speed.probe_of

    def probe_with_system_gc(m):
        p = real_probe(m)
        p.gc_share, p.explicit_gc_share, p.heap_max, p.nd4j = 0.5, 0.5, 512 << 20, {"max_threads": 1}
        return p
    monkeypatch.setattr(speed, "probe_of", probe_with_system_gc)
    job = ["java", "-cp", "x.jar", "Main"]
    alone = tune_speed(job, tmp_path / "a", runner=runner, env={"OMP_NUM_THREADS": "1"}, n_cores=1, ram_bytes=8 << 30)
    assert [c["setting"] for c in alone["speed"]["changes"]] == ["explicit_gc"]
    assert "maxphysicalbytes" in alone["speed"]["changes"][0]["reason"]
    limited = tune_speed(job, tmp_path / "m", runner=runner, env={"OMP_NUM_THREADS": "1"}, n_cores=1, ram_bytes=8 << 30,
                         base_jvm=["-Xmx512m", "-Dorg.bytedeco.javacpp.maxphysicalbytes=1073741824"])
    assert "explicit_gc" not in {t["setting"] for t in limited["speed"]["tried"]}
    assert limited["exit_code"] == 3 and "maxphysicalbytes" in limited["probe"]["explicit_gc_not_tried"]


def test_fake_profile_job_runs_after_the_first_are_bounded_by_the_first(tmp_path, monkeypatch):
    """Without --timeout, every run after the first stops at 5x the first run's wall time (120 s at least),
    so a change that hangs the job costs a bounded time; a given --timeout is kept for every run."""
    from types import SimpleNamespace

    from pyd4j.profile import speed

    given = []

    def fake_profile_job(job, run_dir, timeout_s=None, **_):
        given.append(timeout_s)
        timeline = SimpleNamespace(iterations_per_second=lambda: 5.0, notes=[], nd4j_settings=lambda: None, iterations=lambda: 10)
        return SimpleNamespace(timeline=timeline, wall_s=60.0, stopped_by=None, ok=True, returncode=0, lanes=[timeline])
    monkeypatch.setattr(speed, "profile_job", fake_profile_job)
    job = ["java", "-cp", "x.jar", "Main"]
    run = speed.job_runner(job, tmp_path / "a")
    for side in ("probe", "before", "after"):
        assert run(Setup(), side).iterations_per_s == 5.0
    assert given == [None, 300.0, 300.0]
    given.clear()
    run = speed.job_runner(job, tmp_path / "b", timeout_s=45)
    run(Setup(), "probe")
    run(Setup(), "before")
    assert given == [45, 45]


def test_fake_runner_one_crash_is_run_again_and_reported_two_break_the_setting(tmp_path):
    """A run that fails once (a native crash now and then) is run again and reported; the same setting
    failing twice is a setting that breaks the job (dropped), and the job as it is failing twice ends the
    tune with no change, naming what failed."""
    job = ["java", "-cp", "x.jar", "Main"]

    def runner_failing(times: dict[str, int]):
        left = dict(times)

        def run(setup: Setup, side: str) -> Measured:
            label = setup.label()
            if left.get(label, 0) > 0 and side != "probe":
                left[label] -= 1
                return Measured(None, False, "exit code 134 (SIGSEGV in libnd4jcpu.so)")
            v = 30.0 if setup.env().get("OMP_NUM_THREADS") == "1" else 10.0
            return Measured(v * (1 + 0.001 * len(side)), True, "")
        return run

    once = tune_speed(job, tmp_path / "a", runner=runner_failing({"threads=1=OMP_NUM_THREADS=1": 1}), env={},
                      n_cores=1, ram_bytes=8 << 30, only={"threads"})
    s = once["speed"]
    assert once["exit_code"] == 0 and [c["setting"] for c in s["changes"]] == ["threads=1"]
    assert [r["setup"] for r in s["failed_runs"]] == ["threads=1=OMP_NUM_THREADS=1"]
    assert "SIGSEGV" in s["failed_runs"][0]["why"]

    twice = tune_speed(job, tmp_path / "b", runner=runner_failing({"threads=1=OMP_NUM_THREADS=1": 2}), env={},
                       n_cores=1, ram_bytes=8 << 30, only={"threads"})
    assert twice["exit_code"] == 3 and twice["speed"]["changes"] == []
    assert twice["speed"]["tried"][0]["verdict"] == "broken" and "SIGSEGV" in twice["speed"]["tried"][0]["reason"]

    base = tune_speed(job, tmp_path / "c", runner=runner_failing({"the job as it is": 2}), env={},
                      n_cores=1, ram_bytes=8 << 30, only={"threads"})
    assert base["exit_code"] == 3 and "failed twice" in base["speed"]["note"] and "the job as it is" in base["speed"]["note"]
    assert base["speed"]["tried"] == []      # the first trial's comparison raised: none finished

    calls = {"n": 0}

    def base_fails_late(setup: Setup, side: str) -> Measured:   # the job as it is breaks in the second trial
        if setup.label() == "the job as it is" and side == "before":
            calls["n"] += 1
            if calls["n"] > 4:
                return Measured(None, False, "exit code 134 (SIGSEGV in libnd4jcpu.so)")
        return Measured(10.0 * (1 + 0.001 * len(side) + 0.0001 * calls["n"]), True, "")
    late = tune_speed(job, tmp_path / "d", runner=base_fails_late, env={}, n_cores=2, ram_bytes=8 << 30,
                      only={"threads"})
    # the trial that finished before the job broke is kept in the document, with its verdict
    assert late["exit_code"] == 3 and [t["setting"] for t in late["speed"]["tried"]] == ["threads=2"]
    assert late["speed"]["tried"][0]["runs"] == 8   # 4 a side


def test_fake_tune_speed_memory_hands_a_spark_jobs_settings_to_the_speed_runs(tmp_path, monkeypatch):
    """`tune --speed --memory` on a spark-submit job: the memory tune's Spark settings (not its "key=value"
    list as JVM flags) go under every speed run; a java job gets the memory tune's flags (fake tune_speed)."""
    from pyd4j.commands import _tune_speed as tune_command
    from pyd4j.profile import speed

    seen = {}

    def fake_tune_speed(job, out, **kw):
        seen.update(kw)
        return {"out": str(out), "probe": {}, "base_jvm_options": list(kw["base_jvm"]), "exit_code": 3,
                "speed": {"verdict": "no verified change"}}
    monkeypatch.setattr(speed, "tune_speed", fake_tune_speed)
    monkeypatch.setattr(speed, "print_speed", lambda doc: None)
    monkeypatch.setattr(tune_command, "finish", lambda doc, as_json: None)
    conf = {"spark.executor.memory": "1g", "spark.executor.extraJavaOptions": "-Dorg.bytedeco.javacpp.maxbytes=900m"}
    spark_doc = {"spark_conf": conf, "recommended": [f"{k}={v}" for k, v in conf.items()], "exit_code": 0}
    with pytest.raises(SystemExit) as ended:
        tune_command.speed_tune(["spark-submit", "--class", "A", "a.jar"], tmp_path / "s", 100, None, 6, False, spark_doc)
    assert ended.value.code == 3 and seen["base_spark"] == conf and seen["base_jvm"] == []
    java_doc = {"recommended": ["-Xmx512m"], "exit_code": 0}
    with pytest.raises(SystemExit):
        tune_command.speed_tune(["java", "-cp", "a.jar", "A"], tmp_path / "j", 100, None, 6, False, java_doc)
    assert seen["base_spark"] is None and seen["base_jvm"] == ["-Xmx512m"]
