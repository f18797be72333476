"""Secrets out of every text hifi writes: one process-wide set of secret values, masking, and short one-line errors.

Whatever writes text (log lines, `/status`, DLQ and retry headers, CLI output, exception
messages) passes it through `mask()`, `shorten()` or `short_error()`. Secrets are registered
once, where they are read: the catalog registers every value it substitutes from the environment
and every word of 8 characters or more of a header value; the Kafka settings register the password.

What masking guarantees: no text it returns holds a whole registered secret (of 4 characters or
more), nor 8 consecutive characters of one of its words (runs of characters other than white
space: the token of "Bearer TOKEN", not "Bearer T"), whether written plainly or escaped as a
destination may echo it: percent-encoded (`%2F`, any case), JSON-escaped (`\\/`, `\\"`,
`\\u002f`), HTML character references (`&#47;`, `&amp;`), or escapes of those escapes
(`%252F`, `\\\\\\/`). Each such run is replaced by one `***`. A destination that echoes a
token cut or split (the end of one error body holds its first half, the next body its rest,
each stored in its own `hifi-history` entry) therefore leaves at most 7 characters of it in any
one text: pieces can be put back together only if the destination echoes the token in many
pieces of 7 or fewer, on purpose. Encodings that hide the characters altogether (base64,
hashing) are out of scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 4  # shorter values are not secrets, and masking them would garble text
MIN_HEADER_WORD_CHARS = 8  # a header value's words this long are masked (the token of "Bearer t")
MIN_FRAGMENT_CHARS = 8  # this many characters in a row of a secret's word are masked anywhere
ERROR_MAX_CHARS = 200

# One escaped character as destinations write them: percent-encoding, JSON/JS string escapes,
# HTML character references. Decoding is done twice, for escapes of escapes (%252F, \\\/).
_ESCAPE = re.compile(
    r"%(?P<pct>[0-9A-Fa-f]{2})"
    r"|\\u(?P<uni>[0-9A-Fa-f]{4})"
    r"|\\x(?P<hex>[0-9A-Fa-f]{2})"
    r"|\\(?P<esc>[\\/\"'bfnrt])"
    r"|&#[xX](?P<hexref>[0-9A-Fa-f]{1,6});"
    r"|&#(?P<decref>[0-9]{1,7});"
    r"|&(?P<named>amp|lt|gt|quot|apos);"
)
_DECODE_ROUNDS = 2
_MAX_ESCAPE_CHARS = 10  # the longest escape of one character: &#x10FFFF;
_JSON_ESCAPES = {"\\": "\\", "/": "/", '"': '"', "'": "'"} | dict(
    zip("bfnrt", "\b\f\n\r\t", strict=True)
)
_NAMED_REFS = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


# With more secrets than this (many tenants' keys), whole secrets and anchors are looked up per
# position of the text in a dict and a set, instead of an alternation of every secret and a
# substring search per anchor: both grow with the secrets (milliseconds per short error with
# a thousand tenant keys), the look-ups only with the text.
MANY_SECRETS = 64


@dataclass(frozen=True, slots=True)
class _Registry:
    """What masking looks for, replaced as a whole on each registration (readers never lock)."""

    whole: re.Pattern[str]  # every secret, longest first
    fragments: frozenset[str]  # every MIN_FRAGMENT_CHARS-long piece of a word of a secret
    anchors: tuple[str, ...]  # a text holding a fragment holds one of these (`_anchors`)
    reach: int  # how far an escaped secret can extend: the bound `excerpt` keeps beyond its cut
    # with MANY_SECRETS or more: the secrets by their first MIN_SECRET_CHARS characters, and the
    # anchors as a set (None: search `whole` and `anchors` as they are)
    by_head: dict[str, tuple[str, ...]] | None = None
    anchor_set: frozenset[str] | None = None


_secrets: set[str] = set()
_registry: _Registry | None = None


def register(values: Iterable[str]) -> None:
    """Mask these values (those of at least `MIN_SECRET_CHARS`) in all text written from now on.

    A value is masked without the white space at its ends, and also in its one-space form (runs
    of white space made one space), the form `short_error` leaves it in.
    """
    added: set[str] = set()
    for value in values:
        for form in (value.strip(), " ".join(value.split())):
            if len(form) >= MIN_SECRET_CHARS and form not in _secrets:
                added.add(form)
    if not added:
        return
    _secrets.update(added)
    _rebuild()


def forget(values: Iterable[str]) -> None:
    """Stop masking these values (registered earlier): an access token once it was replaced, so
    a daemon that rotates tokens for months does not keep every one of them."""
    gone = {form for value in values for form in (value.strip(), " ".join(value.split()))}
    if not gone & _secrets:
        return
    _secrets.difference_update(gone)
    _rebuild()


def _rebuild() -> None:
    """Replace the registry with one for `_secrets` as they are now."""
    global _registry
    if not _secrets:
        _registry = None
        return
    ordered = sorted(_secrets, key=len, reverse=True)  # a secret inside a longer one: longest first
    n = MIN_FRAGMENT_CHARS
    words = {word for secret in _secrets for word in secret.split() if len(word) >= n}
    anchors = _anchors(words)
    many = len(ordered) >= MANY_SECRETS
    by_head: dict[str, list[str]] = {}
    for secret in ordered if many else ():
        by_head.setdefault(secret[:MIN_SECRET_CHARS], []).append(secret)
    _registry = _Registry(
        whole=re.compile("|".join(map(re.escape, ordered))),
        fragments=frozenset(word[i : i + n] for word in words for i in range(len(word) - n + 1)),
        anchors=anchors,
        reach=len(ordered[0]) * _MAX_ESCAPE_CHARS**_DECODE_ROUNDS,
        by_head={head: tuple(found) for head, found in by_head.items()} if many else None,
        anchor_set=frozenset(anchors) if len(anchors) >= MANY_SECRETS else None,
    )


def _anchors(words: Iterable[str]) -> tuple[str, ...]:
    """The pieces of half a fragment's length at every multiple of that length in each word.

    Any fragment (MIN_FRAGMENT_CHARS characters of a word from position i) holds the piece at
    the first multiple of half its length from i, whole: a text with none of these pieces has
    no fragment, and is checked by a few substring searches instead of a look-up per character.
    """
    half = MIN_FRAGMENT_CHARS // 2
    return tuple(
        sorted({word[k : k + half] for word in words for k in range(0, len(word) - half + 1, half)})
    )


def header_secrets(value: str) -> list[str]:
    """The parts of a header value to mask: the whole value and each word of 8 or more characters."""
    return [value, *(word for word in value.split() if len(word) >= MIN_HEADER_WORD_CHARS)]


def mask(text: str) -> str:
    """`text` with every registered secret, and every piece of 8+ characters of its words, as `***`.

    Secrets are found in `text` as written and in `text` with escapes decoded; what is replaced
    is the written form (e.g. all of `abc%2Fdef`), and everything else is left as it was.
    """
    registry = _registry
    if registry is None or not text:
        return text
    spans = _secret_spans(text, registry)
    if not spans:
        return text
    pieces: list[str] = []
    position = 0  # the end of the last span masked
    for start, end in sorted(spans):
        if start > position or not pieces:
            pieces.append(text[position:start])
            pieces.append(MASK)
        position = max(position, end)
    pieces.append(text[position:])
    return "".join(pieces)


def excerpt(text: str, max_chars: int) -> str:
    """`mask(text)[:max_chars]`, without masking all of a long text.

    Cutting before masking is what leaks: the cut can leave the head of a secret that no longer
    matches it. Use this to keep the start of a long text, e.g. an error body.
    """
    registry = _registry
    if registry is None:
        return text[:max_chars]
    end = max_chars + registry.reach
    while end < len(text):
        masked = mask(text[:end])
        # Only the last `reach` characters of the head can mask differently with the rest of the
        # text behind them, and masking never lengthens text: the start is already final.
        if len(masked) >= max_chars + registry.reach:
            return masked[:max_chars]
        end *= 2
    return mask(text)[:max_chars]


def shorten(text: str, max_chars: int) -> str:
    """`text` masked on one line (runs of white space made one space), ending in `...` past `max_chars`."""
    line = excerpt(" ".join(text.split()), max_chars + 1)
    return line if len(line) <= max_chars else line[: max_chars - 3] + "..."


def short_error(text: str) -> str:
    """A masked, one-line error of at most 200 characters."""
    return shorten(text, ERROR_MAX_CHARS)


def mask_event(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: mask secrets in every value of a log line.

    Values that are not text, numbers or containers (an exception, an URL object) are rendered
    by their `repr`, as both renderers would, and masked.
    """
    if _registry is None:
        return event_dict
    for key, value in event_dict.items():
        event_dict[key] = _mask_nested(value)
    return event_dict


