"""What a message carries beyond its body, and the rules of the put options (pure functions).

Subjects, inside a queue's own account:

- ``queue.<project>.<name>``: the queue. Its consumer delivers exactly this subject.
- ``queue.<project>.<name>.priority.<N>``: messages of priority N (1–9) on a queue with
  ``priorities``; each level has a consumer of its own (``worker-p<N>``).
- ``queue.<project>.<name>.delay.<token>``: one delayed message, stored as a JetStream message
  schedule (``Nats-Schedule: @at <time>``, ``Nats-Schedule-Target: <queue subject>``; stream
  ``allow_msg_schedules``). The stream stores it, the consumer does not see it; when it is due
  the broker publishes a copy, with the schedule's headers, to the queue subject and removes the
  schedule. One subject per message, because a schedule subject holds one schedule.

Headers (besides the sender's and ``Content-Type``):

- ``Enclave-Id``: the message's id when it is not the sequence it is stored at: a copy made by
  ``release`` keeps the id of the message it replaces.
- ``Enclave-Prior-Attempts``: attempts spent before this copy was stored (``release`` refunds the
  attempt it ends, so the copy starts where the original stood).
- ``Enclave-Enqueued-At``: when the message was first put (RFC 3339), on copies.
- ``Enclave-Deadline``: the start deadline of a put with ``ttl_s`` (RFC 3339): a message not
  taken by then is dropped unrun and counted as expired.
- ``Enclave-Last-Error``: the last error of the message a copy replaces.

These are the app's own statements about its own message (the SDK writes most of them) and
steer only its own queue. A dead letter carries more, written by the control plane alone and
trusted only under its ``Enclave-Provenance`` MAC (auth/provenance.py): ``Enclave-Source-Queue``,
``-Source-Project`` and ``-Source-Sequence`` (where it came from, where a retry sends it),
``Enclave-Receive-Count``, ``Enclave-First-Enqueued``, ``Enclave-Dead-Lettered-At`` and its
``Enclave-Last-Error``.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

from .errors import DELAY_RULE, MAX_DELAY, SCHEDULES_DISABLED, SpecError, out_of_range

ID = "Enclave-Id"
PRIOR_ATTEMPTS = "Enclave-Prior-Attempts"
ENQUEUED_AT = "Enclave-Enqueued-At"
DEADLINE = "Enclave-Deadline"
LAST_ERROR = "Enclave-Last-Error"
#: a dead letter's provenance (written by the mover, vouched for by PROVENANCE)
SOURCE_QUEUE = "Enclave-Source-Queue"
SOURCE_PROJECT = "Enclave-Source-Project"
SOURCE_SEQUENCE = "Enclave-Source-Sequence"
RECEIVE_COUNT = "Enclave-Receive-Count"
FIRST_ENQUEUED = "Enclave-First-Enqueued"
DEAD_LETTERED_AT = "Enclave-Dead-Lettered-At"
PROVENANCE = "Enclave-Provenance"
SCHEDULE = "Nats-Schedule"
SCHEDULE_TARGET = "Nats-Schedule-Target"
SCHEDULER = "Nats-Scheduler"  #: the broker's header on a copy made by a schedule: the schedule's subject

#: headers the broker or this package set; a copy of a message drops them and sets its own
SYSTEM_HEADERS = frozenset({ID, PRIOR_ATTEMPTS, ENQUEUED_AT, DEADLINE, LAST_ERROR, SCHEDULE, SCHEDULE_TARGET,
                            SCHEDULER, "Nats-Schedule-Next", "Nats-Msg-Id", "Nats-TTL"})
#: the dead-letter headers: a copy of a letter drops them (and a forged set never survives a move)
DEAD_LETTER_HEADERS = frozenset({SOURCE_QUEUE, SOURCE_PROJECT, SOURCE_SEQUENCE, RECEIVE_COUNT, FIRST_ENQUEUED,
                                 DEAD_LETTERED_AT, LAST_ERROR, PROVENANCE})

DELAY_TOKEN = "delay"
MAX_TTL = 14 * 86400  #: seconds of a start deadline (the longest retention)
MIN_LEASE, MAX_LEASE = 1, 43200  #: seconds a lease may last (the visibility timeout's range)
MAX_ERROR_BYTES = 1024  #: an error note is cut to this size

TTL_RULE = f"a number of seconds from 1 to {MAX_TTL} (14 days), more than delay_s"
PRIORITY_RULE = "an integer from 0 to 9 (higher is taken first)"
LEASE_RULE = f"a number of seconds from {MIN_LEASE} to {MAX_LEASE} (12 hours)"


def delay_subject(subject: str, token: str) -> str:
    """The schedule subject of one delayed message of the queue on ``subject``."""
    return f"{subject}.{DELAY_TOKEN}.{token}"


def delay_subjects(subject: str) -> str:
    """Every delayed message's subject of the queue on ``subject`` (a stream subject)."""
    return f"{subject}.{DELAY_TOKEN}.*"


