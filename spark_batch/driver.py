"""spark-submit's driver file for hifi's batch jobs (`spark-batch package` copies it beside the zip).

    spark-submit --py-files hifi-spark.zip spark_batch_driver.py reconcile --archive PATH ...

It runs `spark-batch` with the arguments that follow it. When the job's packages cannot be
imported (the zip not passed with `--py-files`) or a dependency is missing from the driver's
Python, it says which in one line on stderr and exits 2, without a traceback.
"""

from __future__ import annotations

import sys

# as spark_batch.package.PACKAGES: this file runs before the zip is known to be there
_JOB_PACKAGES = ("spark_batch", "config", "hifi")


def run() -> None:
    """Import the command from the zip and run it."""
    try:
        from spark_batch.cli import main
    except ImportError as exc:
        sys.stderr.write(f"spark-batch: {why_not_importable(exc)}\n")
        raise SystemExit(2) from None
    main()


def why_not_importable(exc: ImportError) -> str:
    """What to do about an import of the job that failed, in one line."""
    name = exc.name or str(exc)
    if name.partition(".")[0] in _JOB_PACKAGES:
        return (
            f"cannot import {name}: pass the job's zip to spark-submit with"
            " --py-files hifi-spark.zip (spark-batch package --out DIR builds it)"
        )
    return (
        f"the driver's Python cannot import {name}: install hifi's dependencies there"
        " (pip install 'hifi-streams[spark]')"
    )


if __name__ == "__main__":
    run()
