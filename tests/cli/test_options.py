"""The defaults and names the command lines show (so `--help` needs none of hifi's runtime) are the runtime's own."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.product import PRODUCT, ROOT

# each name a CLI shows and its runtime uses, and the one light module that defines it
HOMES = {
    "MAX_RATE_PER_S": "connector/defaults.py",
    "CHECKPOINT_EVERY_S": "connector/defaults.py",
    "CHECKPOINT_EVERY_RECORDS": "connector/defaults.py",
    "GROUP_ID": "auditor/defaults.py",
    "DEFAULT_ROLL_S": "auditor/defaults.py",
    "RETRIER_GROUP_ID": "retrier/defaults.py",
    "ZIP_NAME": "spark_batch/package.py",
    "DRIVER_NAME": "spark_batch/package.py",
    "DEFAULT_MASTER": "spark_batch/session.py",
    "STREAMS_ENV_VAR": "hifi/environment.py",
    "REDIS_URL_ENV_VAR": "hifi/environment.py",
    "AUDITOR_URL_ENV": "hifi/environment.py",
    "RUNBOOK_URL_ENV": "retrier/dashboard/runbook.py",
    "INSTANCE_ID_ENV": "hifi/environment.py",
    "LOG_LEVELS": "hifi/defaults.py",
    "METRICS_HOST": "hifi/defaults.py",
}
# names defined again elsewhere for another meaning (config.destination: a destination's rate
# limits)
OTHER_MEANINGS = {("MAX_RATE_PER_S", "config/destination.py")}


def _module_constants(path: Path) -> set[str]:
    """The names a module assigns at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            names |= {element.id for element in elements if isinstance(element, ast.Name)}
    return names


def test_each_shown_default_is_defined_in_one_light_module() -> None:
    """A default or variable name that a CLI shows in `--help` and the runtime uses is defined in
    one module (the CLI and the runtime import it), never copied into the CLI."""
    found: dict[str, list[str]] = {name: [] for name in HOMES}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for name in _module_constants(path) & HOMES.keys():
                if (name, where) not in OTHER_MEANINGS:
                    found[name].append(where)
    assert found == {name: [home] for name, home in HOMES.items()}
