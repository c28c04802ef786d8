"""Our own logic around spark-submit, without Spark: reading a command's settings, adding pyd4j's without
losing the user's, telling the driver from the executors, and reading why the driver lost an executor
(lines in the format Spark 3.5's StandaloneSchedulerBackend / TaskSchedulerImpl / TaskSetManager log)."""

from __future__ import annotations

import shlex

from pyd4j.profile.command import JobCommand
from pyd4j.profile.jvms import spark_part
from pyd4j.profile.spark_executors import classify, driver_log_lines
from pyd4j.profile.spark_submit import SparkSubmit

APP = ["app.jar", "--conf", "net.json", "--epochs", "1"]   # the job's own --conf is an app argument


def test_settings_read_from_properties_conf_and_shorthands(tmp_path):
    props = tmp_path / "app.properties"
    props.write_text("spark.master spark://127.0.0.1:7077\nspark.executor.memory=2g\n# comment\n"
                     "spark.executor.extraJavaOptions -Dfoo=1 -Xss4m\n")
    cmd = SparkSubmit.parse(["spark-submit", "--properties-file", str(props), "--executor-memory", "3g",
                             "--conf", "spark.task.cpus=2", "--class", "a.B", *APP])
    assert cmd.app == tuple(APP)
    settings = cmd.settings()
    assert settings["spark.executor.memory"] == "3g"            # the command line wins over the file
    assert settings["spark.master"] == "spark://127.0.0.1:7077"
    assert settings["spark.task.cpus"] == "2"
    assert "net.json" not in settings.values()                  # app arguments are not spark-submit's
    assert cmd.local_threads() is None
    assert SparkSubmit.parse(["spark-submit", "--master", "local[3]", *APP]).local_threads() == 3


def test_with_settings_replaces_memory_keeps_user_java_options():
    cmd = SparkSubmit.parse(["spark-submit", "--executor-memory", "8g", "--conf",
                             "spark.executor.extraJavaOptions=-Dfoo=1 -Dorg.bytedeco.javacpp.maxbytes=9g",
                             "--class", "a.B", *APP])
    argv = cmd.with_settings({"spark.executor.memory": "480m",
                              "spark.executor.extraJavaOptions": "-Dorg.bytedeco.javacpp.maxbytes=64m"},
                             drop_memory_flags=True)
    assert argv[-len(APP):] == APP                               # the app and its arguments untouched
    again = SparkSubmit.parse(argv).settings()
    assert again["spark.executor.memory"] == "480m" and "--executor-memory" not in argv
    opts = shlex.split(again["spark.executor.extraJavaOptions"])
    assert opts == ["-Dfoo=1", "-Dorg.bytedeco.javacpp.maxbytes=64m"]   # the user's own option kept, theirs dropped


def test_agent_reaches_executors_through_extra_java_options():
    command = JobCommand(("spark-submit", "--conf", "spark.executor.extraJavaOptions=-Dfoo=1", "--class", "a.B", *APP),
                         "spark-submit", None, "a.B")
    argv, env = command.launch("-javaagent:/x/agent.jar=interval=100,out=/runs/jvm-%p.jsonl", env={})
    opts = shlex.split(SparkSubmit.parse(argv).settings()["spark.executor.extraJavaOptions"])
    assert opts == ["-Dfoo=1", "-javaagent:/x/agent.jar=interval=100,out=/runs/jvm-%p.jsonl"]
    assert "-javaagent:/x/agent.jar" in env["JAVA_TOOL_OPTIONS"]   # the driver and spark-submit's own JVMs
    assert "spark.driver.extraJavaOptions" not in SparkSubmit.parse(argv).settings()
    # in cluster deploy mode a worker starts the driver too: the agent goes into its options as well
    command = JobCommand(("spark-submit", "--deploy-mode", "cluster", "--class", "a.B", *APP), "spark-submit", None, "a.B")
    argv, _ = command.launch("-javaagent:/x/agent.jar=interval=100", env={})
    assert SparkSubmit.parse(argv).settings()["spark.driver.extraJavaOptions"] == "-javaagent:/x/agent.jar=interval=100"


def test_spark_parts_from_jvm_commands():
    assert spark_part("org.apache.spark.deploy.SparkSubmit --master local[2] --class a.B app.jar") == ("driver", None, None)
    executor = ("org.apache.spark.executor.CoarseGrainedExecutorBackend --driver-url spark://CoarseGrainedScheduler@"
                "127.0.0.1:4242 --executor-id 1 --hostname 127.0.0.1 --cores 2 --app-id app-20261203-0001 "
                "--worker-url spark://Worker@127.0.0.1:4343 --resourceProfileId 0")
    assert spark_part(executor) == ("executor", "1", 2)
    assert spark_part("org.apache.spark.launcher.Main org.apache.spark.deploy.SparkSubmit") == (None, None, None)
    assert spark_part("org.apache.spark.deploy.worker.DriverWrapper spark://Worker@h:1 app.jar a.B")[0] == "driver"


def test_lost_executors_classified_from_fake_driver_log():
    log = "\n".join([
        "26/12/03 00:01:02 INFO StandaloneSchedulerBackend: Executor app-20261203000058-0000/1 removed: Command exited with code 137",
        "26/12/03 00:01:02 ERROR TaskSchedulerImpl: Lost executor 1 on 127.0.0.1: Command exited with code 137",
        "26/12/03 00:01:03 WARN TaskSetManager: Lost task 1.0 in stage 2.0 (TID 5) (127.0.0.1 executor 0): "
        "java.lang.OutOfMemoryError: Java heap space",
        "26/12/03 00:01:04 WARN TaskSetManager: Lost task 0.0 in stage 4.0 (TID 8) (127.0.0.1 executor 2): "
        "java.lang.RuntimeException: java.lang.OutOfMemoryError: Cannot allocate new LongPointer(4)",
        "\tat org.nd4j.linalg.cpu.nativecpu.ops.NativeOpExecutioner.exec(NativeOpExecutioner.java:1)",
        "Caused by: java.lang.OutOfMemoryError: Cannot allocate new LongPointer(4): totalBytes = 256, "
        "physicalBytes = 345M",
        "\tat org.bytedeco.javacpp.Pointer.deallocator(Pointer.java:1)",
        "26/12/03 00:01:04 INFO SparkContext: Invoking stop() from shutdown hook",
        "Caused by: java.lang.OutOfMemoryError: Java heap space",    # another trace, no executor's
    ])
    said = driver_log_lines(log)
    assert set(said) == {"0", "1", "2"} and len(said["1"]) == 2 and len(said["2"]) == 2
    assert classify(said["1"], 137)[:2] == ("killed-for-memory", True)
    assert classify(said["0"], None)[:2] == ("oom-heap", True)
    assert classify(said["2"], None)[:2] == ("oom-offheap", True)   # JavaCPP's, from the Caused-by line
    assert classify([], 143)[:2] == ("ok", False)             # ended by the worker at the application's end
    # exit 52 with no error text in the driver's log (the run that found this was JavaCPP's, off the heap):
    # an OOM, which memory not said, both fixes named
    removed = ["26/12/06 01:06:43 INFO StandaloneSchedulerBackend: Executor app-20261206010628-0000/0 removed: "
               "Command exited with code 52"]
    kind, memory, why = classify(removed, 52)
    assert (kind, memory) == ("oom", True) and "spark.executor.memory" in why and "memoryOverhead" in why
    assert classify(["Lost executor 3 on h: Remote RPC client disassociated"], 1)[:2] == ("lost", False)
