"""`python -m spark_batch` is the `spark-batch` command (on a cluster, spark-submit runs
`spark_batch/driver.py` beside the job's zip instead: `spark-batch package`)."""

from spark_batch.cli import main

main()
