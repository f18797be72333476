"""`python -m soak`'s command line: what it refuses, in one line, before it starts anything."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from soak.__main__ import BOOTSTRAP_ENV_VAR, main


@pytest.mark.parametrize("duration", ["0", "ten minutes", "-5m", "1d"])
def test_a_duration_it_cannot_read_is_refused_with_exit_2(duration: str) -> None:
    result = CliRunner().invoke(main, ["--duration", duration])
    assert result.exit_code == 2
    assert "is not a duration such as 90s, 10m or 1h" in result.output


def test_a_kafka_it_cannot_connect_to_as_told_is_refused_with_exit_2_naming_the_variable() -> None:
    env = {BOOTSTRAP_ENV_VAR: "kafka.example:9093", "HIFI_KAFKA_SECURITY_PROTOCOL": "TELNET"}
    result = CliRunner().invoke(main, ["--duration", "1m"], env=env)
    assert result.exit_code == 2, result.output
    assert "HIFI_KAFKA_SECURITY_PROTOCOL" in result.output
    assert "Traceback" not in result.output
