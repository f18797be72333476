"""Every module of the tools that run as commands (`make bench`, `make chaos`, `make demo`) imports."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import bench
import chaos
import devstack

_MODULES = sorted(
    info.name
    for package in (bench, chaos, devstack)
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    if not info.name.endswith("__main__")
)


@pytest.mark.parametrize("module", _MODULES)
def test_module_imports(module: str) -> None:
    """An import cycle or a name moved elsewhere fails here, not at the start of a long run."""
    importlib.import_module(module)
