"""PySpark batch jobs: reconcile delivery counts (loss tables, lag percentiles, availability minutes) and backfill."""
