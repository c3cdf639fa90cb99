"""A queue's credentials: what ``enclave queue credentials`` prints, from a dict or the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import SpecError

ENV_PREFIX = "ENCLAVE_QUEUE_"


@dataclass(frozen=True)
class Credentials:
    #: the broker's URL; on a cluster, every node's, comma-separated (the API's ``broker_urls``)
    broker_url: str
    username: str
    password: str = field(repr=False)
    subject: str
    inbox_prefix: str
    stream: str
    consumer: str = "worker"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Credentials:
        """From the JSON object of ``enclave queue credentials --json`` (or the API)."""
        urls = data.get("broker_urls")
        if isinstance(urls, list) and urls and all(isinstance(u, str) and u for u in urls):
            single = data.get("broker_url")
            if single and single not in urls:  # one was changed (a container's address, say): which holds?
                rule = "must be one of broker_urls (the cluster's nodes), or given without them"
                raise SpecError(f"broker_url {rule}: {single!r} is not in {urls!r}. Change both, or set only one.",
                                errors=[{"field": "broker_url", "message": rule}])
            data = {**data, "broker_url": ",".join(urls)}  # a cluster: any node will do
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n != "consumer" and not data.get(n)]
        if missing:
            raise SpecError(f"Credentials are missing {', '.join(missing)}.",
                            errors=[{"field": n, "message": "is required"} for n in missing])
        return cls(**{n: str(data[n]) for n in names if n in data})

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        """From the ``ENCLAVE_QUEUE_*`` variables that ``enclave queue credentials --env`` prints."""
        env = os.environ if env is None else env
        data: dict[str, Any] = {f.name: env.get(ENV_PREFIX + f.name.upper(), "") for f in fields(cls)}
        urls = [url.strip() for url in env.get(ENV_PREFIX + "BROKER_URLS", "").split(",") if url.strip()]
        if urls:  # a cluster's nodes: every one, as from_dict takes them
            data["broker_urls"] = urls
        try:
            return cls.from_dict({k: v for k, v in data.items() if v})
        except SpecError as exc:
            if any(e["message"] != "is required" for e in exc.errors):
                raise
            missing = ", ".join(ENV_PREFIX + e["field"].upper() for e in exc.errors)
            raise SpecError(f"The environment is missing {missing}; see 'enclave queue credentials --env'.",
                            errors=exc.errors) from None

    @property
    def servers(self) -> list[str]:
        """The broker URLs to connect to (one, or a cluster's nodes)."""
        return [url.strip() for url in self.broker_url.split(",") if url.strip()]

    def as_dict(self) -> dict[str, str]:
        return asdict(self)
