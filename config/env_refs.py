"""Environment references in header values: `${VAR}` substituted at load, `$$` a literal `$`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from hifi import redaction
from hifi.errors import ConfigError

_VAR_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE_SYNTAX = (
    "write ${NAME} for an environment variable (NAME: letters, digits and '_', not starting"
    " with a digit); a literal $ is written $$"
)
HEADER_VALUE_RULE = "a header value must be printable ASCII on one line"


def resolve_env(
    value: str, path: Path, key: str, environ: Mapping[str, str], *, table: str = "headers"
) -> str:
    """`value` with `${VAR}` replaced by the variable and `$$` by `$`; checked to be a valid header value.

    Errors name the file and the key (`table.key`), never the value nor any part of it (it may be
    a secret). A variable's value is taken literally: a `$` inside it is not read again.
    """
    where = f"{path}: key '{table}.{key}'" if table else f"{path}: key '{key}'"
    parts = _substitute(value, where, environ)
    for text, var in parts:
        if problem := header_value_problem(text):
            origin = f" (from ${{{var}}})" if var else ""
            raise ConfigError(
                f"{where}: the value (after ${{VAR}} substitution) {problem}{origin}; "
                f"{HEADER_VALUE_RULE}"
            )
    resolved = "".join(text for text, _ in parts)
    if not resolved.strip(" "):
        raise ConfigError(
            f"{where}: the value (after ${{VAR}} substitution) is empty; {HEADER_VALUE_RULE},"
            " not empty (remove the header if it is not needed)"
        )
    return resolved


def _substitute(value: str, where: str, environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """`value` cut into literal text and variables' values: (text, the variable or None)."""
    parts: list[tuple[str, str | None]] = []
    position = 0
    while (dollar := value.find("$", position)) >= 0:
        parts.append((value[position:dollar], None))
        following = value[dollar + 1 : dollar + 2]
        if following == "$":
            parts.append(("$", None))
            position = dollar + 2
            continue
        if following != "{":
            what = (
                "a bare $NAME is not substituted"
                if _VAR_NAME_RE.match(value, dollar + 1)
                else "a '$' starts no ${NAME}"
            )
            raise ConfigError(f"{where}: {what}; {_REFERENCE_SYNTAX}")
        close = value.find("}", dollar)
        if close < 0:
            raise ConfigError(f"{where}: '${{' has no closing '}}'; {_REFERENCE_SYNTAX}")
        var = value[dollar + 2 : close]
        if not _VAR_NAME_RE.fullmatch(var):
            raise ConfigError(
                f"{where}: what is inside '${{...}}' is not a variable name; {_REFERENCE_SYNTAX}"
            )
        if var not in environ:
            raise ConfigError(f"{where}: refers to ${{{var}}}, which is not set in the environment")
        redaction.register([environ[var]])
        parts.append((environ[var], var))
        position = close + 1
    parts.append((value[position:], None))
    return parts


def header_value_problem(text: str) -> str | None:
    """What makes `text` unfit for an HTTP header value, without quoting any of it; None if fit."""
    if "\r" in text or "\n" in text:
        return "contains a line break"
    if not text.isascii():
        return "contains a non-ASCII character"
    if not text.isprintable():
        return "contains a non-printable character"
    return None
