"""Validation errors as one line each: the key, what is wrong and allowed, the value given (not a header's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

# keys whose values are never echoed: they may hold secrets
SECRET_KEYS = ("headers", "client_secret", "proxy", "signing", "password")


def describe(
    path: Path | str,
    exc: ValidationError,
    model: type[BaseModel],
    *,
    secret_keys: tuple[str, ...] = SECRET_KEYS,
) -> str:
    """One line per problem of the file (or other place) `path`, never echoing the value of a
    key in `secret_keys` (nor below one)."""
    return "; ".join(
        f"{path}: {_problem(error, model, secret_keys)}" for error in exc.errors(include_url=False)
    )


def _problem(error: ErrorDetails, model: type[BaseModel], secret_keys: tuple[str, ...]) -> str:
    """One validation error: the key, what is wrong and allowed, and the value given (not for secrets)."""
    loc = error["loc"]
    key = ".".join(str(part) for part in loc)
    if error["type"] == "extra_forbidden":
        table = _model_at(model, loc[:-1]) or model
        names = (field.alias or name for name, field in table.model_fields.items())
        return f"unknown key {key!r}; allowed keys: {', '.join(sorted(names))}"
    if error["type"] == "missing":
        return f"required key {key!r} is missing"
    message = error["msg"]
    if error["type"] == "value_error":  # our own validators: their text without "Value error, "
        message = str(error.get("ctx", {}).get("error", message))
    if not loc:  # a check across keys: its message names the key
        return message
    if message.startswith("key '") and _model_at(model, loc) is not None:
        return f"key '{key}.{message.removeprefix('key ')[1:]}"  # a check across a table's keys
    accepted = _allowed(loc, model)
    hint = f"; allowed: {accepted}" if accepted else ""
    parent = _model_at(model, loc[:-1])
    field = parent.model_fields.get(str(loc[-1])) if parent is not None else None
    if field is not None and field.description:
        hint += f" ({field.description})"
    given = error.get("input")
    if any(str(part) in secret_keys for part in loc) or (
        key.startswith("tls_") and isinstance(given, str)
    ):
        shown = ""  # a header value may be a secret; a TLS error names the resolved path itself
    else:
        shown = f" (got {_short(given)})"
    return f"key {key!r}: {message}{hint}{shown}"


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model of the table at `loc` (`()`: `model` itself); None when `loc` is not a table."""
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        found = next(
            (
                kind
                for kind in (field.annotation, *get_args(field.annotation))
                if isinstance(kind, type) and issubclass(kind, BaseModel)
            ),
            None,
        )
        if found is None:
            return None
        model = found
    return model


def _allowed(loc: tuple[int | str, ...], model: type[BaseModel]) -> str | None:
    """What a number or boolean key (or an element of a list of numbers) accepts, from its bounds;
    a key of a table (`accounting.settle_s`) by its table's bounds."""
    table = _model_at(model, loc[:1])
    if table is not None and len(loc) > 1:
        return _allowed(loc[1:], table)
    field = model.model_fields.get(str(loc[0]))
    if field is None:
        return None
    annotation, metadata = field.annotation, list(field.metadata)
    if len(loc) == 2 and get_origin(annotation) is list:
        (element,) = get_args(annotation)
        annotation, *extras = get_args(element) or (element,)
        metadata = [m for extra in extras for m in getattr(extra, "metadata", [])]
    elif len(loc) != 1:
        return None
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer" + _bounds(metadata)
    if annotation is float:
        return "a number" + _bounds(metadata) + ", not nan or inf"
    return None


def _bounds(metadata: list[Any]) -> str:
    """' from 1 to 1024', ' greater than 0 and at most 600', or '' without bounds."""
    ge = gt = le = None
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            ge = item.ge
        elif isinstance(item, annotated_types.Gt):
            gt = item.gt
        elif isinstance(item, annotated_types.Le):
            le = item.le
    if ge is not None and le is not None:
        return f" from {ge} to {le}"
    parts = [
        f"{words} {value}"
        for words, value in (("at least", ge), ("greater than", gt), ("at most", le))
        if value is not None
    ]
    return " " + " and ".join(parts) if parts else ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
