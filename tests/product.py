"""Where the product's packages are, for the tests that read its source (house rules, import
circles, the CLIs' one-home names)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the packages hifi ships (the tools, the demo and the tests aside)
PRODUCT = ("hifi", "config", "tenants", "connector", "auditor", "retrier", "spark_batch", "ingest")
