"""DL4J on Spark: a local cluster, spark-submit, per-executor sizing and tuning."""
