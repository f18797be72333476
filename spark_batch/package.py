"""The job as `spark-submit` ships it: a zip of the hifi packages it imports, and its driver file.

    spark-batch package --out DIR   writes DIR/hifi-spark.zip and DIR/spark_batch_driver.py

    spark-submit --master spark://HOST:7077 --py-files DIR/hifi-spark.zip \\
        DIR/spark_batch_driver.py reconcile --archive PATH --from DATE --out OUT

The zip holds `spark_batch` and what it imports of hifi (`auditor`, `config`, `hifi`), as
their source files, so the driver's Python needs only the third-party dependencies (pyarrow,
pydantic, click, matplotlib...: `pip install 'hifi-streams[spark]'`, which may leave hifi's own
packages out of it). The same sources give the same bytes (sorted entries, fixed times), so a
zip on object storage can be compared with a rebuilt one. The driver file is
`spark_batch/driver.py`, copied beside the zip: spark-submit wants a Python file to run.
"""

from __future__ import annotations

import importlib.util
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hifi.errors import ConfigError

#: the packages the job imports, zipped whole (the accounting model is hifi.accounting)
PACKAGES = ("spark_batch", "config", "hifi")
ZIP_NAME = "hifi-spark.zip"
DRIVER_NAME = "spark_batch_driver.py"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can record: no build time in the bytes
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Packaged:
    """What `package` wrote: the zip, the driver file, and how many files the zip holds."""

    zip_path: Path
    driver_path: Path
    files: int


def package(out: Path) -> Packaged:
    """Write the job's zip and driver file into `out` (created if needed; both replaced)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a directory")
    out.mkdir(parents=True, exist_ok=True)
    members = sorted(
        (f"{name}/{path.relative_to(root).as_posix()}", path)
        for name in PACKAGES
        for root in [_package_dir(name)]
        for path in _files_under(root)
    )
    zip_path, building = out / ZIP_NAME, out / f".{ZIP_NAME}.tmp"
    with zipfile.ZipFile(building, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in members:
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    building.replace(zip_path)
    driver_path = out / DRIVER_NAME
    shutil.copyfile(_package_dir("spark_batch") / "driver.py", driver_path)
    return Packaged(zip_path, driver_path, len(members))


def _package_dir(name: str) -> Path:
    """Where the package `name` is imported from (the checkout for an editable install)."""
    spec = importlib.util.find_spec(name)
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise ConfigError(f"package {name}: not importable here; install hifi-streams first")
    return Path(next(iter(locations)))


def _files_under(root: Path) -> list[Path]:
    return [
        path
        for path in root.rglob("*")
        if path.is_file()
        and not _SKIPPED_DIRS.intersection(path.relative_to(root).parts)
        and not path.name.endswith(_SKIPPED_SUFFIXES)
    ]