PRIORITY_TOKEN = "priority"


def lane_subject(subject: str, priority: int) -> str:
    """Where a message of ``priority`` is put on the queue on ``subject``: the queue's own subject
    for 0, ``<subject>.priority.<N>`` for 1–9 (a queue with ``priorities``)."""
    return subject if priority == 0 else f"{subject}.{PRIORITY_TOKEN}.{priority}"


def priority_of(subject: str) -> int:
    """The priority level of a message stored on ``subject`` (the inverse of ``lane_subject``)."""
    head, _, level = subject.rpartition(f".{PRIORITY_TOKEN}.")
    return int(level) if head and level.isdigit() else 0


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: Optional[str]) -> Optional[datetime]:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


#: a whole number written as text: ASCII digits, an optional minus sign
WHOLE_NUMBER = re.compile(r"\s*-?[0-9]{1,20}\s*")


def whole_number(value: Any) -> Optional[int]:
    """``value`` as an integer if it is one: an int (not a bool), a float with no fraction (JSON
    may carry 3 as 3.0), or text of ASCII digits; else None. What others send is read with this,
    not ``int()``, which cuts 2.5 to 2, reads ``1_000`` and other scripts' digits, and raises
    OverflowError (no ValueError) for an infinity, which JSON from Python may carry."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str) and WHOLE_NUMBER.fullmatch(value):
        return int(value)
    return None


def _refuse(field: str, rule: str, got: Any) -> SpecError:
    return out_of_range(field, rule, repr(got))


def _seconds(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def check_delay(delay_s: Any) -> float:
    seconds = _seconds(delay_s)
    if seconds is None or not 0 <= seconds <= MAX_DELAY:
        raise _refuse("delay_s", DELAY_RULE, delay_s)
    return seconds


def check_ttl(ttl_s: Any, delay_s: float = 0.0) -> float:
    seconds = _seconds(ttl_s)
    if seconds is None or not 1 <= seconds <= MAX_TTL or seconds <= delay_s:
        raise _refuse("ttl_s", TTL_RULE, ttl_s)
    return seconds


def check_lease(lease_s: Any, field: str = "lease_s") -> float:
    seconds = _seconds(lease_s)
    if seconds is None or not MIN_LEASE <= seconds <= MAX_LEASE:
        raise _refuse(field, LEASE_RULE, lease_s)
    return seconds


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise _refuse("priority", PRIORITY_RULE, priority)
    return priority


def schedule_headers(target: str, due: datetime) -> dict[str, str]:
    """The headers that make a stored message a one-shot schedule firing at ``due`` into ``target``."""
    return {SCHEDULE: f"@at {rfc3339(due)}", SCHEDULE_TARGET: target}


def due_at(headers: dict[str, str]) -> Optional[datetime]:
    """When a stored schedule fires (its ``@at`` time), or None for anything else."""
    schedule = headers.get(SCHEDULE, "")
    return parse_time(schedule[4:]) if schedule.startswith("@at ") else None


def deadline_of(headers: dict[str, str]) -> Optional[datetime]:
    return parse_time(headers.get(DEADLINE))


def put_headers(now: datetime, *, delay_s: float = 0.0, ttl_s: Optional[float] = None) -> dict[str, str]:
    """The headers a put with these options adds (no schedule ones): the deadline, and for a
    delayed message its put time (the copy the schedule makes is stored when it is due)."""
    headers = {}
    if ttl_s is not None:
        headers[DEADLINE] = rfc3339(now + timedelta(seconds=ttl_s))
    if delay_s > 0:
        headers[ENQUEUED_AT] = rfc3339(now)
    return headers


#: err_code of a publish whose ``Nats-Expected-Last-Sequence`` was not the stream's last sequence
WRONG_LAST_SEQUENCE = 10071


def expected_id_headers(last_seq: int) -> dict[str, str]:
    """Headers that store a message only as sequence ``last_seq + 1``, naming that as its id: a
    delayed message's schedule carries the id its copy will have (the copy is stored later, at a
    sequence of its own). Refused with WRONG_LAST_SEQUENCE when someone else stored first."""
    return {"Nats-Expected-Last-Sequence": str(last_seq), ID: str(last_seq + 1)}


def actual_last_sequence(error: dict[str, Any]) -> Optional[int]:
    """The stream's last sequence from a WRONG_LAST_SEQUENCE refusal ("wrong last sequence: 42")."""
    if error.get("err_code") != WRONG_LAST_SEQUENCE:
        return None
    tail = str(error.get("description", "")).rsplit(":", 1)[-1].strip()
    return int(tail) if tail.isdigit() else None


