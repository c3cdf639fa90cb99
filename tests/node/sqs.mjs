// The AWS SDK for JavaScript v3's SQS client against Enclave's SQS endpoint, one scenario per process:
// the current @aws-sdk/client-sqs (AWS JSON 1.0) or, with "protocol": "query", a release that still
// speaks the query protocol (./sqs-query). Reads {endpoint, region, key, secret, protocol, ...} on
// stdin and prints what happened as JSON; tests/sqs/test_node.py checks it.
import { createRequire } from "node:module";

const input = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => { text += chunk; });
  process.stdin.on("end", () => resolve(text));
}));

const sdk = input.protocol === "query"
  ? createRequire(new URL("./sqs-query/package.json", import.meta.url))("@aws-sdk/client-sqs")
  : await import("@aws-sdk/client-sqs");

function client(overrides = {}) {
  return new sdk.SQSClient({
    endpoint: input.endpoint,
    region: input.region,
    credentials: { accessKeyId: input.key, secretAccessKey: input.secret },
    maxAttempts: 1,
    ...overrides,
  });
}

const sqs = client();
const send = (Command, args, c = sqs) => c.send(new Command(args));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function refusal(promise) {
  try {
    await promise;
    return null;
  } catch (error) {
    return { name: error.name, code: error.Code ?? error.code ?? null, status: error.$metadata?.httpStatusCode };
  }
}

async function lifecycle() {
  const out = {};
  const created = await send(sdk.CreateQueueCommand, {
    QueueName: input.queue, Attributes: { VisibilityTimeout: "2", DelaySeconds: "0" }, tags: { team: "node" },
  });
  const url = created.QueueUrl;
  out.url = url;
  out.got_url = (await send(sdk.GetQueueUrlCommand, { QueueName: input.queue })).QueueUrl;
  const sent = await send(sdk.SendMessageCommand, {
    QueueUrl: url, MessageBody: "héllo from node",
    MessageAttributes: { kind: { DataType: "String", StringValue: "greeting" },
      blob: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2, 255]) } },
  });
  out.sent = { id: sent.MessageId, md5: sent.MD5OfMessageBody, md5_attributes: sent.MD5OfMessageAttributes };
  const batch = await send(sdk.SendMessageBatchCommand, {
    QueueUrl: url,
    Entries: [
      { Id: "a", MessageBody: "one" },
      { Id: "b", MessageBody: "two", DelaySeconds: 0 },
      { Id: "bad", MessageBody: "three", MessageAttributes: { n: { DataType: "Number", StringValue: "not-a-number" } } },
    ],
  });
  out.batch = { ok: (batch.Successful ?? []).map((e) => e.Id).sort(),
    failed: (batch.Failed ?? []).map((e) => ({ id: e.Id, code: e.Code, sender: e.SenderFault })) };
  const received = [];
  const handles = [];
  for (let round = 0; round < 5 && received.length < 3; round++) {
    const answer = await send(sdk.ReceiveMessageCommand, {
      QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 2,
      MessageAttributeNames: ["All"], AttributeNames: ["ApproximateReceiveCount", "SentTimestamp"],
    });
    for (const m of answer.Messages ?? []) {
      received.push({ body: m.Body, attributes: Object.keys(m.MessageAttributes ?? {}).sort(),
        count: m.Attributes?.ApproximateReceiveCount,
        blob: m.MessageAttributes?.blob ? Array.from(m.MessageAttributes.blob.BinaryValue) : null });
      handles.push({ body: m.Body, handle: m.ReceiptHandle });
    }
  }
  out.received = received.sort((x, y) => x.body.localeCompare(y.body));
  const first = handles.find((h) => h.body === "one");
  await send(sdk.ChangeMessageVisibilityCommand, { QueueUrl: url, ReceiptHandle: first.handle, VisibilityTimeout: 0 });
  const again = await send(sdk.ReceiveMessageCommand, {
    QueueUrl: url, WaitTimeSeconds: 2, AttributeNames: ["ApproximateReceiveCount"],
  });
  out.again = (again.Messages ?? []).map((m) => ({ body: m.Body, count: m.Attributes?.ApproximateReceiveCount }));
  const rest = handles.filter((h) => h.body !== "one");
  const deleted = await send(sdk.DeleteMessageBatchCommand, {
    QueueUrl: url, Entries: [...rest.map((h, i) => ({ Id: `m${i}`, ReceiptHandle: h.handle })),
      { Id: "forged", ReceiptHandle: "bm90LWEtcmVjZWlwdA" }],
  });
  out.deleted = { ok: (deleted.Successful ?? []).length, failed: (deleted.Failed ?? []).map((e) => e.Code) };
  for (const m of again.Messages ?? []) {
    await send(sdk.DeleteMessageCommand, { QueueUrl: url, ReceiptHandle: m.ReceiptHandle });
  }
  await send(sdk.SendMessageCommand, { QueueUrl: url, MessageBody: "to purge" });
  await send(sdk.PurgeQueueCommand, { QueueUrl: url });
  const attributes = await send(sdk.GetQueueAttributesCommand, { QueueUrl: url, AttributeNames: ["All"] });
  out.attributes = attributes.Attributes;
  out.tags = (await send(sdk.ListQueueTagsCommand, { QueueUrl: url })).Tags;
  out.listed = (await send(sdk.ListQueuesCommand, { QueueNamePrefix: input.queue })).QueueUrls;
  await send(sdk.DeleteQueueCommand, { QueueUrl: url });
  return out;
}

