"""The shell commands of a deploy page, as the tests run them: its fenced `sh` and `console` blocks.

A page marks what a test runs by the fence: a block fenced ```` ```sh ```` is a script run as
written (the tests set only the placeholders the page names); ```` ```console ```` holds `$ `
commands, each followed by the output it prints; any other fence (```` ``` ````, ```` ```text ````)
is an example no test runs, and the page says why next to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUN_FENCES = ("sh", "console")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: its fence's language, the heading it stands under and its text."""

    lang: str
    heading: str
    text: str

    def console(self) -> list[tuple[str, str]]:
        """A `console` block's `$ COMMAND` lines, each with the output lines that follow it."""
        pairs: list[tuple[str, list[str]]] = []
        for line in self.text.splitlines():
            if line.startswith("$ "):
                pairs.append((line[2:], []))
            elif pairs:
                pairs[-1][1].append(line)
            else:
                raise ValueError(f"{self.heading}: console output before any `$ ` command: {line}")
        return [(command, "\n".join(output)) for command, output in pairs]


def blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, in the page's order, with the heading above it."""
    found: list[Block] = []
    heading = ""
    fence: str | None = None  # the open block's language, None outside a block
    body: list[str] = []
    for line in page.read_text().splitlines():
        if fence is None and line.startswith("```"):
            fence, body = line[3:].strip(), []
        elif fence is not None and line.rstrip() == "```":
            found.append(Block(fence, heading, "".join(f"{text}\n" for text in body)))
            fence = None
        elif fence is not None:
            body.append(line)
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    return found


def run_blocks(page: Path, heading: str) -> list[Block]:
    """The blocks a test runs (fenced `sh` or `console`) under `heading`, in the page's order."""
    found = [block for block in blocks(page) if block.heading == heading]
    return [block for block in found if block.lang in RUN_FENCES]