#: tries of ``publish_as_next`` that may find another message stored first
EXPECT_TRIES = 10


async def publish_as_next(publish: Callable[[dict[str, str]], Awaitable[dict[str, Any]]], headers: dict[str, str],
                          last_seq: int) -> dict[str, Any]:
    """Store a delayed message's schedule as the stream's next sequence, which its ``Enclave-Id``
    names (the copy it makes when due carries it): ``publish(headers)`` returns the broker's answer.
    Expect ``last_seq``, and when another message got stored first, the sequence the refusal names;
    after EXPECT_TRIES refusals, publish without (the copy's id is then its own sequence). A
    repeated dedupe key is answered as a duplicate once the expectation holds."""
    for _ in range(EXPECT_TRIES):
        answer = await publish({**headers, **expected_id_headers(last_seq)})
        actual = actual_last_sequence(answer.get("error") or {})
        if actual is None:
            return answer
        last_seq = actual
    return await publish(headers)


def refused_for_schedules(answer: dict[str, Any]) -> bool:
    """Whether a PubAck refuses a delayed message because its stream has no schedules (yet: they
    are turned on the first time a queue needs them, queues/schedules.py)."""
    return (answer.get("error") or {}).get("err_code") == SCHEDULES_DISABLED


def clean_headers(headers: Optional[dict[str, str]]) -> dict[str, str]:
    """A stored message's own headers, without the broker's (``Nats-*``) and ours: what a copy of
    it (a dead letter, a release, a redrive) starts from. A sender's ``Status`` is its own."""
    return {k: v for k, v in (headers or {}).items()
            if not k.startswith("Nats-") and k not in DEAD_LETTER_HEADERS and k not in SYSTEM_HEADERS}


STATUS = "Status"  #: where nats-py puts the code of a broker's status reply (100, 204, 404, 408, 503, …)


def broker_status(msg: Any) -> Optional[str]:
    """The code of a broker's status reply (a pull's or a direct get's end, a heartbeat, "no
    responders"), or None for a message. nats-py reads a status line into a ``Status`` header,
    the same name any client may give a header of its own message: a delivery (it has an ack
    subject to reply to) and a stored message a direct get answers (the broker adds its
    ``Nats-Sequence``) are messages whatever headers they carry; no status reply has either."""
    headers = msg.headers
    if not headers or msg.reply or "Nats-Sequence" in headers:
        return None
    return headers.get(STATUS)


def one_line(text: str) -> str:
    """An error note as kept: one line, at most MAX_ERROR_BYTES bytes of UTF-8."""
    return " ".join(text.split()).encode()[:MAX_ERROR_BYTES].decode(errors="ignore")


def message_id(headers: dict[str, str], sequence: int) -> int:
    """A message's id: its ``Enclave-Id`` if it is a copy, else the sequence it is stored at. A copy
    is stored after what it copies, so an id that is not a sequence before its own is not one."""
    number = whole_number(headers.get(ID))
    return number if number is not None and 1 <= number <= sequence else sequence


MAX_PRIOR_ATTEMPTS = 1_000_000  #: attempts a copy may say were spent before it; past this, none


def prior_attempts(headers: dict[str, str]) -> int:
    number = whole_number(headers.get(PRIOR_ATTEMPTS)) or 0
    return number if 0 <= number <= MAX_PRIOR_ATTEMPTS else 0


