"""`python -m ingest`: the `ingest` command."""

from ingest.cli import main

main()
