"""`python -m retrier` is the `retrier` command."""

from retrier.cli import main

main()
