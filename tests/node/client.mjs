// A queue used from the official Node.js NATS client (@nats-io/transport-node + @nats-io/jetstream),
// the way an app would: the queue's username and password, its inbox prefix, publishes to its
// subject, and pulls from its existing durable consumer. Driven by
// tests/integration/test_node_client.py.
//
//   node tests/node/client.mjs SCENARIO < input.json
//
// The input (on stdin, so the password stays out of the process list) is an object with
// `creds` (as `enclave queue credentials NAME --json` prints them) and the scenario's options.
// The result is one JSON object on stdout. An expected refusal is part of the result; anything
// unexpected is printed to stderr and exits 1.
//
// Scenarios:
//   publish          {messages: [{data, msg_id?, headers?}]}  the PubAck of each
//   fetch            {max, expires_ms, ack}       consumers.get + fetch, each message acked (ackAck)
//   next             {expires_ms, ack}            consumers.get + next
//   redelivery       {visibility_timeout_seconds} a message taken and not acked comes back
//   wrong-password   {}                           the connect error
//   no-inbox-prefix  {}                           a publish from a connection without inboxPrefix
//   other-queue      {other: queue B's creds}     each attempt on B's stream and consumer, refused

import { connect, headers as natsHeaders } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";

const CONNECT_TIMEOUT = 3000; //: ms, the handshake
const API_TIMEOUT = 2000; //: ms, a JetStream API request or an ackAck
const REFUSAL_TIMEOUT = 1500; //: ms, an attempt expected to go unanswered
const RETRY_DELAY = 100; //: ms, between attempts of a request nobody answered
const RETRIES = 30; //: attempts of a request nobody answered

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** An error and its causes as plain JSON: what the client would show its user. */
function describe(err) {
  if (!(err instanceof Error)) return { name: typeof err, message: String(err) };
  const out = { name: err.name, message: err.message };
  if (err.code !== undefined) out.code = err.code;
  if (err.cause instanceof Error) out.cause = describe(err.cause);
  return out;
}

/** Nobody answered (no responders, a 503 status or API error): a just-made queue's JetStream may
 * not answer for a moment. */
function unavailable(err) {
  for (let e = err; e instanceof Error; e = e.cause) {
    if (e.code === 503 || e.status === 503 || /^no responders/i.test(e.message)) return true;
  }
  return false;
}

/** Calls `what` again while it fails as unavailable, as the docs ask every client to. Used only
 * where a repeat is safe: info requests, pulls, acks, and publishes nobody stored. */
async function retryingUnavailable(what) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await what();
    } catch (err) {
      if (!unavailable(err) || attempt >= RETRIES) throw err;
      await sleep(RETRY_DELAY);
    }
  }
}

/** A connection as the queue's user. `inboxPrefix` is required: the user may subscribe only
 * under it, and nats.js subscribes for every reply (PubAck, pull, info) under its inbox prefix,
 * `_INBOX.` by default (see the no-inbox-prefix scenario). */
async function connectAs(creds, overrides = {}) {
  const nc = await connect({
    servers: creds.broker_url,
    user: creds.username,
    pass: creds.password,
    inboxPrefix: creds.inbox_prefix,
    name: "enclave-node-test",
    timeout: CONNECT_TIMEOUT,
    maxReconnectAttempts: 5,
    reconnectTimeWait: 250,
    ...overrides,
  });
  const serverErrors = [];
  (async () => {
    for await (const status of nc.status()) {
      if (status.type === "error") serverErrors.push(describe(status.error));
    }
  })();
  return { nc, serverErrors };
}

function messageJson(m) {
  const hdrs = {};
  if (m.headers) for (const key of m.headers.keys()) hdrs[key] = m.headers.get(key);
  return {
    seq: m.seq,
    subject: m.subject,
    data: m.string(),
    headers: hdrs,
    delivery_count: m.info.deliveryCount,
    redelivered: m.redelivered,
    pending: m.info.pending,
  };
}

async function queueConsumer(js, creds) {
  return retryingUnavailable(() => js.consumers.get(creds.stream, creds.consumer));
}

async function consumerState(consumer) {
  const info = await retryingUnavailable(() => consumer.info());
  return { num_pending: info.num_pending, num_ack_pending: info.num_ack_pending };
}

/** The messages of one pull (`fetch`); a pull refused with 503 yields nothing and is sent again. */
async function fetchAll(consumer, max, expires) {
  return retryingUnavailable(async () => {
    const got = [];
    for await (const m of await consumer.fetch({ max_messages: max, expires })) got.push(m);
    return got;
  });
}

async function nextOne(consumer, expires) {
  return retryingUnavailable(() => consumer.next({ expires }));
}

/** `ackAck` (an ack the broker confirms: true), or null when asked not to ack. */
async function settle(m, ack) {
  return ack ? retryingUnavailable(() => m.ackAck({ timeout: API_TIMEOUT })) : null;
}

