"""The help texts name what the commands take and do: the flag's metavar, the probe each sends."""

from __future__ import annotations

import re

from tests.cli.test_manual import help_text


def test_connector_help_names_the_flags_metavar() -> None:
    """The flag is `--dest NAME`: the text says NAME, never a DEST the reader cannot find."""
    text = help_text("connector")
    assert "--dest NAME" in text
    assert not re.search(r"\bDEST\b", text)
    assert "destination NAME" in text


def test_only_the_connector_mentions_a_head_request() -> None:
    """The auditor's and the retrier's --probe reach Kafka only; the connector's sends a HEAD,
    and a POST only with --probe-post."""
    for prog in ("auditor", "retrier"):
        probe = _flag_help(help_text(prog), "--probe")
        assert "HEAD" not in probe, (prog, probe)
        assert "POST" not in probe, (prog, probe)
        assert "Kafka" in probe
    connector = help_text("connector")
    assert "never a POST unless --probe-post" in " ".join(_flag_help(connector, "--probe").split())
    assert "empty batch" in _flag_help(connector, "--probe-post")


def _flag_help(text: str, flag: str) -> str:
    """The help of one option: its line and the indented lines after it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [flag])
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if line.lstrip().startswith("-"):
            break
        block.append(line)
    return " ".join(" ".join(block).split())
