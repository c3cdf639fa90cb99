"""Provider: the OpenTofu provider's process start-up, and plan + apply of 50 queues, each against
a baseline in the same run.

- start-up: ``terraform-provider-enclave`` started as OpenTofu starts it (magic cookie,
  ``PLUGIN_CLIENT_CERT``; tests/provider/harness.py is the OpenTofu stand-in), timed from the
  start of the process to its handshake line on stdout, and to the first GetProviderSchema
  answer over mutual TLS. Baseline: starting a bare Python interpreter (``python -c pass``).
- 50 queues: what ``tofu apply`` does for a configuration of 50 new ``enclave_queue``s with the
  default ``-parallelism=10``: one provider process validates and plans them, a second one (an
  apply re-plans) plans and applies them, each apply returning once the queue is Ready.
  Baseline: the same 50 creates through the HTTP API (``AdminClient.create_queue`` +
  ``wait_ready``), 10 at a time, on the same stack. The two batches alternate (each in its own
  project, deleted and the stack let go quiet between batches); medians count.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from enclave_queue.testing import EnclaveStack
from tests.provider.conftest import plain_env
from tests.provider.harness import ProviderProcess, Tofu, errors_of

from . import Report, enclave_stack, main, median, quiet, say

NAME = "provider"
QUEUES = 50
PARALLELISM = 10  #: OpenTofu's default -parallelism
Q = "enclave_queue"


def start_up(logs: Path, rounds: int) -> dict[str, list[float]]:
    """Seconds to the handshake line and to the first schema answer; and a bare interpreter."""
    times: dict[str, list[float]] = {"handshake": [], "schema": [], "python": []}
    for index in range(rounds):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times["python"].append(time.perf_counter() - started)
        started = time.perf_counter()
        process = ProviderProcess.start(plain_env(logs), logs / f"start-{index}.log")
        try:
            Tofu(process)  # GetProviderSchema
            times["schema"].append(time.perf_counter() - started)
            times["handshake"].append(process.handshake_seconds)
        finally:
            process.stop()
    return times


def _tofu(stack: EnclaveStack, logs: Path, label: str, project: str) -> Tofu:
    tofu = Tofu(ProviderProcess.start(plain_env(logs), logs / f"{label}.log"))
    diags = tofu.configure(endpoint=stack.api_url, token=stack.token, project=project)
    if errors_of(diags):
        raise RuntimeError(f"configure failed: {diags}")
    return tofu


def via_provider(stack: EnclaveStack, logs: Path, project: str, names: list[str]) -> dict[str, float]:
    """``tofu plan`` then ``tofu apply`` of ``names``: seconds of each command, processes included."""
    started = time.perf_counter()
    planner = _tofu(stack, logs, f"{project}-plan", project)
    try:
        with ThreadPoolExecutor(PARALLELISM) as pool:
            plans = list(pool.map(lambda n: _plan(planner, n), names))
    finally:
        planner.process.stop()
    planned = time.perf_counter()
    applier = _tofu(stack, logs, f"{project}-apply", project)
    try:
        def apply(name: str) -> None:
            state, diags = applier.apply(Q, _plan(applier, name))
            if errors_of(diags) or state is None:
                raise RuntimeError(f"apply of {name} failed: {diags}")

        with ThreadPoolExecutor(PARALLELISM) as pool:
            list(pool.map(apply, names))
    finally:
        applier.process.stop()
    done = time.perf_counter()
    if len(plans) != len(names):
        raise RuntimeError("missing plans")
    return {"plan": planned - started, "apply": done - planned, "total": done - started}


def _plan(tofu: Tofu, name: str) -> Any:
    config = tofu.config(Q, name=name)
    if errors_of(tofu.validate(Q, config)):
        raise RuntimeError(f"{name} does not validate")
    plan = tofu.plan(Q, None, config)
    if errors_of(plan.diagnostics):
        raise RuntimeError(f"plan of {name} failed: {plan.diagnostics}")
    return plan


def via_api(stack: EnclaveStack, project: str, names: list[str]) -> dict[str, float]:
    started = time.perf_counter()
    with stack.admin() as admin, ThreadPoolExecutor(PARALLELISM) as pool:
        def create(name: str) -> None:
            admin.create_queue(project, {"name": name})
            admin.wait_ready(project, name, timeout=120)

        list(pool.map(create, names))
    return {"total": time.perf_counter() - started}


def clean(stack: EnclaveStack, project: str, names: list[str]) -> None:
    with stack.admin() as admin, ThreadPoolExecutor(PARALLELISM) as pool:
        def delete(name: str) -> None:
            admin.delete_queue(project, name)
            admin.wait_deleted(project, name, timeout=120)

        list(pool.map(delete, names))
    quiet(stack)


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    start_rounds, batch_rounds = (5, 1) if quick else (20, 3)
    report.info.update({"queues": QUEUES, "parallelism": PARALLELISM, "start_rounds": start_rounds,
                        "batch_rounds": batch_rounds})
    with tempfile.TemporaryDirectory(prefix="bench-provider-") as tmp:
        logs = Path(tmp)
        say(f"provider: start-up, {start_rounds} rounds")
        times = start_up(logs, start_rounds)
        report.info["start_s"] = {k: [round(v, 3) for v in vs] for k, vs in times.items()}
        python = median(times["python"]) * 1000
        report.add("start-up to handshake line", median(times["handshake"]) * 1000, "ms", baseline=python,
                   baseline_case="python -c pass")
        report.add("start-up to first GetProviderSchema (mTLS)", median(times["schema"]) * 1000, "ms",
                   baseline=python, baseline_case="python -c pass")

        results: dict[str, list[dict[str, float]]] = {"provider": [], "api": []}
        with enclave_stack() as stack:
            quiet(stack)
            for index in range(batch_rounds):
                order = ["api", "provider"] if index % 2 == 0 else ["provider", "api"]
                for path in order:
                    project = f"bench-{path}-{index}"
                    names = [f"q{n:02d}" for n in range(QUEUES)]
                    say(f"provider: {QUEUES} queues via {path} (round {index + 1}/{batch_rounds})")
                    if path == "provider":
                        results[path].append(via_provider(stack, logs, project, names))
                    else:
                        results[path].append(via_api(stack, project, names))
                    clean(stack, project, names)
        report.info["batch_s"] = {k: [{p: round(v, 2) for p, v in r.items()} for r in rs] for k, rs in results.items()}
        api_total = median([r["total"] for r in results["api"]])
        report.add(f"tofu plan + apply, {QUEUES} queues", median([r["total"] for r in results["provider"]]), "s",
                   baseline=api_total, baseline_case=f"{QUEUES} API creates + wait Ready, {PARALLELISM} at a time")
        report.add(f"tofu apply only, {QUEUES} queues", median([r["apply"] for r in results["provider"]]), "s",
                   baseline=api_total, baseline_case=f"{QUEUES} API creates + wait Ready, {PARALLELISM} at a time",
                   note="includes re-planning each queue and a provider process start, as tofu apply does")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.provider")