def _mask_nested(value: Any) -> Any:
    if isinstance(value, str):
        return mask(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [_mask_nested(item) for item in value]
    if isinstance(value, dict):
        return {_mask_nested(key): _mask_nested(item) for key, item in value.items()}
    return mask(repr(value))


def _secret_spans(text: str, registry: _Registry) -> list[tuple[int, int]]:
    """Where secrets or pieces of them are in `text`, plain or escaped: (start, end) pairs."""
    spans = _found(text, registry)
    view = text
    starts: list[int] | None = None  # where each character of `view` starts in `text`
    ends: list[int] | None = None  # and where it ends
    for _ in range(_DECODE_ROUNDS):
        decoded = _decode(view)
        if decoded is None:
            break
        view, view_starts, view_ends = decoded
        if starts is not None and ends is not None:
            view_starts = [starts[i] for i in view_starts]
            view_ends = [ends[i - 1] for i in view_ends]
        starts, ends = view_starts, view_ends
        spans.extend((starts[i], ends[j - 1]) for i, j in _found(view, registry))
    return spans


def _found(view: str, registry: _Registry) -> list[tuple[int, int]]:
    """Whole secrets and runs of MIN_FRAGMENT_CHARS-long pieces of secrets in `view`."""
    by_head = registry.by_head
    if by_head is None:
        spans = [match.span() for match in registry.whole.finditer(view)]
    else:
        spans = _whole_by_head(view, by_head)
    fragments = registry.fragments
    if not fragments or not _holds_an_anchor(view, registry):
        return spans
    n = MIN_FRAGMENT_CHARS
    run_start = run_end = -1
    for i in range(len(view) - n + 1):
        if view[i : i + n] in fragments:
            if i > run_end:
                if run_end >= 0:
                    spans.append((run_start, run_end))
                run_start = i
            run_end = i + n
    if run_end >= 0:
        spans.append((run_start, run_end))
    return spans


def _whole_by_head(view: str, by_head: dict[str, tuple[str, ...]]) -> list[tuple[int, int]]:
    """Every occurrence of a whole secret in `view`, overlapping ones too (masking merges them):
    at each position, the secrets that start with the text's next MIN_SECRET_CHARS characters."""
    spans: list[tuple[int, int]] = []
    head = MIN_SECRET_CHARS
    for i in range(len(view) - head + 1):
        candidates = by_head.get(view[i : i + head])
        if candidates is not None:
            spans.extend((i, i + len(s)) for s in candidates if view.startswith(s, i))
    return spans


def _holds_an_anchor(view: str, registry: _Registry) -> bool:
    """Whether `view` holds one of the anchors: a substring search for each of a few, a set
    look-up for each position of `view` when there are many."""
    anchor_set = registry.anchor_set
    if anchor_set is None:
        return any(anchor in view for anchor in registry.anchors)
    half = MIN_FRAGMENT_CHARS // 2
    return any(view[i : i + half] in anchor_set for i in range(len(view) - half + 1))


def _decode(view: str) -> tuple[str, list[int], list[int]] | None:
    """`view` with escapes decoded, and where each of its characters starts and ends in `view`;
    None when it has no escape."""
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    position = 0
    for match in _ESCAPE.finditer(view):
        start, end = match.span()
        chars.append(view[position:start])
        starts.extend(range(position, start))
        ends.extend(range(position + 1, start + 1))
        chars.append(_unescape(match))
        starts.append(start)
        ends.append(end)
        position = end
    if position == 0:
        return None
    chars.append(view[position:])
    starts.extend(range(position, len(view)))
    ends.extend(range(position + 1, len(view) + 1))
    return "".join(chars), starts, ends


def _unescape(match: re.Match[str]) -> str:
    kind = match.lastgroup
    raw = match.group(kind) if kind else ""
    if kind == "esc":
        return _JSON_ESCAPES[raw]
    if kind == "named":
        return _NAMED_REFS[raw]
    code = int(raw, 10 if kind == "decref" else 16)
    return chr(code) if code <= 0x10FFFF else "\ufffd"
