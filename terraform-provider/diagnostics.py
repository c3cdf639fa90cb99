"""How the provider reports failures as diagnostics: every API error becomes one error diagnostic
whose summary is ``Unable to <action> <kind> '<name>': <the API's sentence>``, pointing at the
attribute the API named when it refused a setting. Nothing the API raises reaches gRPC as an
exception."""

from __future__ import annotations

from typing import Any

from tf.utils import Diagnostics

from enclave_queue.errors import EnclaveError


def api_error(diags: Diagnostics, action: str, kind: str, name: Any, exc: EnclaveError) -> None:
    errors = [e for e in exc.errors or [] if e.get("field")]
    detail = "; ".join(f"{e['field']} {e['message']}" for e in errors if e.get("message"))
    path = [str(errors[0]["field"]).split(".")[0]] if errors else None
    diags.add_error(f"Unable to {action} {kind} '{name}': {exc}", detail or str(exc), path=path)


def tf_path(path: tuple[str | int, ...]) -> list[Any]:
    """tf's diagnostic path: attribute names as strings, list indexes as 1-tuples."""
    return [step if isinstance(step, str) else (step,) for step in path]
