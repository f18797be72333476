"""`python -m tenants`: the `hifi-tenants` command."""

from tenants.cli import main

main()
