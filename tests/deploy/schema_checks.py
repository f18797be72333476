"""The custom resources' schemas the manifests are validated against (KEDA's ScaledObject,
prometheus-operator's PodMonitor), stored under tests/deploy/schemas, unknown fields refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from tests.deploy.kubernetes_checks import Doc

SCHEMAS = Path(__file__).parent / "schemas"
KEDA_SCHEMA = SCHEMAS / "keda-scaledobject-2.19.0.json"
PODMONITOR_SCHEMA = SCHEMAS / "prometheus-operator-podmonitor-0.93.0.json"


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused where the API server would prune them silently."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [strict(v) for v in schema]
    return schema


def crd_validator(schema_file: Path) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(strict(json.loads(schema_file.read_text())))


def keda_validator() -> jsonschema.Draft7Validator:
    """KEDA 2.19's ScaledObject schema, unknown fields refused."""
    return crd_validator(KEDA_SCHEMA)


def podmonitor_validator() -> jsonschema.Draft7Validator:
    """prometheus-operator 0.93.0's PodMonitor schema, unknown fields refused."""
    return crd_validator(PODMONITOR_SCHEMA)


def assert_valid_and_strict(
    validator: jsonschema.Draft7Validator, docs: list[Doc], field: str, misspelt: str
) -> None:
    """Every doc is valid, and the first with `spec.<field>` spelt `misspelt` is not (the
    schema refuses a misspelt field, as the API server would not)."""
    assert docs
    for doc in docs:
        validator.validate(doc)
    wrong = copy.deepcopy(docs[0])
    wrong["spec"][misspelt] = wrong["spec"].pop(field)
    assert not validator.is_valid(wrong)
