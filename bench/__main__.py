"""``python -m bench [--smoke | --profile] [--only NAMES] [--sqs ministack|moto]``

Runs the ceilings first, then the relay's scenarios, on one set of servers started for the run
(local SQS server, relayer-stub) plus the machine's MariaDB and Redis. Writes
bench/results/<name>.json and .md and prints the markdown table. Exit status 1 if any scenario
broke (lost or duplicated work, wrong tier, errors at light load); targets never change the
exit status: they are reported, pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import sys
from datetime import UTC, datetime

from bench import experiments, profiling, report, table
from bench.infra import ROOT
from bench.runner import RESULTS, run_all
from bench.scales import FULL, PROFILE, SCENARIOS, SMOKE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="every scenario, tiny, no thresholds")
    mode.add_argument("--profile", action="store_true", help="py-spy on the consumer and the API")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument(
        "--sqs",
        default=os.environ.get("RELAY_LOCAL_SQS", "ministack"),
        help="ministack | localstack | moto",
    )
    parser.add_argument(
        "--experiment",
        help="comma-separated proposed changes to try by monkeypatching the launched API and "
        "consumers (bench/experiments.py); results are labelled with them",
    )
    parser.add_argument(
        "--accept-rates", help="comma-separated offered rates for the accept path (req/s)"
    )
    parser.add_argument(
        "--consumer-cases", help="comma-separated LATENCYxPROCESSES, e.g. 0x1,200x2"
    )
    parser.add_argument(
        "--spend-policy",
        choices=("rules", "budget", "fees"),
        help="the API's client has a spend policy its load keeps: the per-transaction rules, "
        "or those and a daily budget (a reservation in the database per request), or those and "
        "a fee budget",
    )
    parser.add_argument("--name", help="results file name (default: kind + UTC time)")
    parser.add_argument("--note", action="append", default=[], help="a note stored with results")
    args = parser.parse_args(argv)
    if args.profile and not profiling.available():
        parser.error("py-spy is not installed: run `uv sync` (it is in the dev group)")
    scale = SMOKE if args.smoke else PROFILE if args.profile else FULL
    if args.accept_rates:
        rates = tuple(int(r) for r in args.accept_rates.split(","))
        scale = dataclasses.replace(
            scale,
            accept_rates=rates,
            # --profile with chosen rates profiles the first of them
            profile_rate=rates[0] if scale.profile_rate is not None else None,
        )
    if args.consumer_cases:
        cases = tuple(
            (int(latency), int(procs))
            for latency, _, procs in (c.partition("x") for c in args.consumer_cases.split(","))
        )
        scale = dataclasses.replace(scale, consumer_cases=cases)
    if args.experiment:
        os.environ["BENCH_EXPERIMENTS"] = args.experiment  # inherited by the launchers
        experiments.enabled()  # rejects unknown names now rather than in every child
    else:
        os.environ.pop("BENCH_EXPERIMENTS", None)

    if args.spend_policy:
        os.environ["BENCH_SPEND_POLICY"] = args.spend_policy  # read where the client is made
    else:
        os.environ.pop("BENCH_SPEND_POLICY", None)
    results, failures = asyncio.run(run_all(args, scale))
    results["notes"] = args.note
    results["spend_policy"] = args.spend_policy
    results["experiments"] = sorted(experiments.enabled())
    rows = report.rows(results, smoke=args.smoke)
    results["table"] = [row.as_dict() for row in rows]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    kind = results["kind"]
    if results["experiments"]:
        kind += "-experiment-" + "+".join(results["experiments"])
    name = args.name or (f"{kind}-latest" if args.smoke else f"{kind}-{stamp}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    json_path = RESULTS / f"{name}.json"
    json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    header = (
        f"Relay benchmark ({kind}), {results['started_at']}, SQS: "
        f"{results.get('sqs_server')}, {results['machine']['cpus']} CPUs, load "
        f"{results['load_before_scenario'].get('ceiling.sqs.p4', results['machine']['loadavg'])}"
        f" -> {results['load_at_end']}, {results['duration_s']} s"
    )
    text = header + "\n\n" + table.markdown(rows) + "\n"
    if results.get("profiles"):
        text += "\n" + "\n".join(
            profiling.render(stem, summary) for stem, summary in results["profiles"].items()
        )
    (RESULTS / f"{name}.md").write_text(text)
    sys.stdout.write(text)
    sys.stdout.write(f"\nresults: {json_path.relative_to(ROOT)}\n")
    if failures:
        sys.stdout.write("\nSCENARIOS FAILED:\n" + "".join(f"- {f}\n" for f in failures))
        sys.stdout.write(f"process logs: {results['workdir']}\n")
        return 1
    if args.smoke:
        shutil.rmtree(results["workdir"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
