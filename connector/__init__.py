"""The egest daemon: consume a destination's topics, deliver over HTTP, commit only what has an outcome.

The daemon is `connector.daemon.Connector`. Each name is imported from the module that
defines it, so `connector --help` loads only `connector.cli` and `connector.defaults`.
"""