const scenarios = {
  async publish({ creds, messages }) {
    const { nc } = await connectAs(creds);
    try {
      const js = jetstream(nc, { timeout: API_TIMEOUT });
      const acks = [];
      for (const { data, msg_id: msgID, headers } of messages) {
        const options = {};
        if (msgID !== undefined) options.msgID = msgID;
        if (headers) {
          options.headers = natsHeaders();
          for (const [key, value] of Object.entries(headers)) options.headers.set(key, value);
        }
        const ack = await retryingUnavailable(() => js.publish(creds.subject, data, options));
        acks.push({ stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate });
      }
      return { acks };
    } finally {
      await nc.close();
    }
  },

  async fetch({ creds, max = 10, expires_ms = 2000, ack = true }) {
    const { nc } = await connectAs(creds);
    try {
      const js = jetstream(nc, { timeout: API_TIMEOUT });
      const consumer = await queueConsumer(js, creds);
      const before = await consumerState(consumer);
      const received = [];
      for (const m of await fetchAll(consumer, max, expires_ms)) {
        received.push({ ...messageJson(m), acked: await settle(m, ack) });
      }
      return { before, messages: received, after: await consumerState(consumer) };
    } finally {
      await nc.close();
    }
  },

  async next({ creds, expires_ms = 2000, ack = true }) {
    const { nc } = await connectAs(creds);
    try {
      const js = jetstream(nc, { timeout: API_TIMEOUT });
      const consumer = await queueConsumer(js, creds);
      const m = await nextOne(consumer, expires_ms);
      const message = m === null ? null : { ...messageJson(m), acked: await settle(m, ack) };
      return { message, after: await consumerState(consumer) };
    } finally {
      await nc.close();
    }
  },

  async redelivery({ creds, visibility_timeout_seconds: visibility }) {
    const { nc } = await connectAs(creds);
    try {
      const js = jetstream(nc, { timeout: API_TIMEOUT });
      const consumer = await queueConsumer(js, creds);
      const first = await nextOne(consumer, 2000);
      if (first === null) throw new Error("nothing to receive");
      const leasedAt = performance.now();
      // leased: hidden from every receiver until the visibility timeout runs out
      const whileLeased = await nextOne(consumer, 1000);
      const stateWhileLeased = await consumerState(consumer);
      // not acked: wait past the visibility timeout and fetch again
      await sleep(Math.max(0, visibility * 1000 + 500 - (performance.now() - leasedAt)));
      const again = await fetchAll(consumer, 1, 3000);
      const elapsed = performance.now() - leasedAt;
      const second = again.length ? { ...messageJson(again[0]), acked: await settle(again[0], true) } : null;
      return {
        first: messageJson(first),
        while_leased: whileLeased === null ? null : messageJson(whileLeased),
        state_while_leased: stateWhileLeased,
        second,
        elapsed_ms: Math.round(elapsed),
        after: await consumerState(consumer),
      };
    } finally {
      await nc.close();
    }
  },

  async "wrong-password"({ creds }) {
    const started = performance.now();
    try {
      const { nc } = await connectAs({ ...creds, password: `${creds.password}x` });
      await nc.close();
      return { refused: false };
    } catch (err) {
      return { refused: true, error: describe(err), elapsed_ms: Math.round(performance.now() - started) };
    }
  },

  async "no-inbox-prefix"({ creds }) {
    // what an app that forgets `inboxPrefix` sees: the reply inbox `_INBOX.…` is refused
    const { nc, serverErrors } = await connectAs(creds, { inboxPrefix: undefined });
    try {
      const js = jetstream(nc, { timeout: REFUSAL_TIMEOUT });
      try {
        const ack = await js.publish(creds.subject, "without an inbox prefix", { retries: 0 });
        return { refused: false, seq: ack.seq };
      } catch (err) {
        await nc.flush();
        return { refused: true, error: describe(err), server_errors: serverErrors };
      }
    } finally {
      await nc.close();
    }
  },

  async "other-queue"({ creds, other }) {
    const { nc, serverErrors } = await connectAs(creds);
    const attempts = {};
    const attempt = async (name, what) => {
      try {
        const result = await what();
        attempts[name] = { refused: false, result: result ?? null };
      } catch (err) {
        attempts[name] = { refused: true, error: describe(err) };
      }
    };
    try {
      const js = jetstream(nc, { timeout: REFUSAL_TIMEOUT });
      const jsm = await jetstreamManager(nc, { timeout: REFUSAL_TIMEOUT, checkAPI: false });
      await attempt("consumers.get", async () => {
        const consumer = await js.consumers.get(other.stream, other.consumer);
        return (await consumer.next({ expires: 1000 }))?.string() ?? "got the consumer";
      });
      await attempt("consumers.info", async () => (await jsm.consumers.info(other.stream, other.consumer)).name);
      await attempt("streams.info", async () => (await jsm.streams.info(other.stream)).config.name);
      await attempt("pull", async () => {
        const reply = await nc.request(`$JS.API.CONSUMER.MSG.NEXT.${other.stream}.${other.consumer}`,
          JSON.stringify({ batch: 1, no_wait: true }), { timeout: REFUSAL_TIMEOUT });
        return reply.string() || `status ${reply.headers?.code}`;
      });
      await attempt("publish", async () => (await js.publish(other.subject, "from another queue")).seq);
      await attempt("subscribe", async () => {
        const sub = nc.subscribe(`${other.inbox_prefix}.>`);
        const closed = await Promise.race([sub.closed, sleep(REFUSAL_TIMEOUT).then(() => "open")]);
        if (closed instanceof Error) throw closed;
        sub.unsubscribe();
        return closed ?? "closed";
      });
      await nc.flush();
      return { attempts, server_errors: serverErrors };
    } finally {
      await nc.close();
    }
  },
};

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

const name = process.argv[2];
if (!(name in scenarios)) {
  process.stderr.write(`usage: node client.mjs {${Object.keys(scenarios).join("|")}} < input.json\n`);
  process.exit(2);
}
try {
  const result = await scenarios[name](await readStdin());
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (err) {
  process.stderr.write(`${name} failed: ${JSON.stringify(describe(err))}\n${err?.stack ?? ""}\n`);
  process.exit(1);
}
