"""The chaos account: set differences by id."""

from __future__ import annotations

from chaos.accounting import settle


def test_clean_run_is_ok() -> None:
    """Every id delivered or expectedly dead-lettered, duplicates counted, nothing lost."""
    account = settle(["a", "b", "c"], ["a", "a", "b"], {"c": "http_4xx"}, ["c"])
    assert account.ok
    assert (account.delivered, account.dead_lettered, account.duplicates) == (2, 1, 1)
    assert account.duplicated_pct == 50.0


def test_loss_and_wrong_dead_letters_are_counted() -> None:
    """A missing id is lost; a healthy event in the DLQ is wrong; a poison one not there is missing."""
    account = settle(["a", "b", "c", "d"], ["a"], {"b": "expired"}, ["d"])
    assert account.lost == 2
    assert account.lost_sample == ("c", "d")
    assert account.wrong_dlq == 1
    assert account.missing_dlq == 1
    assert not account.ok
