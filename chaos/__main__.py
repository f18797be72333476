"""`make chaos`: every scenario against real processes; exits non-zero on any loss or wrong dead letter."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from chaos.harness import stage
from chaos.registry import SCENARIOS, run
from chaos.scenarios import FULL, QUICK, Result


async def run_all(work_dir: Path, quick: bool, only: list[str]) -> list[Result]:
    size = QUICK if quick else FULL
    results = []
    async with stage(work_dir) as scene:
        for scenario in SCENARIOS:
            if only and scenario.name not in only:
                continue
            result = await run(scene, scenario, size)
            print(result.line(), flush=True)
            results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the short version run by make test")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=[s.name for s in SCENARIOS],
        help="run only this scenario (repeatable)",
    )
    parser.add_argument("--work-dir", type=Path, default=Path(".chaos"), help="logs and catalog")
    args = parser.parse_args()
    results = asyncio.run(run_all(args.work_dir, args.quick, args.only))
    lost = sum(r.account.lost for r in results)
    wrong = sum(r.account.wrong_dlq + r.account.missing_dlq for r in results)
    audits_off = sum(1 for r in results if r.audit is not None and not r.audit.ok)
    print(f"chaos: scenarios={len(results)} lost={lost} wrong_dlq={wrong} audits_off={audits_off}")
    sys.exit(0 if results and all(r.ok for r in results) else 1)


if __name__ == "__main__":
    main()
