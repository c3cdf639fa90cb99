"""The ``enclave_queue`` resource's pure layer: its attributes, plan-time validation, defaults and
plan, the password's rotation (``password_version``), and the mapping between OpenTofu state and
the HTTP API's queue object.

No I/O and no gRPC: queue_resource.py is the glue that calls the API with what this module
computes, and tests/provider/test_queue_model.py exercises it alone. Values are what ``tf``
hands over: ``None`` for null, ``tf.types.Unknown`` for a value known only at apply (a refined
unknown arrives as a plain Unknown, see tfcompat.py), numbers as int or float, lists as lists.
The rules and defaults come from ``enclave_queue.spec``, so the provider refuses exactly what
the API would refuse, before anything is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

from tf.types import Unknown

from enclave_queue.spec import (
    BACKOFF_RULE,
    DEFAULT_GRACE,
    GRACE_RULE,
    HEADER_ROOM,
    LIMIT_RULE,
    LIMITS,
    MAX_BACKOFF_STEPS,
    MAX_GRACE,
    MUTABLE,
    NAME_RULE,
    PRIORITIES_RULE,
    PROJECT_PATTERN,
    PROJECT_RULE,
    QUEUE_NAME_PATTERN,
    REPLICA_CHOICES,
    REPLICAS_RULE,
    QueueSpec,
    default_max_bytes,
    rule,
)

#: the name patterns, matched in full (``fullmatch``: ``re.match`` with ``$`` lets a final newline through)
NAME, PROJECT = QUEUE_NAME_PATTERN, PROJECT_PATTERN
STEP_LIMITS = LIMITS["visibility_timeout_seconds"]  #: each retry_backoff_seconds entry: seconds
#: the boolean settings and their defaults
FLAGS = {"priorities": QueueSpec.model_fields["priorities"].default}

#: settings that change in place (spec.MUTABLE); name and project replace the queue
ARGUMENTS = ("name", "project", *MUTABLE)
REPLACES = ("name", "project")
#: outputs fixed for the life of a queue: they derive from its id, name and project
STABLE_OUTPUTS = ("id", "password_secret", "subject", "username")
#: outputs the server reports from its own settings (a restart of ``enclave up`` on another
#: broker port changes them), so any apply may return new values
SERVER_OUTPUTS = ("broker_url", "internal_broker_url")
OUTPUTS = tuple(sorted(STABLE_OUTPUTS + SERVER_OUTPUTS))
ATTRIBUTES = ARGUMENTS + OUTPUTS  #: what the API's queue object holds (and the enclave_queue data source)

#: the rotation's arguments and their defaults, kept in the state only (the API's queue object has
#: neither): the password's version as the configuration counts it, whose rise rotates the
#: password, and the seconds a rotation lets the old password keep logging in
ROTATION = {"password_version": 1, "password_grace_seconds": DEFAULT_GRACE}
MAX_VERSION = 2**53 - 1  #: the largest password_version: a whole number any cty number holds exactly
VERSION_RULE = f"a whole number from 1 to {MAX_VERSION}"
PASSWORD = "password"  #: the app user's password, a sensitive output: new after each rotation
RESOURCE_ATTRIBUTES = ATTRIBUTES + tuple(ROTATION) + (PASSWORD,)


@dataclass(frozen=True)
class Problem:
    """One plan-time error: the attribute path (``("retry_backoff_seconds", 2)``) and a sentence."""

    path: tuple[str | int, ...]
    summary: str
    detail: str


def known(value: Any) -> bool:
    """True for a value that is set and known now (not null, not unknown)."""
    return value is not None and value is not Unknown


def whole(value: Any) -> Optional[int]:
    """An OpenTofu number as an int, or None if it is not a whole number (cty sends integers as
    msgpack ints, other numbers as floats, and very large or precise ones as strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            number = Decimal(value)
        except InvalidOperation:
            return None
        return int(number) if number.is_finite() and number == number.to_integral_value() else None
    return None


def _in_range(value: Any, low: int, high: int) -> bool:
    number = whole(value)
    return number is not None and low <= number <= high


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def validate(config: Mapping[str, Any]) -> list[Problem]:
    """Every rule the API would enforce that can be checked on the known part of ``config``,
    each as a Problem naming its attribute. Unknown values are skipped: they are checked again
    when OpenTofu validates the configuration once they are known, before apply."""
    problems: list[Problem] = []

    def bad(path: tuple[str | int, ...], detail: str) -> None:
        problems.append(Problem(path, f"Invalid {path[0]}", detail))

    for field, pattern, text in (("name", NAME, NAME_RULE), ("project", PROJECT, PROJECT_RULE),
                                 ("dead_letter_queue", NAME, NAME_RULE)):
        value = config.get(field)
        if known(value) and not (isinstance(value, str) and pattern.fullmatch(value)):
            bad((field,), f"{field} must be {text} (got {_show(value)}).")
    name, dlq = config.get("name"), config.get("dead_letter_queue")
    if known(name) and dlq == name:
        bad(("dead_letter_queue",), "dead_letter_queue must name another queue, not the queue itself.")

    for field, (low, _, high) in LIMITS.items():
        value = config.get(field)
        if known(value) and not _in_range(value, low, high):
            bad((field,), f"{field} must be {rule(field)} (got {_show(value)}).")
    replicas = config.get("replicas")
    if known(replicas) and whole(replicas) not in REPLICA_CHOICES:
        bad(("replicas",), f"replicas must be {REPLICAS_RULE} (got {_show(replicas)}).")

    # the dedupe window within the retention: an unset value is its default; an unknown value, or
    # one out of its own range (a problem already), is not compared
    window, hours = (LIMITS[f][1] if config.get(f) is None else config.get(f)
                     for f in ("dedupe_window_seconds", "retention_hours"))
    if (known(window) and known(hours) and _in_range(window, *LIMITS["dedupe_window_seconds"][::2])
            and _in_range(hours, *LIMITS["retention_hours"][::2])):
        window, hours = whole(window) or 0, whole(hours) or 0
        if window > hours * 3600:
            bad(("dedupe_window_seconds",),
                f"dedupe_window_seconds ({window}) must not exceed retention_hours ({hours} h = {hours * 3600} s): "
                "a key cannot outlive the messages it guards.")

    # room for one message of the largest size with its headers (the API's rule, spec.QueueSpec):
    # an unset message size is its default; an unset max_bytes is planned from it, and always fits
    size, max_bytes = config.get("max_message_bytes"), config.get("max_bytes")
    size = LIMITS["max_message_bytes"][1] if size is None else size
    if (known(size) and known(max_bytes) and _in_range(size, *LIMITS["max_message_bytes"][::2])
            and _in_range(max_bytes, *LIMITS["max_bytes"][::2])):
        size, max_bytes = whole(size) or 0, whole(max_bytes) or 0
        if max_bytes < size + HEADER_ROOM:
            bad(("max_bytes",),
                f"max_bytes ({max_bytes}) must hold at least one message of max_message_bytes ({size}) with its "
                f"headers: {size + HEADER_ROOM} bytes or more.")

    for field, low, high, text in (("password_version", 1, MAX_VERSION, VERSION_RULE),
                                   ("password_grace_seconds", 0, MAX_GRACE, GRACE_RULE)):
        value = config.get(field)
        if known(value) and not _in_range(value, low, high):
            bad((field,), f"{field} must be {text} (got {_show(value)}).")

    backoff = config.get("retry_backoff_seconds")
    if known(backoff):
        if not 1 <= len(backoff) <= MAX_BACKOFF_STEPS:
            bad(("retry_backoff_seconds",), f"retry_backoff_seconds must be {BACKOFF_RULE} (got {len(backoff)} entries).")
        low, _, high = STEP_LIMITS
        for index, step in enumerate(backoff):
            if step is not Unknown and not _in_range(step, low, high):
                bad(("retry_backoff_seconds", index),
                    f"retry_backoff_seconds[{index}] must be a whole number of seconds from {low} to {high} "
                    f"(got {_show(step)}).")
        receives = whole(config.get("max_receives"))
        if receives and len(backoff) >= receives:
            bad(("retry_backoff_seconds",),
                f"retry_backoff_seconds must have fewer entries than max_receives ({receives}): a schedule of "
                f"{len(backoff)} retries needs at least {len(backoff) + 1} receives.")
    return problems


def _differs(planned: Any, prior: Any) -> bool:
    """True if the planned value may differ from the prior one (an unknown may)."""
    if planned is Unknown:
        return True
    if isinstance(planned, list) and isinstance(prior, list):
        return len(planned) != len(prior) or any(_differs(a, b) for a, b in zip(planned, prior, strict=True))
    return planned != prior  # 30 and 30.0 compare equal, as the same cty number


def plan(prior: Optional[Mapping[str, Any]], config: Mapping[str, Any], proposed: Mapping[str, Any],
         project: Any) -> tuple[dict[str, Any], list[str]]:
    """The planned state, and the attributes whose change replaces the queue.

    ``proposed`` is OpenTofu's proposed new state (the configuration merged with the prior
    state); ``project`` is the provider's project (``Unknown`` while it is known only at apply:
    the queue's is planned unknown then, and replaces a queue that has one). A setting left out
    of the configuration is planned at its default, on create and on update alike (so removing a
    line restores the default instead of keeping the last value). Outputs are unknown on create; on an in-place
    update the stable outputs keep their values and the server's are planned unknown; a raised
    ``password_version`` plans the password unknown (``rotates``); a plan that changes no
    setting and rotates nothing (a new ``password_grace_seconds`` alone, say) keeps every
    output, and a plan with no change is the prior state exactly.
    """
    planned = dict(proposed)
    defaults = {**{field: default for field, (_, default, _) in LIMITS.items()}, **FLAGS, **ROTATION}
    for field, default in defaults.items():
        if config.get(field) is None:
            planned[field] = default
    if config.get("max_bytes") is None and known(planned.get("max_message_bytes")):
        planned["max_bytes"] = default_max_bytes(whole(planned["max_message_bytes"]))  # follows the message size
    if config.get("project") is None:
        planned["project"] = project
    if config.get("replicas") is None:  # the server's default follows its cluster: known after apply, then kept
        if prior is None:
            planned["replicas"] = Unknown
        elif "replicas" in prior:
            planned["replicas"] = prior["replicas"]
    if prior is None:
        planned.update(dict.fromkeys((*OUTPUTS, PASSWORD), Unknown))
        return planned, []

    replace = [field for field in REPLACES if _differs(planned.get(field), prior.get(field))]
    changed = [field for field in MUTABLE if _differs(planned.get(field), prior.get(field))]
    rotate = rotates(prior, planned)
    if replace:
        planned.update(dict.fromkeys((*OUTPUTS, PASSWORD), Unknown))
    elif changed or rotate:
        planned.update({k: prior.get(k) for k in STABLE_OUTPUTS})
        planned.update(dict.fromkeys(SERVER_OUTPUTS, Unknown))
        planned[PASSWORD] = Unknown if rotate else prior.get(PASSWORD)
    else:
        planned.update({k: prior.get(k) for k in (*OUTPUTS, PASSWORD)})
    return planned, replace


def _version(state: Mapping[str, Any]) -> int:
    """A state's password_version (1 for a state from before there was one)."""
    return whole(state.get("password_version")) or 1


def rotates(prior: Mapping[str, Any], planned: Mapping[str, Any]) -> bool:
    """Whether applying ``planned`` over ``prior`` (the same queue) rotates the password: its
    password_version is higher than the prior one, or not known yet (then the apply decides)."""
    version = planned.get("password_version")
    if version is Unknown:
        return True
    number = whole(version)
    return number is not None and number > _version(prior)


def refused_changes(prior: Optional[Mapping[str, Any]], planned: Mapping[str, Any]) -> list[Problem]:
    """The in-place changes the API would refuse, or that cannot be done, each as a Problem naming
    its attribute: priorities turned off, a message limit set on a queue without one, and a
    lowered password_version (a rotation cannot be undone). A plan that replaces the queue may do
    any of them."""
    if prior is None or any(_differs(planned.get(field), prior.get(field)) for field in REPLACES):
        return []
    problems = []
    if prior.get("priorities") is True and planned.get("priorities") is False:
        problems.append(Problem(("priorities",), "Invalid priorities",
                                f"priorities cannot be turned off on queue '{prior.get('name')}': it must be "
                                f"{PRIORITIES_RULE}. Keep priorities = true, or replace the queue."))
    limit = planned.get("max_messages")
    if whole(prior.get("max_messages")) == 0 and known(limit) and (whole(limit) or 0) > 0:
        problems.append(Problem(("max_messages",), "Invalid max_messages",
                                f"max_messages cannot be set on queue '{prior.get('name')}', which has no limit: "
                                f"{LIMIT_RULE}. Keep max_messages = 0, or replace the queue."))
    version, was = planned.get("password_version"), _version(prior)
    if known(version) and _in_range(version, 1, MAX_VERSION) and (whole(version) or 0) < was:
        problems.append(Problem(("password_version",), "Invalid password_version",
                                f"password_version cannot be lowered on queue '{prior.get('name')}' (from {was} to "
                                f"{_show(version)}): raising it rotated the password, which cannot be undone. Keep "
                                f"password_version = {was}, or raise it to rotate the password again."))
    return problems


def _int_list(value: Any) -> Optional[list[int]]:
    return None if value is None else [int(whole(step) or 0) for step in value]


def create_body(planned: Mapping[str, Any]) -> dict[str, Any]:
    """The body of ``POST /v1/projects/{project}/queues`` for a planned (fully known) state."""
    body: dict[str, Any] = {"name": planned["name"], **{field: whole(planned[field]) for field in LIMITS},
                            **{field: bool(planned[field]) for field in FLAGS}}
    if planned.get("dead_letter_queue") is not None:
        body["dead_letter_queue"] = planned["dead_letter_queue"]
    if planned.get("retry_backoff_seconds") is not None:
        body["retry_backoff_seconds"] = _int_list(planned["retry_backoff_seconds"])
    if known(planned.get("replicas")):
        body["replicas"] = whole(planned["replicas"])
    return body


def patch_body(prior: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, Any]:
    """The body of ``PATCH …/queues/{name}``: only the settings that change (``None`` removes a
    dead-letter queue or a retry schedule)."""
    changes: dict[str, Any] = {}
    for field in MUTABLE:
        if _differs(planned.get(field), prior.get(field)):
            value = planned.get(field)
            if field in LIMITS or field == "replicas":
                value = whole(value)
            elif field == "retry_backoff_seconds":
                value = _int_list(value)
            changes[field] = value
    return changes


def state_from_api(queue: Mapping[str, Any]) -> dict[str, Any]:
    """The resource state of a queue object from the API (every attribute present)."""
    state = {field: queue.get(field) for field in ATTRIBUTES}
    backoff = queue.get("retry_backoff_seconds")
    state["retry_backoff_seconds"] = list(backoff) if backoff is not None else None
    return state


def rotation_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """The rotation's arguments as ``values`` (a plan or a state) has them, defaults for those it
    lacks or has null (a state from before they existed, an import)."""
    return {field: default if values.get(field) is None else values[field] for field, default in ROTATION.items()}


def resource_state(queue: Mapping[str, Any], password: Optional[str], rotation: Mapping[str, Any]) -> dict[str, Any]:
    """The resource's state: the queue object from the API, the app user's current password, and
    the rotation's arguments taken from ``rotation`` (the plan applied, or the state refreshed:
    the API keeps no password_version of the configuration's)."""
    return {**state_from_api(queue), PASSWORD: password, **rotation_of(rotation)}


def conform(old: Mapping[str, Any]) -> dict[str, Any]:
    """A stored state with exactly this schema's attributes (missing ones null, or the rotation's
    defaults; others dropped): OpenTofu refuses an object with more or fewer attributes than its
    schema. A missing password stays null until the refresh that follows reads it."""
    return {**{field: old.get(field) for field in RESOURCE_ATTRIBUTES}, **rotation_of(old)}


def parse_import_id(import_id: str, default_project: str) -> tuple[str, str]:
    """``project/name`` or ``name`` (in the provider's project) → (project, name); raises
    ValueError with a sentence for anything else."""
    project, _, name = import_id.rpartition("/") if "/" in import_id else (default_project, "", import_id)
    if not PROJECT.fullmatch(project) or not NAME.fullmatch(name) or import_id.count("/") > 1:
        raise ValueError(f"The import id must be '<project>/<name>' or '<name>', with a queue name of {NAME_RULE} "
                         f"and a project of {PROJECT_RULE} (got {import_id!r}).")
    return project, name
