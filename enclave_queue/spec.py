"""Queue specifications: what an operator declares, validated at the door.

``QueueSpec`` is a whole declaration, ``QueuePatch`` a partial change of one, and ``Queue``
the object the API returns (its keys are exactly the OpenTofu ``enclave_queue`` attributes).
An invalid spec is refused when submitted with a sentence naming the field and its rule
(``spec_error``), never discovered later as a broken queue. Types are strict (pydantic strict
mode): a number is a JSON integer, never ``true``, ``"30"`` or ``30.0``, and a flag is ``true``
or ``false``, never ``"yes"`` or ``1``. Whoever has text (the console's forms, the CLI's options)
converts it before it builds a spec.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from .errors import SpecError, field_error, out_of_range

#: the rule for every name-like field, as a user reads it
NAME_RULE = "3–40 lowercase letters, digits or hyphens, starting with a letter"
PROJECT_RULE = "1–40 lowercase letters, digits or hyphens, starting with a letter"

QueueName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{2,39}$")]
ProjectName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,39}$")]

DEFAULT_PROJECT = "default"

#: the parts of an API path that are not names of the spec: what each must look like, shared by
#: the client that builds paths (admin.py) and the server that checks them (web/paths.py)
MAX_SEQUENCE = 2**63 - 1  #: the largest stream sequence (a signed 64-bit integer)
MAX_RECEIPT = 4096  #: characters of a receipt handle (a sealed reply subject: about 300 today)
MAX_SHOWN = 64  #: characters of a refused value repeated in an error; longer ones are cut
SECRET_PATTERN = re.compile(r"[a-z][a-z0-9-]{2,48}")
SECRET_RULE = "3–49 lowercase letters, digits or hyphens, starting with a letter (a queue's password is '<queue>-password')"
REDRIVE_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
REDRIVE_RULE = "1–64 letters, digits, '-' or '_'"
#: a letter, then URL-safe base64 without padding (auth/secrets.py, MasterKey.seal_handle)
RECEIPT_PATTERN = re.compile(rf"[A-Za-z][A-Za-z0-9_-]{{0,{MAX_RECEIPT - 1}}}")
RECEIPT_RULE = (f"1–{MAX_RECEIPT} characters of URL-safe base64 (A–Z, a–z, 0–9, '-', '_') starting with a letter, "
                "as 'receive' gave it")
SEQUENCE_RULE = f"an integer from 1 to {MAX_SEQUENCE}"


def full_pattern(annotated: Any) -> re.Pattern[str]:
    """The pattern of one of the constrained name types above, for ``re.fullmatch`` (``re.match``
    with ``$`` would let a trailing newline through)."""
    for meta in getattr(annotated, "__metadata__", ()):
        if isinstance(meta, StringConstraints) and meta.pattern:
            return re.compile(str(meta.pattern).removeprefix("^").removesuffix("$"))
    raise TypeError(f"{annotated!r} carries no pattern")


PROJECT_PATTERN = full_pattern(ProjectName)
QUEUE_NAME_PATTERN = full_pattern(QueueName)


def shown(value: Any) -> str:
    """A refused value quoted for a sentence: control characters escaped, a long one cut."""
    if isinstance(value, str) and len(value) > MAX_SHOWN:
        return f"{value[:40]!r}… ({len(value)} characters)"
    return repr(value)

#: (minimum, default, maximum) of each numeric setting, the one table the fields are built from
LIMITS: dict[str, tuple[int, int, int]] = {
    "dedupe_window_seconds": (1, 3600, 86400),  # how long a dedupe key is remembered; ≤ retention
    "max_message_bytes": (1024, 262144, 1048576),
    "max_messages": (0, 0, 10_000_000),  # 0 = no limit; a full queue refuses new messages
    # bytes the queue may store (waiting, in flight, delayed); the default follows max_message_bytes
    "max_bytes": (1 << 20, 64 << 20, 1 << 40),
    "max_receives": (0, 0, 1000),  # 0 = no limit
    "retention_hours": (1, 96, 336),
    "visibility_timeout_seconds": (1, 30, 43200),
}

#: retry_backoff_seconds: at most this many entries, each within the visibility timeout's range
MAX_BACKOFF_STEPS = 20
BACKOFF_RULE = (f"a list of 1–{MAX_BACKOFF_STEPS} whole seconds, each from {LIMITS['visibility_timeout_seconds'][0]} "
                f"to {LIMITS['visibility_timeout_seconds'][2]}")
BackoffStep = Annotated[int, Field(ge=LIMITS["visibility_timeout_seconds"][0], le=LIMITS["visibility_timeout_seconds"][2])]
#: a JSON array (a list) is taken for the tuple (strict=False on the tuple only: its steps stay strict)
Backoff = Annotated[tuple[BackoffStep, ...], Field(min_length=1, max_length=MAX_BACKOFF_STEPS, strict=False)]

#: bytes the broker allows on top of max_message_bytes, for headers: a body of the queue's
#: largest size still fits with its own headers, and so does its dead letter (the mover adds
#: about 400 bytes of headers and up to 1 KiB of error text)
HEADER_ROOM = 4096
#: bytes a sender's own headers may take, names and values together (each header counted with its
#: ": " and line end): with Enclave's own and the dead-letter headers they stay within HEADER_ROOM
SENDER_HEADER_BYTES = 2048


def header_bytes(headers: dict[str, str]) -> int:
    """Bytes ``headers`` take in a NATS header block."""
    return sum(len(name.encode()) + len(value.encode()) + 4 for name, value in headers.items())

#: the default ``max_bytes``: room for MAX_BYTES_FACTOR messages of the largest size, within these bounds
MAX_BYTES_FACTOR = 256
MAX_BYTES_DEFAULT_RANGE = (16 << 20, 1 << 30)


def default_max_bytes(max_message_bytes: Any) -> int:
    """The storage limit a queue gets unless it names one: 256 messages of its largest size
    (64 MiB at the default 256 KiB), at least 16 MiB and at most 1 GiB."""
    size = max_message_bytes if isinstance(max_message_bytes, int) and not isinstance(max_message_bytes, bool) \
        else LIMITS["max_message_bytes"][1]
    low, high = MAX_BYTES_DEFAULT_RANGE
    return min(max(size * MAX_BYTES_FACTOR, low), high)


#: why a queue without a message limit cannot get one later: it takes delayed messages
LIMIT_RULE = ("a queue without max_messages takes delayed messages (JetStream message schedules), which a "
              "limit that refuses new messages rules out and which cannot be turned off; create a queue with "
              "max_messages instead (a queue with a limit can change it, or drop it)")

#: the settings that can change on a live queue (name and project cannot)
MUTABLE = ("dead_letter_queue", *LIMITS, "retry_backoff_seconds", "priorities", "replicas")

#: message priorities (``put(priority=)``) a queue with ``priorities`` takes; higher is taken first
MIN_PRIORITY, MAX_PRIORITY = 0, 9
#: how many of a cluster's nodes keep a queue's messages (its stream's replicas)
REPLICA_CHOICES = (1, 3)
REPLICAS_RULE = "1 or 3 (3: a cluster of three nodes or more; its default there, 1 on one node)"


def _replica_choice(value: int) -> int:
    if value not in REPLICA_CHOICES:
        raise ValueError(f"replicas must be {REPLICAS_RULE}")
    return value


Replicas = Annotated[int, Field(strict=True), AfterValidator(_replica_choice)]
PRIORITIES_RULE = "true or false; once true it stays true (messages on the priority lanes would be stranded)"


def _bounded(field: str, *, default: bool = True) -> Any:
    low, dflt, high = LIMITS[field]
    return Field(dflt if default else None, ge=low, le=high)


MAX_DEDUPE_KEY = 128  #: characters of a dedupe key (sent as the message's Nats-Msg-Id)
#: it travels as a header value, which the broker's clients trim: " a" would be the key "a"
DEDUPE_KEY_RULE = f"a text of 1 to {MAX_DEDUPE_KEY} printable characters, not beginning or ending with a space"
MAX_RECEIVE = 100  #: messages one receive by hand may take
MAX_RECEIVE_WAIT = 20  #: seconds a receive by hand may wait
MAX_PEEK = 100  #: messages one peek may return
MAX_LIST = 500  #: dead letters one listing may return
MAX_NACK_DELAY = 43200  #: seconds a message handed back by hand may stay hidden (the longest visibility timeout)
MAX_GRACE = 7 * 86400  #: seconds an old password may keep logging in after a rotation
DEFAULT_GRACE = 3600  #: seconds, when a rotation does not say
GRACE_RULE = f"an integer from 0 to {MAX_GRACE} (7 days)"
MAX_REDRIVE_RATE = 100_000  #: letters a second a redrive may move at most
MAX_FILTER = 1024  #: characters of a redrive's filter_error
MAX_STATUS_WAIT = 60  #: seconds a status call may wait for the queue to settle
MAX_HISTORY_HOURS = 168  #: hours of depth history one request may span (samples are kept 7 days)

#: rules of request fields that are not queue settings, by route: two routes may give one name
#: ("max", "limit") two meanings, so each route names its own. The API puts each in its field's
#: description, where its OpenAPI document shows it and its 422s find it (api/problems.py).
RECEIVE_MAX_RULE = f"an integer from 1 to {MAX_RECEIVE}"
RECEIVE_WAIT_RULE = f"a number of seconds from 0 to {MAX_RECEIVE_WAIT}"
PEEK_LIMIT_RULE = f"an integer from 1 to {MAX_PEEK}"
LIST_LIMIT_RULE = f"an integer from 1 to {MAX_LIST}"
AFTER_RULE = f"a sequence number from 0 to {MAX_SEQUENCE}"
NACK_DELAY_RULE = f"a number of seconds from 0 to {MAX_NACK_DELAY}"
REDRIVE_MAX_RULE = "an integer of 1 or more"
REDRIVE_RATE_RULE = f"a number of letters per second, more than 0 and at most {MAX_REDRIVE_RATE}"
FILTER_RULE = f"a text of 1 to {MAX_FILTER} characters"
FLAG_RULE = "true or false"
STATUS_WAIT_RULE = f"a number of seconds from 0 to {MAX_STATUS_WAIT}"
HOURS_RULE = f"an integer from 1 to {MAX_HISTORY_HOURS}"
BASE64_RULE = "standard base64 text (A–Z, a–z, 0–9, '+', '/', '=' padding)"

#: the rules of request fields whose name means one thing on every route
REQUEST_RULES = {
    "filter_error": FILTER_RULE,
    "hours": HOURS_RULE,
    "dedupe_key": DEDUPE_KEY_RULE,
    "dry_run": FLAG_RULE,
    "body_base64": BASE64_RULE,
}


def check_dedupe_key(key: Any) -> str:
    """A dedupe key as given, if it follows DEDUPE_KEY_RULE; raises SpecError otherwise. It
    travels as a header value, so line breaks and other control characters are refused."""
    if isinstance(key, str) and 1 <= len(key) <= MAX_DEDUPE_KEY and key.isprintable() and key == key.strip():
        return key
    got = f"{len(key)} characters" if isinstance(key, str) and len(key) > MAX_DEDUPE_KEY else repr(key)
    raise out_of_range("dedupe_key", DEDUPE_KEY_RULE, got)


def scheduled_delay(receive_count: int, backoff: list[float]) -> float:
    """A retry schedule's delay after a message's ``receive_count``-th receive (the last entry
    repeats); 0 without a schedule. The server (leases by hand) and the SDK (nack) both use it."""
    if not backoff:
        return 0.0
    return float(backoff[min(max(receive_count, 1), len(backoff)) - 1])


def rule(field: str) -> str:
    """The rule a field's value must follow, as a phrase ('an integer from 1 to 336'); 'valid'
    for a field without one (a route's own fields carry theirs in their description)."""
    if field in REQUEST_RULES:
        return REQUEST_RULES[field]
    if field in LIMITS:
        low, _, high = LIMITS[field]
        return f"an integer from {low} to {high}"
    if field == "project":
        return PROJECT_RULE
    if field in ("name", "dead_letter_queue"):
        return NAME_RULE
    if field == "retry_backoff_seconds":
        return BACKOFF_RULE
    if field == "priorities":
        return PRIORITIES_RULE
    if field == "replicas":
        return REPLICAS_RULE
    return "valid"


class QueueSpec(BaseModel):
    """A whole queue declaration. Frozen: change a queue through ``QueuePatch``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: QueueName
    project: ProjectName = DEFAULT_PROJECT
    dead_letter_queue: Optional[QueueName] = None
    max_message_bytes: int = _bounded("max_message_bytes")
    max_receives: int = _bounded("max_receives")  #: 0 = no limit
    retention_hours: int = _bounded("retention_hours")
    visibility_timeout_seconds: int = _bounded("visibility_timeout_seconds")
    #: messages the queue holds at most (waiting, in flight and dead); 0 = no limit
    max_messages: int = _bounded("max_messages")
    #: seconds a dedupe key (``Nats-Msg-Id``) is remembered; at most the retention
    dedupe_window_seconds: int = _bounded("dedupe_window_seconds")
    #: seconds before each retry (the last repeats): the lease of each receive, and the delay of
    #: a nack() without one; None = the visibility timeout for every receive, nacks at once
    retry_backoff_seconds: Optional[Backoff] = None
    #: messages may carry a priority (0–9, higher taken first): one consumer a level (a lane)
    priorities: bool = False
    #: bytes the queue may store; a full queue refuses new messages (QueueFull). Reserved out of
    #: the broker's store, so no queue can take the room of another or of the control state
    max_bytes: int = _bounded("max_bytes")
    #: nodes that keep the queue's messages (a stream's replicas): a message is acknowledged once
    #: a majority of them stored it
    replicas: Replicas = 1

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and "max_bytes" not in data:
            data = {**data, "max_bytes": default_max_bytes(data.get("max_message_bytes", LIMITS["max_message_bytes"][1]))}
        return data

    @model_validator(mode="after")
    def _cross_field_rules(self) -> QueueSpec:
        if self.max_bytes < self.max_message_bytes + HEADER_ROOM:
            raise ValueError(
                f"max_bytes ({self.max_bytes}) must hold at least one message of max_message_bytes "
                f"({self.max_message_bytes}) with its headers: {self.max_message_bytes + HEADER_ROOM} bytes or more"
            )
        if self.dead_letter_queue == self.name:
            raise ValueError("dead_letter_queue must name another queue, not the queue itself")
        if self.dedupe_window_seconds > self.retention_hours * 3600:
            raise ValueError(
                f"dedupe_window_seconds ({self.dedupe_window_seconds}) must not exceed retention_hours "
                f"({self.retention_hours} h = {self.retention_hours * 3600} s): a key cannot outlive "
                "the messages it guards"
            )
        backoff = self.retry_backoff_seconds
        if backoff and self.max_receives and len(backoff) >= self.max_receives:
            raise ValueError(
                f"retry_backoff_seconds must have fewer entries than max_receives ({self.max_receives}): "
                f"a schedule of {len(backoff)} retries needs at least {len(backoff) + 1} receives"
            )
        return self

    def retry_delay(self, receive_count: int) -> float:
        """Seconds before retrying a message after its ``receive_count``-th receive (0: at once)."""
        return scheduled_delay(receive_count, list(self.retry_backoff_seconds or ()))

    @property
    def key(self) -> str:
        """The state key of this queue: ``<project>.<name>``."""
        return queue_key(self.project, self.name)

    def settings(self) -> dict[str, Any]:
        """The mutable settings as a dict."""
        return {field: getattr(self, field) for field in MUTABLE}


class QueuePatch(BaseModel):
    """A partial change: only the fields given are changed; ``dead_letter_queue: null`` removes it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    dead_letter_queue: Optional[QueueName] = None
    max_message_bytes: Optional[int] = _bounded("max_message_bytes", default=False)
    max_receives: Optional[int] = _bounded("max_receives", default=False)
    retention_hours: Optional[int] = _bounded("retention_hours", default=False)
    visibility_timeout_seconds: Optional[int] = _bounded("visibility_timeout_seconds", default=False)
    max_messages: Optional[int] = _bounded("max_messages", default=False)
    dedupe_window_seconds: Optional[int] = _bounded("dedupe_window_seconds", default=False)
    retry_backoff_seconds: Optional[Backoff] = None
    priorities: Optional[bool] = None
    max_bytes: Optional[int] = _bounded("max_bytes", default=False)
    replicas: Optional[Replicas] = None

    def apply(self, spec: QueueSpec) -> QueueSpec:
        """Return ``spec`` with this patch applied; raises SpecError if the result is invalid."""
        changes = {field: getattr(self, field) for field in self.model_fields_set}
        for field, value in changes.items():
            if value is None and field not in ("dead_letter_queue", "retry_backoff_seconds"):
                raise field_error(field, f"must be {rule(field)}", f"{field} cannot be null; it must be {rule(field)}.")
        if spec.priorities and changes.get("priorities") is False:
            raise field_error("priorities", f"must be {PRIORITIES_RULE}",
                              f"priorities cannot be turned off on queue '{spec.name}': it must be {PRIORITIES_RULE}.")
        if spec.max_messages == 0 and changes.get("max_messages"):
            raise field_error("max_messages", f"cannot be set in place: {LIMIT_RULE}",
                              f"max_messages cannot be set on queue '{spec.name}', which has no limit: {LIMIT_RULE}.")
        return parse_spec({**spec.model_dump(), **changes})


class Queue(BaseModel):
    """A queue as the API returns it: its spec plus its outputs (the OpenTofu attributes)."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    project: str
    dead_letter_queue: Optional[str]
    max_message_bytes: int
    max_receives: int
    retention_hours: int
    visibility_timeout_seconds: int
    max_messages: int
    dedupe_window_seconds: int
    retry_backoff_seconds: Optional[list[int]]
    priorities: bool
    max_bytes: int
    replicas: int
    username: str
    password_secret: str
    subject: str
    broker_url: str
    internal_broker_url: str


def queue_key(project: str, name: str) -> str:
    return f"{project}.{name}"


def password_secret_name(name: str) -> str:
    """The managed secret that holds a queue's password."""
    return f"{name}-password"


def subject_for(project: str, name: str) -> str:
    """The subject apps publish to."""
    return f"queue.{project}.{name}"


def given(value: Any) -> str:
    """A refused value as the sentence shows it: JSON's ``true``, ``false`` and ``null`` as JSON
    spells them (a request is JSON), anything else as ``shown`` quotes it."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return shown(value)
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:40]}… ({len(text)} characters)"


def _field_message(error: dict[str, Any], unknown: str, rules: dict[str, str]) -> tuple[str, str]:
    loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path")]
    field = ".".join(loc) or "body"
    setting = loc[0] if loc else "body"  # retry_backoff_seconds.2 follows retry_backoff_seconds' rule
    kind = error.get("type", "")
    value = given(error.get("input"))
    phrase = rules.get(setting) or rule(setting)
    if kind == "missing":
        return field, "is required"
    if kind == "json_invalid":
        return "body", f"is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    if kind == "extra_forbidden":
        return field, f"is not {unknown}"
    if kind == "value_error" and field == "body":
        # a model-level rule, whose message starts with the field it is about
        field, _, message = str(error["ctx"]["error"]).partition(" ")
        return field, message
    if phrase == "valid":
        return field, f"is not valid: {str(error.get('msg', '')).lower()} (got {value})"
    return setting, f"must be {phrase} (got {value})"


def spec_error(exc: ValidationError | list[dict[str, Any]], unknown: str = "a queue setting",
               rules: Optional[dict[str, str]] = None) -> SpecError:
    """Turn a pydantic validation failure into one SpecError naming every bad field and its rule
    (``unknown`` says what an unexpected field is not; ``rules``, a route's own rules of its
    fields, come before the shared ones of ``rule``)."""
    raw = exc.errors() if isinstance(exc, ValidationError) else exc
    errors: list[dict[str, str]] = []
    for item in raw:
        field, message = _field_message(item, unknown, rules or {})
        if all(e["field"] != field for e in errors):  # one sentence per field
            errors.append({"field": field, "message": message})
    return SpecError("; ".join(f"{e['field']} {e['message']}" for e in errors) + ".", errors=errors)


def parse_spec(data: dict[str, Any]) -> QueueSpec:
    """Validate a whole declaration; raises SpecError."""
    try:
        return QueueSpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc) from exc


def parse_patch(data: dict[str, Any]) -> QueuePatch:
    """Validate a partial change; raises SpecError."""
    try:
        return QueuePatch.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc) from exc