async function refusals() {
  const out = {};
  out.bad_secret = await refusal(send(sdk.ListQueuesCommand, {}, client({
    credentials: { accessKeyId: input.key, secretAccessKey: `${input.secret}x` } })));
  out.unknown_key = await refusal(send(sdk.ListQueuesCommand, {}, client({
    credentials: { accessKeyId: "EQAKAAAAAAAAAAAAAAAA", secretAccessKey: input.secret } })));
  out.expired = await refusal(send(sdk.ListQueuesCommand, {}, client({ systemClockOffset: -3600 * 1000 })));
  out.unknown_queue = await refusal(send(sdk.GetQueueUrlCommand, { QueueName: "no-such-queue-here" }));
  out.out_of_range = await refusal(send(sdk.CreateQueueCommand, {
    QueueName: input.queue, Attributes: { VisibilityTimeout: "43201" } }));
  out.fifo = await refusal(send(sdk.CreateQueueCommand, { QueueName: `${input.queue}.fifo` }));
  return out;
}

async function redrive() {
  const out = {};
  const dlq = (await send(sdk.CreateQueueCommand, { QueueName: input.dlq })).QueueUrl;
  const dlqArn = (await send(sdk.GetQueueAttributesCommand, { QueueUrl: dlq, AttributeNames: ["QueueArn"] }))
    .Attributes.QueueArn;
  const source = (await send(sdk.CreateQueueCommand, {
    QueueName: input.queue,
    Attributes: { VisibilityTimeout: "1", RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1 }) },
  })).QueueUrl;
  out.redrive_policy = JSON.parse((await send(sdk.GetQueueAttributesCommand, {
    QueueUrl: source, AttributeNames: ["RedrivePolicy"] })).Attributes.RedrivePolicy);
  await send(sdk.SendMessageCommand, { QueueUrl: source, MessageBody: "doomed" });
  const taken = await send(sdk.ReceiveMessageCommand, { QueueUrl: source, WaitTimeSeconds: 2 });
  out.taken = (taken.Messages ?? []).map((m) => m.Body);
  let dead = [];
  for (let i = 0; i < 40 && dead.length === 0; i++) {  // the lease ends; the mover moves it
    const answer = await send(sdk.ReceiveMessageCommand, { QueueUrl: dlq, WaitTimeSeconds: 1, VisibilityTimeout: 0 });
    dead = (answer.Messages ?? []).map((m) => m.Body);
  }
  out.dead = dead;
  out.sources = (await send(sdk.ListDeadLetterSourceQueuesCommand, { QueueUrl: dlq })).queueUrls;
  const task = await send(sdk.StartMessageMoveTaskCommand, { SourceArn: dlqArn });
  out.task_handle = Boolean(task.TaskHandle);
  let status = null;
  for (let i = 0; i < 50 && status !== "COMPLETED"; i++) {
    const listed = await send(sdk.ListMessageMoveTasksCommand, { SourceArn: dlqArn });
    status = listed.Results?.[0]?.Status ?? null;
    out.moved = listed.Results?.[0]?.ApproximateNumberOfMessagesMoved;
    if (status !== "COMPLETED") await sleep(100);
  }
  out.status = status;
  const back = await send(sdk.ReceiveMessageCommand, {
    QueueUrl: source, WaitTimeSeconds: 2, AttributeNames: ["ApproximateReceiveCount"] });
  out.back = (back.Messages ?? []).map((m) => ({ body: m.Body, count: m.Attributes?.ApproximateReceiveCount }));
  for (const m of back.Messages ?? []) {
    await send(sdk.DeleteMessageCommand, { QueueUrl: source, ReceiptHandle: m.ReceiptHandle });
  }
  await send(sdk.DeleteQueueCommand, { QueueUrl: source });
  return out;
}

// What an SDK reads in edge cases: answers with nothing in them, bodies and attributes with carriage
// returns (the SDK checks MD5OfBody on receive), a mebibyte batch, a deleted message's visibility.
async function edges() {
  const out = {};
  const url = (await send(sdk.CreateQueueCommand, { QueueName: input.queue })).QueueUrl;
  out.no_policy = (await send(sdk.GetQueueAttributesCommand, { QueueUrl: url, AttributeNames: ["RedrivePolicy"] }))
    .Attributes ?? null;
  out.no_tags = (await send(sdk.ListQueueTagsCommand, { QueueUrl: url })).Tags ?? null;
  const body = "line\rreturn\r\nand feed\n";
  await send(sdk.SendMessageCommand, { QueueUrl: url, MessageBody: body,
    MessageAttributes: { note: { DataType: "String", StringValue: "a\rb" } } });
  const got = await send(sdk.ReceiveMessageCommand, { QueueUrl: url, WaitTimeSeconds: 2, MessageAttributeNames: ["All"] });
  const message = got.Messages[0];
  out.body_kept = message.Body === body;
  out.attribute_kept = message.MessageAttributes.note.StringValue === "a\rb";
  await send(sdk.DeleteMessageCommand, { QueueUrl: url, ReceiptHandle: message.ReceiptHandle });
  out.gone = await refusal(send(sdk.ChangeMessageVisibilityCommand, {
    QueueUrl: url, ReceiptHandle: message.ReceiptHandle, VisibilityTimeout: 10 }));
  const big = "é".repeat(131000);
  const batch = await send(sdk.SendMessageBatchCommand, {
    QueueUrl: url, Entries: [0, 1, 2, 3].map((i) => ({ Id: `b${i}`, MessageBody: big })) });
  out.big_batch = (batch.Successful ?? []).length;
  out.too_long = await refusal(send(sdk.SendMessageBatchCommand, {
    QueueUrl: url, Entries: [0, 1, 2, 3, 4].map((i) => ({ Id: `b${i}`, MessageBody: big })) }));
  await send(sdk.DeleteQueueCommand, { QueueUrl: url });
  return out;
}

const scenarios = { lifecycle, refusals, redrive, edges };
const result = await scenarios[process.argv[2]]();
process.stdout.write(JSON.stringify(result));
