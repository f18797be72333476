"""`python -m spark_batch` is the `spark-batch` command (spark-submit runs this file too)."""

from spark_batch.cli import main

main()
