"""The SQS actions, each onto the queue service (service.py) and the SQS message operations
(queues/sqs.py). Requests and answers are in the JSON protocol's member names (wire.py reads and
writes the query protocol's); every refusal is an SqsError with AWS's code (errors.py).

A queue is named by its URL (``…/<project>/<name>``) or ARN (``arn:aws:sqs:<region>:<project>:<name>``).
An access key scoped to a project may name only that project's queues (AccessDenied otherwise);
CreateQueue and GetQueueUrl work in the key's project, or for a key of every project in
``default`` (GetQueueUrl: or in the project ``QueueOwnerAWSAccountId`` names).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from .. import envelope
from ..auth.provenance import is_copy_id
from ..envelope import parse_json, whole_number
from ..errors import Conflict, EnclaveError, NotFound
from ..queues.sqs import MessageGone, NotInFlight, ReceiptInvalid, Received, SqsMessages
from ..service import QueueService
from ..spec import DEFAULT_PROJECT, parse_patch, parse_spec
from ..state.queries import dead_letter_users
from ..state.records import QueueRecord, SqsQueueRecord, now
from . import attributes as attrs
from . import messages as msgs
from .errors import BROKER_ERRORS, SqsError, access_denied, from_enclave, invalid_parameter, missing_parameter
from .keys import AccessKey

OWN_CACHE = 2.0  #: seconds a queue's SQS record (DelaySeconds, the receive wait) is read from memory
CREATE_WAIT = 20.0  #: seconds a CreateQueue waits for its queue to be Ready (so the URL works at once)
MAX_BATCH = 10
MAX_BATCH_BYTES = 1 << 20  #: bytes of all a SendMessageBatch's messages together (AWS's 1 MiB)
MAX_RECEIVE = 10
MAX_VISIBILITY = 43200
MAX_LIST = 1000
MAX_TAGS = 50
MAX_MOVE_RATE = 500
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
_DEDUPE = re.compile(r"[!-~]{1,128}")
STATUS = {"running": "RUNNING", "done": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED"}
SYSTEM_ATTRIBUTES = frozenset({"SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
                               "SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader",
                               "DeadLetterQueueSourceArn"})
BINARY_MARK = "Enclave.BodyEncoding"  #: added to a message whose stored body is not UTF-8 (Body is its base64)


@dataclass(frozen=True)
class Caller:
    """Who asks (a verified access key) and where: ``base_url`` is the endpoint's own URL (queue URLs
    are built on it); ``path_queue`` the queue a query request's path names, if any."""

    key: AccessKey
    base_url: str
    path_queue: Optional[tuple[str, str]] = None


def _int(params: dict[str, Any], name: str, low: int, high: int, default: Optional[int] = None) -> Optional[int]:
    value = params.get(name)
    if value is None or value == "":
        return default
    number = whole_number(value)
    if number is None or not low <= number <= high:
        raise invalid_parameter(f"Value {str(value)[:40]} for parameter {name} is invalid. Reason: must be between "
                                f"{low} and {high}, if provided.")
    return number


