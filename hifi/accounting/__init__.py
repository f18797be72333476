"""The accounting model: what the auditor counts and what its readers read.

- `buckets`, `ledger`, `late`, `percentiles`: minute buckets of events, their outcomes and lags,
  settled into final minutes and judged up or down (`settings`: what they read of
  `[accounting]`);
- `tables`: a minute's row, the day's availability, as `/tables`, reports and the dashboard show
  them; `client`: an auditor's tables read over HTTP;
- `archive_layout`: the Parquet archive's files and columns; `bucket_state`: a bucket's snapshot;
- `incarnations`: a topic created again, told apart from the one before; `accepted`: the events
  ingest accepted.

The auditor daemon runs it; the retrier's dashboard and the Spark reconciliation read it.
"""
