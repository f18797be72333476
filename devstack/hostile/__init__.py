"""A hostile HTTP/1.1 destination: the behaviours a real destination (or what stands in front of
it) may have, each with the outcome the connector must reach (`devstack.hostile.server`)."""

from __future__ import annotations

from devstack.hostile.behaviour import BEHAVIOURS, Behaviour, Expect
from devstack.hostile.server import HostileServer

__all__ = ["BEHAVIOURS", "Behaviour", "Expect", "HostileServer"]
