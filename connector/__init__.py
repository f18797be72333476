"""The egest daemon: consume a destination's topics, deliver over HTTP, commit only what has an outcome."""

from connector.daemon import Connector

__all__ = ["Connector"]