def _no_resource(action: Callable[[dict[str, Any], Caller], Awaitable[dict[str, Any]]]
                 ) -> Callable[[dict[str, Any], Caller], Awaitable[dict[str, Any]]]:
    """A move task's action: a source queue that does not exist is ResourceNotFoundException,
    as SQS answers for these actions (not QueueDoesNotExist)."""
    async def run(params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        try:
            return await action(params, caller)
        except NotFound as exc:
            raise SqsError.modelled("ResourceNotFoundException", exc.message) from None
        except SqsError as exc:
            if exc.shape != "QueueDoesNotExist":
                raise
            raise SqsError.modelled("ResourceNotFoundException", exc.message) from None

    return run


def _token(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


def _untoken(value: Any, name: str = "NextToken") -> str:
    """What ``_token`` made ``value`` of; InvalidParameterValue for anything else (base64's decoder
    skips characters it does not know: ``%%%`` read as the first page)."""
    try:
        decoded = base64.urlsafe_b64decode(str(value).encode()).decode()
        if _token(decoded) != value:
            raise ValueError("not a token")
        return decoded
    except (ValueError, UnicodeError):
        raise invalid_parameter(f"Value for parameter {name} is invalid. Reason: it is not a token this endpoint "
                                "gave out.") from None


class Actions:
    """Every supported action, by name (``run``)."""

    def __init__(self, service: QueueService, messages: SqsMessages, region: str) -> None:
        self.service = service
        self.messages = messages
        self.region = region
        #: queue id -> (when read, its SQS record and revision)
        self._own_cache: dict[str, tuple[float, tuple[Optional[SqsQueueRecord], Optional[int]]]] = {}
        self.table: dict[str, Callable[[dict[str, Any], Caller], Awaitable[dict[str, Any]]]] = {
            "CreateQueue": self.create_queue, "GetQueueUrl": self.get_queue_url, "ListQueues": self.list_queues,
            "DeleteQueue": self.delete_queue, "GetQueueAttributes": self.get_queue_attributes,
            "SetQueueAttributes": self.set_queue_attributes, "PurgeQueue": self.purge_queue,
            "SendMessage": self.send_message, "SendMessageBatch": self.send_message_batch,
            "ReceiveMessage": self.receive_message, "DeleteMessage": self.delete_message,
            "DeleteMessageBatch": self.delete_message_batch, "ChangeMessageVisibility": self.change_visibility,
            "ChangeMessageVisibilityBatch": self.change_visibility_batch,
            "ListDeadLetterSourceQueues": self.list_dead_letter_sources,
            "StartMessageMoveTask": _no_resource(self.start_move_task),
            "ListMessageMoveTasks": _no_resource(self.list_move_tasks),
            "CancelMessageMoveTask": self.cancel_move_task, "TagQueue": self.tag_queue,
            "UntagQueue": self.untag_queue, "ListQueueTags": self.list_queue_tags,
        }

    async def run(self, action: str, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        """The answer to ``action``; SqsError for any refusal (an EnclaveError translated)."""
        handler = self.table.get(action)
        if handler is None:
            if action in ("AddPermission", "RemovePermission"):
                raise SqsError.modelled("UnsupportedOperation", f"{action} is not supported: Enclave access is "
                                                                "granted by access keys (enclave access-key create).")
            raise SqsError("InvalidAction", f"The action {action[:64] or '(none)'} is not valid for this endpoint.")
        try:
            return await handler(params, caller)
        except EnclaveError as exc:
            raise from_enclave(exc) from exc

    # -- naming queues --------------------------------------------------------------------------

    @staticmethod
    def _allowed(caller: Caller, project: str) -> None:
        scope = caller.key.project
        if scope is not None and project != scope:
            raise access_denied(f"Access key {caller.key.id} is scoped to project '{scope}'; it may not use "
                                f"project '{project[:64]}'.")

    def _home(self, caller: Caller, owner: Any = None) -> str:
        project = str(owner) if owner else (caller.key.project or DEFAULT_PROJECT)
        self._allowed(caller, project)
        return project

    def _addressed(self, params: dict[str, Any], caller: Caller) -> tuple[str, str]:
        url = params.get("QueueUrl")
        if url in (None, "") and caller.path_queue is not None:
            project, name = caller.path_queue
            attrs.check_names(project, name)
        elif url in (None, ""):
            raise missing_parameter("QueueUrl")
        else:
            project, name = attrs.parse_queue_url(url)
        self._allowed(caller, project)
        return project, name

    def _by_arn(self, value: Any, field: str, caller: Caller) -> tuple[str, str]:
        if value in (None, ""):
            raise missing_parameter(field)
        project, name = attrs.parse_arn(value, field)
        attrs.check_names(project, name)
        self._allowed(caller, project)
        return project, name

    def url(self, caller: Caller, project: str, name: str) -> str:
        return attrs.queue_url(caller.base_url, project, name)

    async def _own(self, record: QueueRecord, *, fresh: bool = False) -> tuple[Optional[SqsQueueRecord], Optional[int]]:
        """The queue's SQS record (None if it has none, or it is an older queue's) and its revision.
        Sends and receives read it from a cache of OWN_CACHE seconds (this process's own writes
        replace its entry at once); ``fresh`` reads the store."""
        cached = self._own_cache.get(record.id)
        if not fresh and cached is not None and time.monotonic() - cached[0] < OWN_CACHE:
            return cached[1]
        found = await self.service.store.sqs.get(record.key)
        answer = (None, found[1] if found else None) if found is None or found[0].queue_id != record.id else found
        if len(self._own_cache) > 10_000:
            self._own_cache.clear()
        self._own_cache[record.id] = (time.monotonic(), answer)
        return answer

    async def _change_own(self, record: QueueRecord, change: Callable[[SqsQueueRecord], SqsQueueRecord]) -> None:
        """Apply ``change`` to the queue's SQS record (compare-and-set, again on a race)."""
        bucket = self.service.store.sqs
        for _ in range(10):
            current, revision = await self._own(record, fresh=True)
            changed = change(current or SqsQueueRecord(queue_id=record.id)).model_copy(update={"modified_at": now()})
            try:
                if revision is None:
                    revision = await bucket.create(record.key, changed)
                else:
                    revision = await bucket.update(record.key, changed, revision)
                self._own_cache[record.id] = (time.monotonic(), (changed, revision))
                return
            except Conflict:
                continue
        raise SqsError("ServiceUnavailable", f"The attributes of queue '{record.spec.name}' kept changing; try again.",
                       503, sender=False)

    # -- queues ---------------------------------------------------------------------------------

    async def create_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        name = attrs.check_new_name(params.get("QueueName"))
        project = self._home(caller)
        spec_fields, own = attrs.parse_attributes(params.get("Attributes"), project, name)
        tags = _check_tags(params.get("tags") or params.get("Tags") or {})
        spec = parse_spec({"name": name, "project": project, **spec_fields})
        try:
            queue = await self.service.create(spec)
        except Conflict as exc:
            if "already exists" not in exc.message:
                raise
            record = await self.service.lookup.live(project, name)
            current, _ = await self._own(record, fresh=True)
            diff = attrs.differing(spec_fields, own, self.service.view(record), current.model_dump() if current else {})
            if diff:
                raise SqsError.modelled("QueueNameExists", f"A queue already exists with the same name and a "
                                                           f"different value for attribute {diff}.") from None
            return {"QueueUrl": self.url(caller, project, name)}
        if own or tags:
            record = await self.service.lookup.live(project, name)
            await self._change_own(record, lambda r: r.model_copy(update={**own, "tags": tags}))
        status = await self.service.wait_settled(project, name, CREATE_WAIT)
        if status["state"] == "Errored":
            raise SqsError("InternalFailure", f"Queue '{name}' was declared but the controller could not make it: "
                                              f"{status['message']}", 500, sender=False)
        return {"QueueUrl": self.url(caller, queue.project, queue.name)}

    async def get_queue_url(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        name = params.get("QueueName")
        if not name:
            raise missing_parameter("QueueName")
        project = self._home(caller, params.get("QueueOwnerAWSAccountId"))
        attrs.check_names(project, str(name))
        await self.service.get(project, str(name))
        return {"QueueUrl": self.url(caller, project, str(name))}

    async def list_queues(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        prefix = params.get("QueueNamePrefix") or ""
        limit = _int(params, "MaxResults", 1, MAX_LIST)
        after = _untoken(params["NextToken"]) if params.get("NextToken") else ""
        projects = [caller.key.project] if caller.key.project else await self.service.projects()
        urls = []
        for project in projects:
            urls += [self.url(caller, project, q.name) for q in await self.service.list(project)
                     if q.name.startswith(prefix)]
        urls = sorted(u for u in urls if u > after)
        page = urls[:limit or MAX_LIST]
        answer: dict[str, Any] = {"QueueUrls": page}
        if limit is not None and len(urls) > len(page):
            answer["NextToken"] = _token(page[-1])
        return answer

    async def delete_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        record = await self.service.lookup.live(project, name)
        await self.service.delete(project, name)
        self._own_cache.pop(record.id, None)
        own, _ = await self._own(record, fresh=True)
        if own is not None:  # its tags and SQS attributes go with it (a new queue of the name starts afresh)
            await self.service.store.sqs.delete(record.key)
        return {}

    async def get_queue_attributes(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        names = attrs.wanted(params.get("AttributeNames"))
        record = await self.service.lookup.live(project, name)
        own, _ = await self._own(record, fresh=True)
        depth = None
        if names & attrs.DEPTH.keys():
            depth = (await self.service.depth(project, name)).view()
        values = attrs.queue_attributes(
            names, queue=self.service.view(record), created_at=record.created_at,
            modified_at=own.modified_at if own else record.created_at, region=self.region,
            delay_seconds=own.delay_seconds if own else 0, receive_wait_seconds=own.receive_wait_seconds if own else 0,
            depth=depth)
        return {"Attributes": values} if values else {}

    async def set_queue_attributes(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        if "Attributes" not in params:
            raise missing_parameter("Attributes")
        spec_fields, own = attrs.parse_attributes(params.get("Attributes"), project, name)
        record = await self.service.lookup.live(project, name)
        if spec_fields:
            await self.service.update(project, name, parse_patch(spec_fields))
        await self._change_own(record, lambda r: r.model_copy(update=own))
        return {}

    async def purge_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        await self.messages.purge(await self.service.lookup.ready(project, name))
        return {}

    # -- sending --------------------------------------------------------------------------------

    async def send_message(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        record = await self.service.lookup.ready(project, name)
        own, _ = await self._own(record)
        return await self._send(record, own, params, caller)

    async def _send(self, record: QueueRecord, own: Optional[SqsQueueRecord], entry: dict[str, Any],
                    caller: Caller) -> dict[str, Any]:
        if entry.get("MessageGroupId"):
            raise invalid_parameter(f"The request includes a MessageGroupId, which only FIFO queues take: "
                                    f"{attrs.FIFO_REFUSED}.")
        body = msgs.check_body(entry.get("MessageBody"))
        message_attributes = msgs.check_attributes(entry.get("MessageAttributes"))
        system = msgs.check_attributes(entry.get("MessageSystemAttributes"), "message system attribute")
        if set(system) - {"AWSTraceHeader"}:
            raise invalid_parameter("The only message system attribute a message may carry is AWSTraceHeader.")
        delay = _int(entry, "DelaySeconds", 0, attrs.MAX_DELAY_SECONDS, own.delay_seconds if own else 0) or 0
        dedupe = entry.get("MessageDeduplicationId")
        if dedupe is not None and not (isinstance(dedupe, str) and _DEDUPE.fullmatch(dedupe)):
            raise invalid_parameter("Value for parameter MessageDeduplicationId is invalid. Reason: it must be 1-128 "
                                    "printable ASCII characters without spaces.")
        message_id = str(uuid.uuid4())
        headers = {msgs.MESSAGE_ID_HEADER: message_id, msgs.SENDER_HEADER: caller.key.id}
        stored = len(body)
        if message_attributes:
            headers[msgs.ATTRIBUTES_HEADER] = msgs.encode_attributes(message_attributes)
            stored += len(headers[msgs.ATTRIBUTES_HEADER])
        if system:
            trace = system["AWSTraceHeader"]
            if "StringValue" not in trace or not trace["StringValue"].isprintable():
                raise invalid_parameter("AWSTraceHeader must be a String of printable characters.")
            headers[msgs.TRACE_HEADER] = trace["StringValue"]
            stored += len(trace["StringValue"])
        limit = record.spec.max_message_bytes
        if stored > limit:
            raise invalid_parameter(f"One or more parameters are invalid. Reason: Message must be shorter than {limit} "
                                    f"bytes (its body and message attributes as stored take {stored}).")
        answer = {"MD5OfMessageBody": msgs.body_md5(body), "MessageId": message_id}
        if message_attributes:
            answer["MD5OfMessageAttributes"] = msgs.attributes_md5(message_attributes)
        if system:
            answer["MD5OfMessageSystemAttributes"] = msgs.attributes_md5(system)
        # the answer made before the message is stored: nothing after the store can fail the send
        await self.messages.send(record.spec.project, record.spec.name, body, headers, dedupe, delay)
        return answer

    async def send_message_batch(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        entries = _check_batch(params.get("Entries"), "SendMessageBatchRequestEntry")
        total = sum(len(str(e.get("MessageBody") or "").encode()) for e in entries)
        if total > MAX_BATCH_BYTES:
            raise SqsError.modelled("BatchRequestTooLong", f"Batch requests cannot be longer than {MAX_BATCH_BYTES} "
                                                           f"bytes. You have sent {total} bytes.")
        record = await self.service.lookup.ready(project, name)
        own, _ = await self._own(record)
        return await _each(entries, lambda entry: self._send(record, own, entry, caller))

    # -- receiving ------------------------------------------------------------------------------

    async def receive_message(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        count = _int(params, "MaxNumberOfMessages", 1, MAX_RECEIVE, 1) or 1
        visibility = _int(params, "VisibilityTimeout", 0, MAX_VISIBILITY)
        record = await self.service.lookup.ready(project, name)
        own, _ = await self._own(record)
        wait = _int(params, "WaitTimeSeconds", 0, attrs.MAX_WAIT_SECONDS, own.receive_wait_seconds if own else 0) or 0
        system = _system_names([*(params.get("AttributeNames") or ()), *(params.get("MessageSystemAttributeNames") or ())])
        wanted_attributes = params.get("MessageAttributeNames")
        try:
            received = await self.messages.receive(record, count, wait, visibility)
        except (EnclaveError, *BROKER_ERRORS):  # the queue deleted while the receive waited: QueueDoesNotExist
            await self.service.lookup.live(project, name)
            raise
        return {"Messages": [self._message(record, m, system, wanted_attributes) for m in received]}

    def _source_arn(self, record: QueueRecord, message: Received) -> Optional[str]:
        """A dead letter's source queue's ARN, if the mover wrote it there (its provenance holds:
        an app may write the same headers on any message it sends)."""
        vouched = self.service.letters.provenance.vouched(record.id, message.headers, message.data)
        source, project = vouched.get(envelope.SOURCE_QUEUE), vouched.get(envelope.SOURCE_PROJECT)
        return attrs.arn(self.region, project, source) if source and project else None

    def _message(self, record: QueueRecord, message: Received, system: set[str],
                 wanted_attributes: Optional[list[Any]]) -> dict[str, Any]:
        headers = message.headers
        body, binary = msgs.body_text(message.data)
        out: dict[str, Any] = {
            "MessageId": msgs.message_id(headers, record.id, envelope.message_id(headers, message.sequence)),
            "ReceiptHandle": message.receipt,
            "MD5OfBody": msgs.body_md5(body.encode()),
            "Body": body,
        }
        values = {
            "ApproximateReceiveCount": str(message.receive_count),
            "SentTimestamp": str(int(message.sent_at.timestamp() * 1000)) if message.sent_at else None,
            "ApproximateFirstReceiveTimestamp": str(int((message.first_received or (
                message.sent_at.timestamp() if message.sent_at else 0)) * 1000)),
            "SenderId": headers.get(msgs.SENDER_HEADER),
            "MessageDeduplicationId": _dedupe_id(headers),
            "AWSTraceHeader": headers.get(msgs.TRACE_HEADER),
            "DeadLetterQueueSourceArn": self._source_arn(record, message) if "DeadLetterQueueSourceArn" in system
            else None,
        }
        chosen = {k: v for k, v in values.items() if k in system and v is not None}
        if chosen:
            out["Attributes"] = chosen
        stored = msgs.decode_attributes(headers.get(msgs.ATTRIBUTES_HEADER))
        returned = msgs.selected(stored, wanted_attributes)
        if binary:
            returned[BINARY_MARK] = {"DataType": "String", "StringValue": "base64"}
        if returned:
            out["MD5OfMessageAttributes"] = msgs.attributes_md5(returned)
            out["MessageAttributes"] = {k: ({"DataType": v["DataType"],
                                             "BinaryValue": base64.b64encode(v["BinaryValue"]).decode()}
                                            if "BinaryValue" in v else v) for k, v in returned.items()}
        return out

    # -- by receipt handle ----------------------------------------------------------------------

    async def _receipt_target(self, params: dict[str, Any], caller: Caller) -> QueueRecord:
        project, name = self._addressed(params, caller)
        return await self.service.lookup.live(project, name)

    async def _delete(self, record: QueueRecord, entry: dict[str, Any]) -> dict[str, Any]:
        receipt = _receipt(entry)
        try:
            await self.messages.delete(record, receipt)
        except ReceiptInvalid:
            raise _bad_receipt(receipt) from None
        return {}

    async def delete_message(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        record = await self._receipt_target(params, caller)
        return await self._delete(record, params)

    async def delete_message_batch(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        entries = _check_batch(params.get("Entries"), "DeleteMessageBatchRequestEntry")
        record = await self._receipt_target(params, caller)
        return await _each(entries, lambda entry: self._delete(record, entry))

    async def _change(self, record: QueueRecord, entry: dict[str, Any]) -> dict[str, Any]:
        receipt = _receipt(entry)
        if entry.get("VisibilityTimeout") in (None, ""):
            raise missing_parameter("VisibilityTimeout")
        timeout = _int(entry, "VisibilityTimeout", 0, MAX_VISIBILITY) or 0
        try:
            await self.messages.change_visibility(record, receipt, timeout)
        except ReceiptInvalid:
            raise _bad_receipt(receipt) from None
        except NotInFlight as exc:
            raise SqsError.modelled("MessageNotInflight", exc.message) from None
        except MessageGone:  # SQS's words for it
            raise SqsError("InvalidParameterValue", f"Value {receipt} for parameter ReceiptHandle is invalid. Reason: "
                                                    "Message does not exist or is not available for visibility "
                                                    "timeout change.") from None
        return {}

    async def change_visibility(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        record = await self._receipt_target(params, caller)
        return await self._change(record, params)

    async def change_visibility_batch(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        entries = _check_batch(params.get("Entries"), "ChangeMessageVisibilityBatchRequestEntry")
        record = await self._receipt_target(params, caller)
        return await _each(entries, lambda entry: self._change(record, entry))

    # -- dead letters and move tasks ------------------------------------------------------------

    async def list_dead_letter_sources(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        await self.service.lookup.live(project, name)
        limit = _int(params, "MaxResults", 1, MAX_LIST)
        after = _untoken(params["NextToken"]) if params.get("NextToken") else ""
        urls = sorted(self.url(caller, project, n) for n in await dead_letter_users(self.service.store, project, name))
        urls = [u for u in urls if u > after]
        page = urls[:limit or MAX_LIST]
        answer: dict[str, Any] = {"queueUrls": page}
        if limit is not None and len(urls) > len(page):
            answer["NextToken"] = _token(page[-1])
        return answer

    def _task_entry(self, task: Any) -> dict[str, Any]:
        status = STATUS.get(task.state, task.state.upper())
        entry: dict[str, Any] = {
            "Status": status,
            "SourceArn": attrs.arn(self.region, task.project, task.queue),
            "ApproximateNumberOfMessagesMoved": task.moved,
            "ApproximateNumberOfMessagesToMove": task.total,
            "StartedTimestamp": int(datetime.fromisoformat(task.started_at).timestamp() * 1000),
        }
        if status == "RUNNING":
            entry["TaskHandle"] = _token(json.dumps({"p": task.project, "q": task.queue, "t": task.id}))
        if task.to:
            entry["DestinationArn"] = attrs.arn(self.region, task.project, task.to)
        if task.rate:
            entry["MaxNumberOfMessagesPerSecond"] = int(task.rate)
        if status == "FAILED" and task.errors:
            entry["FailureReason"] = task.errors[-1][:1000]
        return entry

    def _tasks_of(self, project: str, name: str) -> list[Any]:
        tasks = [t for t in self.service.dead_letters.tasks.values() if (t.project, t.queue) == (project, name)]
        return sorted(tasks, key=lambda t: t.started_at, reverse=True)

    async def start_move_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._by_arn(params.get("SourceArn"), "SourceArn", caller)
        to = None
        if params.get("DestinationArn"):
            dest_project, to = self._by_arn(params.get("DestinationArn"), "DestinationArn", caller)
            if dest_project != project:
                raise invalid_parameter("Value for parameter DestinationArn is invalid. Reason: the destination must "
                                        f"be in the source queue's project '{project}'.")
        rate = _int(params, "MaxNumberOfMessagesPerSecond", 1, MAX_MOVE_RATE)
        if any(t.state == "running" for t in self._tasks_of(project, name)):
            raise SqsError.modelled("UnsupportedOperation", f"A message move task is already running on queue "
                                                            f"'{name}'; cancel it or wait for it to finish.")
        if to is None and not await dead_letter_users(self.service.store, project, name):
            await self.service.lookup.live(project, name)
            raise invalid_parameter(f"Source queue '{name}' must be configured as a dead-letter queue (the "
                                    "RedrivePolicy of another queue names it), or give a DestinationArn.")
        task = await self.service.dead_letters.start_redrive(project, name, to=to, rate=rate)
        return {"TaskHandle": _token(json.dumps({"p": project, "q": name, "t": task["id"]}))}

    async def list_move_tasks(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._by_arn(params.get("SourceArn"), "SourceArn", caller)
        await self.service.lookup.live(project, name)
        limit = _int(params, "MaxResults", 1, 10, 1) or 1
        return {"Results": [self._task_entry(t) for t in self._tasks_of(project, name)[:limit]]}

    async def cancel_move_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        handle = params.get("TaskHandle")
        if not handle:
            raise missing_parameter("TaskHandle")
        try:
            opened = parse_json(_untoken(handle, "TaskHandle"))
            project, name, task_id = str(opened["p"]), str(opened["q"]), str(opened["t"])
        except (ValueError, KeyError, TypeError):
            raise SqsError.modelled("ResourceNotFoundException", "The task handle names no task.") from None
        self._allowed(caller, project)
        try:
            task = self.service.dead_letters.task(project, name, task_id)
        except NotFound:
            raise SqsError.modelled("ResourceNotFoundException", f"Task {task_id[:20]} does not exist.") from None
        if task.state != "running":
            raise SqsError.modelled("UnsupportedOperation", f"Only a running task can be cancelled; this one is "
                                                            f"{STATUS.get(task.state, task.state)}.")
        view = await self.service.dead_letters.cancel(project, name, task_id)
        return {"ApproximateNumberOfMessagesMoved": view["moved"]}

    # -- tags -----------------------------------------------------------------------------------

    async def tag_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        tags = _check_tags(params.get("Tags"), required=True)
        record = await self.service.lookup.live(project, name)
        current, _ = await self._own(record, fresh=True)
        if len({**(current.tags if current else {}), **tags}) > MAX_TAGS:
            raise invalid_parameter(f"Too many tags: a queue has at most {MAX_TAGS}.")
        await self._change_own(record, lambda r: r.model_copy(update={"tags": {**r.tags, **tags}}))
        return {}

    async def untag_queue(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        keys = params.get("TagKeys")
        if not isinstance(keys, list) or not keys:
            raise missing_parameter("TagKeys")
        record = await self.service.lookup.live(project, name)
        await self._change_own(record, lambda r: r.model_copy(
            update={"tags": {k: v for k, v in r.tags.items() if k not in keys}}))
        return {}

    async def list_queue_tags(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        project, name = self._addressed(params, caller)
        current, _ = await self._own(await self.service.lookup.live(project, name), fresh=True)
        return {"Tags": dict(current.tags)} if current and current.tags else {}


# -- helpers ------------------------------------------------------------------------------------


def _dedupe_id(headers: dict[str, str]) -> Optional[str]:
    """The dedupe key a message was sent with; not the id the control plane gave a copy it made."""
    msg_id = headers.get("Nats-Msg-Id")
    return None if msg_id is None or is_copy_id(msg_id) else msg_id


def _system_names(names: list[Any]) -> set[str]:
    asked = {str(n) for n in names}
    if "All" in asked:
        return set(SYSTEM_ATTRIBUTES)
    return asked & SYSTEM_ATTRIBUTES


def _receipt(entry: dict[str, Any]) -> str:
    receipt = entry.get("ReceiptHandle")
    if not receipt:
        raise missing_parameter("ReceiptHandle")
    return str(receipt)


def _bad_receipt(receipt: str) -> SqsError:
    return SqsError.modelled("ReceiptHandleIsInvalid", f'The input receipt handle "{receipt[:80]}" is not a valid '
                                                       "receipt handle.")


def _check_batch(entries: Any, kind: str) -> list[dict[str, Any]]:
    if not entries:
        raise SqsError.modelled("EmptyBatchRequest", f"There should be at least one {kind} in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid_parameter(f"Entries must be a list of {kind}.")
    if len(entries) > MAX_BATCH:
        raise SqsError.modelled("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are "
                                                                f"{MAX_BATCH}. You have sent {len(entries)}.")
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
            raise SqsError.modelled("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, "
                                                           "hyphens and underscores. It can be at most 80 letters long.")
        if entry_id in seen:
            raise SqsError.modelled("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return entries


async def _each(entries: list[dict[str, Any]],
                act: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """A batch: each entry done on its own (at the same time); each failure its own entry error."""
    async def one(entry: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"ok": {"Id": entry["Id"], **await act(entry)}}
        except SqsError as exc:
            error = exc
        except EnclaveError as exc:
            error = from_enclave(exc)
        return {"failed": {"Id": entry["Id"], "SenderFault": error.sender, "Code": error.code,
                           "Message": error.message}}

    outcomes = await asyncio.gather(*(one(entry) for entry in entries))
    return {"Successful": [o["ok"] for o in outcomes if "ok" in o],
            "Failed": [o["failed"] for o in outcomes if "failed" in o]}


def _check_tags(tags: Any, *, required: bool = False) -> dict[str, str]:
    if not tags:
        if required:
            raise missing_parameter("Tags")
        return {}
    if not isinstance(tags, dict):
        raise invalid_parameter("Tags must be a map of tag keys to values.")
    if len(tags) > MAX_TAGS:
        raise invalid_parameter(f"Too many tags: a queue has at most {MAX_TAGS}.")
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or not _tag_text(key):
            raise invalid_parameter(f"Tag key {str(key)[:40]!r} is invalid: a tag key is 1-128 {TAG_CHARACTERS}.")
        if not isinstance(value, str) or len(value) > 256 or not _tag_text(value):
            raise invalid_parameter(f"The value of tag {key!r} is invalid: a tag value is 0-256 {TAG_CHARACTERS}.")
    return dict(tags)


TAG_CHARACTERS = "letters, digits, spaces and _ . : / = + - @"  #: AWS's rule for tags


def _tag_text(text: str) -> bool:
    return all(c.isalnum() or c.isspace() or c in "_.:/=+-@" for c in text)
