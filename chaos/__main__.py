"""`make chaos`: every scenario against real processes, then the reply fuzz (`chaos.reply_fuzz`);
exits non-zero on any loss, wrong dead letter or fuzz failure."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from chaos.harness import stage
from chaos.registry import SCENARIOS, run
from chaos.scenarios import FULL, QUICK, Result

FUZZ = "reply_fuzz"  # not a scenario of the stage: no broker, no daemon


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
        choices=[*(s.name for s in SCENARIOS), FUZZ],
        help="run only this scenario (repeatable)",
    )
    parser.add_argument("--work-dir", type=Path, default=Path(".chaos"), help="logs and catalog")
    parser.add_argument(
        "--fuzz-cases",
        type=int,
        default=100_000,
        help=f"replies the {FUZZ} scenario sends the connector's HTTP client (--quick: 2,000)",
    )
    parser.add_argument("--fuzz-seed", type=int, default=None, help=f"{FUZZ}: hypothesis's seed")
    args = parser.parse_args()
    scenarios_ok = fuzz_ok = True
    if not args.only or set(args.only) - {FUZZ}:
        results = asyncio.run(run_all(args.work_dir, args.quick, args.only))
        lost = sum(r.account.lost for r in results)
        wrong = sum(r.account.wrong_dlq + r.account.missing_dlq for r in results)
        audits_off = sum(1 for r in results if r.audit is not None and not r.audit.ok)
        print(
            f"chaos: scenarios={len(results)} lost={lost} wrong_dlq={wrong} audits_off={audits_off}"
        )
        scenarios_ok = bool(results) and all(r.ok for r in results)
    if not args.only or FUZZ in args.only:
        from chaos import reply_fuzz  # hypothesis and the tests' harness, only when it runs

        cases = min(args.fuzz_cases, 2_000) if args.quick else args.fuzz_cases
        fuzz_ok = reply_fuzz.fuzz(cases, args.fuzz_seed)
    sys.exit(0 if scenarios_ok and fuzz_ok else 1)


if __name__ == "__main__":
    main()
