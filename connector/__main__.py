"""`python -m connector` is the `connector` command."""

from connector.cli import main

main()
