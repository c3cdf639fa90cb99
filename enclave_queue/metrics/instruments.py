"""The control process's metrics registry and the instruments updated as things happen: reconcile
durations and errors (controller/reconciler.py), account claims pushed to the broker, and
failures (controller/accounts.py).

One registry a Runtime owns (not prometheus_client's global one, so several stacks in one test
process never collide). What is read at scrape time (collector.py) is attached to it once the
state store is open; ``render`` refreshes that, then exposes everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric


class ScrapeCollector(Protocol):
    """A prometheus_client collector whose numbers are read (asynchronously) before each exposition."""

    def collect(self) -> Iterable[Metric]: ...

    async def refresh(self) -> None: ...


class ControlMetrics:
    """The registry and the control plane's instruments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconcile_seconds = Histogram(
            "enclave_reconcile_duration_seconds", "Time one reconcile of one queue took, failed ones included.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=self.registry)
        self.reconcile_errors = Counter(
            "enclave_reconcile_errors", "Reconciles that failed (each is retried).", registry=self.registry)
        self.account_pushes = Counter(
            "enclave_account_pushes", "Queue account claims given to the broker (no configuration reload).",
            registry=self.registry)
        self.queues: Optional[ScrapeCollector] = None

    def attach(self, queues: ScrapeCollector) -> None:
        """Start exposing what ``queues`` reads at scrape time (once the state store is open), in
        place of what an earlier attach gave (a start that began again)."""
        if self.queues is not None:
            self.registry.unregister(self.queues)  # type: ignore[arg-type]
        self.queues = queues
        self.registry.register(queues)  # type: ignore[arg-type]  # a Collector by its methods

    async def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition (text format, or OpenMetrics if ``accept`` asks for it) and its content type."""
        if self.queues is not None:
            await self.queues.refresh()
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
