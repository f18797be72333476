"""How the auditor tells a re-created source partition from a replay of the same records."""

from __future__ import annotations

from hifi.accounting.incarnations import Incarnations, key, split


def _check(found: Incarnations, offset: int, at_ms: int, highwater: int | None = None) -> int:
    # read before: up to offset 100, the last record written at 5_000
    return found.check(
        "orders",
        0,
        first_offset=offset,
        first_ms=at_ms,
        read=(100, 5_000),
        highwater=highwater,
        now_ms=9_000,
    )


def test_a_replay_from_the_committed_offset_is_the_same_incarnation() -> None:
    found = Incarnations()
    assert _check(found, 90, 4_000, highwater=120) == 0
    assert _check(found, 100, 6_000, highwater=120) == 0  # carrying on
    assert found.view() == []


def test_offsets_going_back_to_newer_records_are_a_new_incarnation() -> None:
    found = Incarnations()
    assert _check(found, 0, 7_000, highwater=150) == 1
    assert found.epoch("orders", 0) == 1
    assert found.epoch("orders", 1) == 0
    assert found.epoch_at("orders", 0, 6_999) == 0  # taken in before it began: the old one's
    assert found.epoch_at("orders", 0, 7_000) == 1
    (seen,) = found.view()
    assert (seen["epoch"], seen["since_ms"], seen["previous_read_up_to"]) == (1, 7_000, 100)


def test_a_high_watermark_below_what_was_read_is_a_new_incarnation() -> None:
    assert _check(Incarnations(), 0, 4_000, highwater=10) == 1


def test_incarnations_survive_a_snapshot_and_keys_name_them() -> None:
    found = Incarnations()
    _check(found, 0, 7_000)
    again = Incarnations()
    again.restore(found.state())
    assert again.view() == found.view()
    assert key("orders", 0) == "orders"
    assert split(key("orders", 2)) == ("orders", 2)
    assert split("orders") == ("orders", 0)
