"""DL4J on Spark: a local standalone cluster and the example job, to run real spark-submit jobs.

Profiling and tuning a user's spark-submit job live in pyd4j.profile (spark_submit, spark_executors,
spark_tuning): this package sits above profile and imports it, never the reverse.
"""
