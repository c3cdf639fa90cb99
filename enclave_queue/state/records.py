"""The records kept in the state store, one JSON document per key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..spec import QueueSpec

State = Literal["Reconciling", "Ready", "Errored", "Deleting"]


def now() -> datetime:
    return datetime.now(UTC)


class QueueRecord(BaseModel):
    """A declared queue: its spec, the account it owns, and whether it is being deleted.
    ``generation`` goes up with every change of the spec (or deletion)."""

    model_config = ConfigDict(frozen=True)

    id: str
    spec: QueueSpec
    generation: int = 1
    created_at: datetime = Field(default_factory=now)
    deleting: bool = False

    @property
    def key(self) -> str:
        return self.spec.key


class Condition(BaseModel):
    """One status condition, Kubernetes-style: ``last_transition_time`` moves only on a flip."""

    model_config = ConfigDict(frozen=True)

    type: State
    status: bool
    reason: str
    message: str
    last_transition_time: datetime


class QueueStatus(BaseModel):
    """What the reconciler last made of a queue. ``state`` is the one condition that is true."""

    model_config = ConfigDict(frozen=True)

    state: State
    message: str
    observed_generation: int
    conditions: tuple[Condition, ...] = ()

    def transition(self, state: State, message: str, reason: str, generation: int) -> QueueStatus:
        """This status moved to ``state``; conditions that do not flip keep their transition time."""
        at = now()
        previous = {c.type: c for c in self.conditions}
        conditions = []
        for kind in ("Ready", "Reconciling", "Errored", "Deleting"):
            active = kind == state
            old = previous.get(kind)
            if old is not None and old.status == active and (not active or old.message == message):
                conditions.append(old)
            else:
                conditions.append(
                    Condition(
                        type=kind,  # type: ignore[arg-type]
                        status=active,
                        reason=reason if active else (old.reason if old else "NotObserved"),
                        message=message if active else "",
                        last_transition_time=at if old is None or old.status != active else old.last_transition_time,
                    )
                )
        return QueueStatus(state=state, message=message, observed_generation=generation, conditions=tuple(conditions))

    @classmethod
    def initial(cls, message: str = "Waiting for the controller.", generation: int = 0) -> QueueStatus:
        return cls(state="Reconciling", message=message, observed_generation=0).transition(
            "Reconciling", message, "Submitted", generation
        )


class EarlierPassword(BaseModel):
    """A password from before the previous one that still logs in, until ``until``."""

    model_config = ConfigDict(frozen=True)

    version: int
    hash: str = Field(repr=False)
    until: datetime


class AccountRecord(BaseModel):
    """A queue account on the broker and its app user. ``owner`` is the queue key that claimed it;
    ``None`` while it waits in the pool."""

    model_config = ConfigDict(frozen=True)

    id: str
    password_hash: str = Field(repr=False)
    sealed_password: str = Field(repr=False)  #: AES-GCM under the master key, bound to ``id``
    owner: Optional[str] = None
    created_at: datetime = Field(default_factory=now)
    #: bytes of JetStream storage the account may use (its queue's max_bytes); None: the default
    max_bytes: Optional[int] = None
    #: the current password's version: 1, and one more at each rotation (its signing key's)
    password_version: int = 1
    #: during a rotation's grace: the previous password's bcrypt hash, and until when it logs in
    previous_hash: Optional[str] = Field(None, repr=False)
    previous_until: Optional[datetime] = None
    #: passwords older than the previous one whose grace has not ended: a rotation during another
    #: one's grace keeps the promise that one made (at most MAX_EARLIER, the newest)
    earlier: tuple[EarlierPassword, ...] = ()


class TokenRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    created_at: datetime = Field(default_factory=now)


class AccessKeyRecord(BaseModel):
    """An SQS access key (sqs/keys.py): its id is the key, its secret sealed under the master key
    (bound to the id), and the project it is scoped to (None: every project)."""

    model_config = ConfigDict(frozen=True)

    id: str
    sealed_secret: str = Field(repr=False)  #: AES-GCM under the master key, bound to ``id``
    project: Optional[str] = None
    name: str = ""  #: what the operator called it
    created_at: datetime = Field(default_factory=now)


class SqsLease(BaseModel):
    """A visibility an SQS ChangeMessageVisibility set: which receive of the message it is for, and
    when it ends (epoch seconds). Kept so a handle's lease outlives this process (a restart)."""

    model_config = ConfigDict(frozen=True)

    receive_count: int
    until: float
    first_received: Optional[float] = None


class SqsQueueRecord(BaseModel):
    """What the SQS endpoint keeps of a queue beside its spec: the SQS attributes Enclave has no
    setting for, and its tags. ``queue_id`` is the queue it was written for, so a re-created queue
    of the same name does not inherit them."""

    model_config = ConfigDict(frozen=True)

    queue_id: str
    delay_seconds: int = 0  #: DelaySeconds: the delay of a message sent without its own
    receive_wait_seconds: int = 0  #: ReceiveMessageWaitTimeSeconds: the wait of a receive without its own
    tags: dict[str, str] = Field(default_factory=dict)
    modified_at: datetime = Field(default_factory=now)


class QueueCounters(BaseModel):
    """What happened to a queue's messages that ran out of receives, and how many were nacked."""

    model_config = ConfigDict(frozen=True)

    dead_lettered: int = 0  #: moved to the dead-letter queue
    discarded: int = 0  #: dropped after the last receive (no dead-letter queue)
    nacked: int = 0  #: handed back by a worker (controller/naks.py; the last few seconds are added late)
    rejected: int = 0  #: dead-lettered at once by a worker (``reject``)
    released: int = 0  #: handed back by a worker without spending an attempt (``release``: a copy replaces it)
    expired: int = 0  #: dropped unrun at their start deadline (``put(ttl_s=)``)
    cleared: int = 0  #: removed by ``clear`` (waiting and delayed ones)
    scheduled: int = 0  #: delayed messages stored as schedules and not cleared (each is removed when it fires)
    #: the last events counted with ``Store.count(once=…)`` (``move:<seq>``, ``expire:<seq>``): one
    #: repeated after a crash between its count and its delete is not counted twice
    recent: tuple[str, ...] = ()
