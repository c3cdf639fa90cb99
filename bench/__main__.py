"""``python -m bench [--quick]``: every benchmark, one after the other, one table at the end.

bench.memory reuses the broker readings bench.create's bursts took, so the queues are created once.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from . import (
    Report,
    console,
    create,
    deadletters,
    durability,
    finish,
    idle,
    latency,
    memory,
    parse_args,
    provider,
    putmany,
    receive,
    say,
    send,
)


def run_all(quick: bool) -> tuple[list[Report], list[str]]:
    reports: list[Report] = []
    failed: list[str] = []
    samples: dict[str, Any] = {}
    steps = [
        ("send", lambda: send.run(quick)),
        ("putmany", lambda: putmany.run(quick)),
        ("receive", lambda: receive.run(quick)),
        ("durability", lambda: durability.run(quick)),
        ("deadletters", lambda: deadletters.run(quick)),
        ("latency", lambda: latency.run(quick)),
        ("idle", lambda: idle.run(quick)),
        ("console", lambda: console.run(quick)),
        ("provider", lambda: provider.run(quick)),
        ("create", lambda: create.run(quick, samples)),
        ("memory", lambda: memory.run(quick, samples)),
    ]
    for name, step in steps:
        if name == "memory" and "create" in failed:
            failed.append("memory (no readings: create failed)")
            continue
        try:
            reports += step()
        except Exception:  # one broken benchmark should not hide the others' numbers
            traceback.print_exc()
            failed.append(name)
    return reports, failed


def main() -> None:
    args = parse_args("Every Enclave Queues benchmark (see docs/benchmarks.md).")
    started = time.perf_counter()
    reports, failed = run_all(args.quick)
    say(f"all benchmarks: {time.perf_counter() - started:.0f} s")
    code = finish(reports, save_results=not args.no_save)
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
    raise SystemExit(code or (1 if failed else 0))


if __name__ == "__main__":
    main()
