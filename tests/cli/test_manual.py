"""docs/cli.md holds every command's `--help` text as the command prints it, so the manual cannot drift.

Each `<!-- help: PROG [SUBCOMMAND ...] -->` marker in docs/cli.md is followed by a `text` block
with that command's `--help`; every command and subcommand has one. After changing a help
text, `python -m tests.cli.test_manual` rewrites the blocks (the prose stays as it is).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

import auditor.cli
import connector.cli
import ingest.cli
import retrier.cli
import spark_batch.cli
import tenants.cli

MANUAL = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
COMMANDS: dict[str, click.Command] = {
    "connector": connector.cli.cli,
    "retrier": retrier.cli.cli,
    "auditor": auditor.cli.cli,
    "ingest": ingest.cli.cli,
    "spark-batch": spark_batch.cli.cli,
    "hifi-tenants": tenants.cli.cli,
}
WIDTH = 80  # the help as an 80-column terminal shows it
_BLOCK = re.compile(r"<!-- help: (?P<path>[a-z -]+) -->\n```text\n(?P<text>.*?)```\n", re.S)


def _paths(path: str, command: click.Command) -> Iterator[str]:
    """`path` and the path of every subcommand below it."""
    yield path
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _paths(f"{path} {name}", sub)


def help_text(path: str) -> str:
    """What `PATH --help` prints."""
    prog, *args = path.split()
    result = CliRunner().invoke(
        COMMANDS[prog], [*args, "--help"], prog_name=prog, terminal_width=WIDTH
    )
    assert result.exit_code == 0, result.output
    return result.output


def all_paths() -> list[str]:
    return [path for prog, command in COMMANDS.items() for path in _paths(prog, command)]


def test_every_help_text_in_the_manual_is_the_commands_own() -> None:
    """Each block of docs/cli.md equals what its command prints for --help today."""
    blocks = {m["path"]: m["text"] for m in _BLOCK.finditer(MANUAL.read_text())}
    assert blocks, "docs/cli.md has no help blocks"
    for path, text in blocks.items():
        assert text == help_text(path), f"docs/cli.md is stale for `{path} --help`: {__doc__}"


def test_every_command_and_subcommand_is_in_the_manual() -> None:
    """No command or subcommand is missing from docs/cli.md, and no block names one that is gone."""
    blocks = [m["path"] for m in _BLOCK.finditer(MANUAL.read_text())]
    assert sorted(blocks) == sorted(all_paths())


def rewrite() -> None:
    """Put each command's current --help into its block of docs/cli.md."""
    text = MANUAL.read_text()
    text = _BLOCK.sub(
        lambda m: f"<!-- help: {m['path']} -->\n```text\n{help_text(m['path'])}```\n", text
    )
    MANUAL.write_text(text)
    missing = sorted(set(all_paths()) - {m["path"] for m in _BLOCK.finditer(text)})
    if missing:
        sys.exit(f"docs/cli.md has no block for: {', '.join(missing)}")


if __name__ == "__main__":
    rewrite()