#: the body codec: bytes travel as they are, str as UTF-8 text, anything else as JSON
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


#: what ``json.dumps(body, separators=(",", ":"))`` makes, without building an encoder a call (a
#: tenth of a JSON body's encoding on the benchmark machine)
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode(body: Any) -> tuple[bytes, Optional[dict[str, str]]]:
    """A body as bytes and headers: bytes as they are, str as UTF-8 text, anything else as JSON.
    ``SpecError`` naming ``body`` for what JSON cannot carry: NaN and the infinities (``json``
    would write them bare, and no reader, this one included, takes that as JSON), or a value
    of no JSON type."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body), None
    if isinstance(body, str):
        try:
            return body.encode(), {"Content-Type": TEXT}
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it
            message = "must be bytes, text or a JSON value, and this text is not Unicode (it holds a lone surrogate)"
            raise SpecError(f"body {message}.", errors=[{"field": "body", "message": message}]) from None
    try:
        return _COMPACT_JSON.encode(body).encode(), {"Content-Type": JSON}
    except (ValueError, TypeError, RecursionError) as exc:
        why = "NaN or an infinity" if isinstance(exc, ValueError) and "JSON compliant" in str(exc) else str(exc)
        message = f"must be bytes, text or a JSON value, and this one cannot be written as JSON ({one_line(why)})"
        raise SpecError(f"body {message}.", errors=[{"field": "body", "message": message}]) from None


def nak_delay(wanted: float, receive_count: int, backoff: list[float]) -> float:
    """The delay to put in a ``-NAK`` so the message comes back ``wanted`` seconds later.

    With a consumer backoff, nats-server 2.15 does not wait the nak's delay alone: it dates the
    lease back to nak time + delay - ack_wait (ack_wait is backoff[0] on such a consumer) and
    redelivers once backoff[the message's redeliveries so far] has passed since then, that is
    delay - backoff[0] + backoff[n] after the nak (n = receive_count - 1, the last entry repeating).
    Measured on 2.15.1 with backoff [1, 3, 8] (tests/integration/test_nak_backoff.py pins it):
    a delay of 2 s came back after 2.0, 4.0 and 9.0 s at the 1st, 2nd and 3rd receive; -1.5 s at
    the 2nd after 0.5 s, -5 s at the 3rd after 2.0 s, 0 at the 2nd after 2.0 s (a zero delay is a
    delay too, not a plain nak). So this undoes it, and the result may be zero or negative (a
    wanted delay up to backoff[n] - backoff[0]): the server adds it in as it is. Without a backoff
    the delay is taken as it is."""
    if not backoff:
        return wanted
    redeliveries = min(max(receive_count - 1, 0), len(backoff) - 1)
    return wanted + backoff[0] - backoff[redeliveries]


def nak_payload(delay: float, receive_count: int, backoff: list[float]) -> bytes:
    """The ``-NAK`` that hands a message back for ``delay`` seconds (0: at once, a plain ``-NAK``),
    compensated for the consumer's backoff (``nak_delay``: zero or negative where the backoff's
    own step is as long as the wait asked for, or longer). The SDK and the API's nack by hand both
    send this."""
    if delay <= 0:
        return b"-NAK"
    return b"-NAK " + json.dumps({"delay": round(nak_delay(delay, receive_count, backoff) * 1e9)}).encode()


#: seconds a message handed back on its last receive waits before nats-server retires it and says
#: so (its MAX_DELIVERIES advisory): whoever handed it back tells the dead-letter mover at once
#: (``dead_word``), which has moved it by then; should the word be lost, the advisory comes after
#: this and has it moved, as for an app on any other NATS client
DEAD_GRACE = 10.0


def last_receive(receive_count: int, max_receives: Optional[int]) -> bool:
    """Whether this receive is the last the queue allows: handed back, the message is dead."""
    return 0 < (max_receives or 0) <= receive_count


def delivery_counts(reply: str) -> tuple[int, int]:
    """A delivery's receive count and stream sequence, from its ack subject
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.…``; the v2 form carries a domain and
    an account hash first), without parsing the rest."""
    tokens = reply.split(".")
    if len(tokens) > 9:
        return int(tokens[6]), int(tokens[7])
    return int(tokens[4]), int(tokens[5])


def dead_word(sequence: int, receive_count: int, subject: str) -> bytes:
    """What tells the dead-letter mover, published without a reply to the queue's reject subject,
    that message ``sequence`` of the queue on ``subject`` was handed back on its last receive."""
    return _COMPACT_JSON.encode({"seq": sequence, "receive_count": receive_count, "subject": subject,
                                 "exhausted": True}).encode()


def body_view(data: bytes) -> dict[str, Any]:
    """A stored body as the API shows it: ``{"body": <its text>}`` when it is UTF-8, else
    ``{"body": None, "body_base64": <its bytes in base64>}``."""
    try:
        return {"body": data.decode()}
    except UnicodeDecodeError:
        return {"body": None, "body_base64": base64.b64encode(data).decode()}


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):  # 1e400: JSON's, but no float holds it, and it would be written back as Infinity
        raise ValueError(f"{text[:32]} is too large a number to read")
    return number


def parse_json(data: bytes | str) -> Any:
    """``json.loads`` for what others sent: a document nested deeper than the parser goes (about
    1,000 levels, which a few KiB reach; it raises RecursionError, no ValueError) is refused as
    invalid JSON too, and so are ``NaN`` and ``Infinity``, which Python reads and writes back but
    JSON has not got (an export would have written them as they came: no JSON Lines reader takes
    them), and numbers too large for a float (read as infinite)."""
    try:
        return json.loads(data, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise ValueError("The JSON is nested too deeply to read") from None


def decode(data: bytes, content_type: Optional[str]) -> Any:
    """The inverse of ``encode``, by the message's Content-Type. SpecError for a body that is not
    what its Content-Type says (any NATS client can publish one): a worker's loop catches one
    kind of error for it, its bytes still readable as they are."""
    media = (content_type or "").split(";", 1)[0].strip().lower()  # 'application/json; charset=utf-8' too
    try:
        if media == JSON:
            return parse_json(data)
        if media.startswith("text/"):
            return data.decode()
    except ValueError as exc:  # JSON that is not, text that is not UTF-8
        raise SpecError(f"The body is not what its Content-Type {content_type!r} says ({exc}); its bytes are "
                        "in the message's data.") from None
    return data


# -- leases ----------------------------------------------------------------------------------------

def leases_over(last_active: Optional[datetime], ack_wait: float, backoff: Sequence[float], now: datetime) -> bool:
    """Whether every lease a consumer gave has run out by ``now``, so that what it counts as
    pending (``num_ack_pending``) is waiting for its next receive, not held by a worker.

    JetStream keeps each lease's end to itself (a lease that ran out stays pending until a pull
    request takes it again), but the consumer's ``delivered.last_active`` is the last time any
    lease began: a delivery, a worker's extension (``+WPI``) or a hand-back with a delay all set
    it (nats-server 2.15 ``updateDelivered``). A lease lasts at most ``ack_wait``, or the longest
    ``backoff`` entry (seconds both), so once that much has passed since, every lease is over.
    Only a hand-back with a delay longer than that is still hidden then, and counts as waiting
    early. ``last_active`` None: the broker restarted and has delivered nothing since (it keeps no
    such time across a restart). Taken as over: a lease from before the restart runs at most one
    more lease's length (what it holds counts as waiting that early), where "not over" had shown
    every message a worker once held as in flight for good."""
    if last_active is None:
        return True
    longest = max([ack_wait, *backoff])
    return (now - last_active).total_seconds() >= longest


def consumer_leases_over(consumer: dict[str, Any], now: datetime) -> bool:
    """``leases_over`` for a consumer as JSZ and CONSUMER.INFO report it (times RFC 3339, durations
    nanoseconds)."""
    stamp = (consumer.get("delivered") or {}).get("last_active")
    config = consumer.get("config") or {}
    seen = parse_stamp(consumer["ts"]) if consumer.get("ts") else now  # the broker's clock, when it says
    return leases_over(parse_stamp(stamp) if stamp else None, int(config.get("ack_wait") or 0) / 1e9,
                       [int(step) / 1e9 for step in config.get("backoff") or ()], seen)


def parse_stamp(stamp: str) -> datetime:
    """The broker's RFC 3339 timestamp (nanoseconds, ``Z``) as a datetime (microseconds)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}+00:00")
