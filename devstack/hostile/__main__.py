"""`python -m devstack.hostile --port N`: the hostile destination, for trying a connector by hand."""

from devstack.hostile.server import main

main()
