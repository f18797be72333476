"""Members of an auditor group joining and leaving while events flow change no figure.

A real broker, a real connector and destination, auditors of one group in this process and a
single auditor beside them: after a member joins mid-run, or one is stopped (SIGTERM's
`request_stop`) while the group rebalances, every member's final minute equals the run's count
and the single auditor's row, judgement included.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from auditor.daemon import Auditor
from connector.daemon import Connector
from devstack.destination import TestDestination
from devstack.kafka_tools import produce_events
from hifi.kafka.settings import KafkaSettings
from tests.auditor.group import PARTITIONS, Scene, cut, figures, owning, scene, truth
from tests.auditor.support import rows_of, running, settled
from tests.helpers import running as delivering
from tests.helpers import until

pytestmark = [pytest.mark.integration]

HALF = 120
FINAL_IN_S = 25.0  # the minute becomes final this long after the test starts


async def _counted(member: Auditor, scene: Scene, entered: int) -> None:
    """Wait until the member's table counts `entered` events of the scene's minute."""
    dest = scene.dest.name
    assert await until(
        lambda: sum(r["entered"] for r in rows_of(member, dest)) >= entered, timeout_s=30
    ), f"the member never counted {entered} events"


async def test_a_member_joining_mid_run_changes_no_figure(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """A second member joins while events flow: it takes half the shares with their snapshots,
    and both members' final minute is the run's count and the single auditor's row."""
    group = await scene(kafka_settings, catalog_dir, tmp_path, unique, destination.url, FINAL_IN_S)
    name = group.dest.name
    connector = Connector(group.dest, kafka_settings, audit_topic=group.audit_topic)
    first, single = group.member(), group.single()
    async with delivering(connector), running(first), running(single):
        await produce_events(kafka_settings, name, group.events("a", HALF))
        assert len(await owning(first)) == PARTITIONS
        await _counted(first, group, HALF)
        second = group.member()
        async with running(second):
            taken = await owning(second)
            assert await until(lambda: len(first.accounts.shares) < PARTITIONS, timeout_s=30)  # type: ignore[union-attr]
            await produce_events(kafka_settings, name, group.events("b", HALF))
            tables = [await settled(m, name, 2 * HALF, timeout_s=60) for m in (first, second)]
            reference = await settled(single, name, 2 * HALF, timeout_s=60)
            assert not taken & set(first.accounts.shares)  # type: ignore[union-attr]

    expected = truth(group, 2 * HALF)
    assert cut(figures(reference), expected) == expected
    for table in tables:
        assert figures(table) == figures(reference)


async def test_a_member_stopped_during_a_rebalance_changes_no_figure(
    kafka_settings: KafkaSettings,
    destination: TestDestination,
    catalog_dir: Path,
    tmp_path: Path,
    unique: str,
) -> None:
    """A third member joins; while the group rebalances, one of the first two is asked to stop
    (as SIGTERM does): it stops once the rebalance ends, its shares go to the others, and their
    final minute is the run's count and the single auditor's row."""
    group = await scene(kafka_settings, catalog_dir, tmp_path, unique, destination.url, FINAL_IN_S)
    name = group.dest.name
    connector = Connector(group.dest, kafka_settings, audit_topic=group.audit_topic)
    first, leaving, single = group.member(), group.member(), group.single()
    leaving_run = asyncio.create_task(leaving.run())
    try:
        async with delivering(connector), running(first), running(single):
            await owning(first)
            await owning(leaving)
            await produce_events(kafka_settings, name, group.events("a", HALF))
            await _counted(first, group, HALF)
            third = group.member()
            async with running(third):
                assert await until(lambda: leaving.accounts.rebalancing, timeout_s=30)  # type: ignore[union-attr]
                leaving.request_stop()
                await asyncio.wait_for(leaving_run, 60)
                await produce_events(kafka_settings, name, group.events("b", HALF))
                tables = [await settled(m, name, 2 * HALF, timeout_s=60) for m in (first, third)]
                reference = await settled(single, name, 2 * HALF, timeout_s=60)
                owned = set(first.accounts.shares) | set(third.accounts.shares)  # type: ignore[union-attr]
    finally:
        if not leaving_run.done():
            leaving.request_stop()
            await asyncio.wait_for(leaving_run, 60)

    assert len(owned) == PARTITIONS  # the stopped member's shares went to the others
    expected = truth(group, 2 * HALF)
    assert cut(figures(reference), expected) == expected
    for table in tables:
        assert figures(table) == figures(reference)
