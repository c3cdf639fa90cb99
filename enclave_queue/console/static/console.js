// Enclave Queues console: what happens on a page after it loads. Plain JavaScript; the one
// library is uPlot for the Metrics tab's charts, vendored beside this file (static/VENDORED.md). Every call goes to the HTTP API (/v1/...) with the session cookie and the
// session's CSRF token in X-CSRF-Token: the API wants it on requests that change something and
// on reads that return secrets or message bodies (credentials, peek, dead letters, export).
"use strict";

const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

class Problem extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.title)) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(method, path, body) {
  const options = { method, credentials: "same-origin", headers: { Accept: "application/json", "X-CSRF-Token": csrfToken() } };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  if (response.status === 401) {
    location.assign("/sign-in?next=" + encodeURIComponent(location.pathname + location.search));
    throw new Problem(401, { detail: "The session has ended; sign in again." });
  }
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new Problem(response.status, data);
  return data;
}

// -- small DOM helpers ------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return isNaN(date) ? iso : date.toLocaleString();
}

function age(seconds) {
  if (seconds === null || seconds === undefined || seconds === "") return "–";
  const s = Math.round(Number(seconds));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

function bodyText(message) {
  if (message.body === null || message.body === undefined) return `(binary, base64) ${message.body_base64 || ""}`;
  return message.body;
}

// The words a form uses for a field: its input's label ("Retention", "Delay"), not the API's name
// for it (retention_hours, delay_seconds); the field's name if it has no label here.
function labelFor(form, field) {
  const slot = form.querySelector(`[data-error-for="${field}"]`);
  const input = slot && document.getElementById(slot.id.replace(/-error$/, ""));
  const label = input && input.labels && input.labels[0];
  return label ? label.textContent.trim() : field;
}

// A sentence of the API's with the fields of this form named by their labels: a field that
// begins a clause ("max must be …; wait must be …"), and an API name anywhere (delay_seconds).
function inWords(form, text) {
  let said = String(text || "");
  for (const slot of form.querySelectorAll("[data-error-for]")) {
    const field = slot.dataset.errorFor;
    const where = field.includes("_") ? `\\b${field}\\b` : `(?<=^|; )${field}\\b`;
    said = said.replace(new RegExp(where, "g"), labelFor(form, field));
  }
  return said;
}

// Field errors of a JSON problem, shown beside their fields in the form's words; the rest in `fallback`.
function showProblem(form, problem, fallback) {
  for (const p of form.querySelectorAll("[data-error-for]")) { p.hidden = true; p.textContent = ""; }
  for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  if (!problem) return;
  let placed = false;
  for (const error of (problem.body && problem.body.errors) || []) {
    const name = String(error.field).split(".")[0];
    const slot = form.querySelector(`[data-error-for="${name}"]`);
    if (!slot) continue;
    slot.textContent = `${labelFor(form, name)} ${inWords(form, error.message)}`;
    slot.hidden = false;
    document.getElementById(slot.id.replace(/-error$/, ""))?.setAttribute("aria-invalid", "true");
    placed = true;
  }
  if (!placed && fallback) fallback(inWords(form, problem.message));
}

// A number field's text as a JSON number when it is a plain decimal that a number holds as
// typed; else the text, for the API to refuse with the field's rule, quoting what was typed.
// (Number() also reads "0x10", "1e3", "Infinity" and "" — and JSON writes Infinity as null.)
const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)$/;
function numberOf(text) {
  const trimmed = String(text).trim();
  const number = Number(trimmed);
  return DECIMAL.test(trimmed) && Number.isFinite(number) && (!Number.isInteger(number) || Number.isSafeInteger(number))
    ? number : trimmed;
}

function busy(form, on) {
  for (const button of form.querySelectorAll("button")) button.disabled = on;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = el("textarea", { class: "sr-only" }, text);
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}

// -- queues table: live counts --------------------------------------------------------------

function liveQueues(table) {
  const url = table.dataset.overview;
  const project = table.dataset.project;
  const note = document.querySelector("[data-refreshed]");
  const cells = { waiting: "Waiting", in_flight: "In flight", delayed: "Delayed", dead: "Dead letters" };
  async function refresh() {
    try {
      const { queues } = await api("GET", url);
      const body = table.tBodies[0];
      body.replaceChildren(...queues.map((row) => {
        const d = row.depth;
        return el("tr", { "data-queue": row.name },
          el("th", { scope: "row" }, el("a", { href: `/projects/${project}/queues/${row.name}/settings` }, row.name)),
          el("td", { class: "state-cell" }, el("span", { class: `state state-${row.state.toLowerCase()}`, "data-col": "state", title: row.message }, row.state)),
          Object.entries(cells).map(([key, label]) => el("td", { class: "num", "data-col": key, "data-label": label },
            d && d[key] !== null ? d[key] : "–")),
          el("td", { class: "num", "data-col": "oldest_age_seconds", "data-label": "Oldest" }, age(d ? d.oldest_age_seconds : null)));
      }));
      if (note) note.textContent = `Counts refreshed at ${new Date().toLocaleTimeString()}; every 3 seconds.`;
    } catch (problem) {
      if (note) note.textContent = `Could not refresh: ${problem.message}`;
    }
  }
  setInterval(refresh, 3000);
}

// -- a queue's status until it is Ready (the --wait of the console) ----------------------------

function watchStatus(line) {
  const state = line.querySelector("[data-state]");
  const message = line.querySelector("[data-state-message]");
  const conditions = document.querySelector("[data-conditions]");
  const generation = document.querySelector("[data-generation]");
  function show(status) {
    state.textContent = status.state;
    state.className = `state state-${status.state.toLowerCase()}`;
    message.textContent = status.message;
    if (conditions) {  // the Settings tab's table follows too, not only the line above it
      conditions.replaceChildren(...status.conditions.map((c) => el("tr", {},
        el("th", { scope: "row" }, c.type), el("td", {}, typeof c.status === "boolean" ? (c.status ? "True" : "False") : c.status),
        el("td", {}, c.reason),
        el("td", { class: "message" }, c.message || ""),
        el("td", { class: "muted" }, el("time", { datetime: c.last_transition_time }, c.last_transition_time)))));
    }
    if (generation) {
      generation.textContent = `Generation ${status.generation}, applied ${status.observed_generation}; ` +
        `dead-lettered ${status.dead_lettered}, discarded ${status.discarded}.`;
    }
  }
  async function poll() {
    for (;;) {
      try {
        const status = await api("GET", `${line.dataset.status}?wait_seconds=10`);
        show(status);
        const settled = ["Ready", "Errored"].includes(status.state) && status.observed_generation >= status.generation;
        if (settled) return;
      } catch (problem) {
        message.textContent = problem.message;
        if (problem.status === 404) return;
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
  }
  poll();
}

// -- Messages tab ---------------------------------------------------------------------------

// "Name: value" lines as a headers object; a Problem naming the field for a line that is not one.
function parseHeaders(text) {
  const headers = {};
  const lines = String(text).split("\n").map((line) => line.trim()).filter((line) => line);
  for (const [i, line] of lines.entries()) {
    const colon = line.indexOf(":");
    if (colon < 1) {
      throw new Problem(422, { errors: [{ field: "headers", message: `line ${i + 1} is not “Name: value” (got ${JSON.stringify(line)})` }] });
    }
    const name = line.slice(0, colon).trim();
    if (Object.keys(headers).some((known) => known.toLowerCase() === name.toLowerCase())) {
      throw new Problem(422, { errors: [{ field: "headers", message: `line ${i + 1} repeats the header ${JSON.stringify(name)} (a message carries each once)` }] });
    }
    headers[name] = line.slice(colon + 1).trim();
  }
  return headers;
}

function messagesTab(section) {
  const base = section.dataset.messages;
  const maxReceives = Number(section.dataset.maxReceives || 0);
  const deadLetterQueue = section.dataset.deadLetterQueue;
  const received = section.querySelector("[data-received]");
  const clearHandled = section.querySelector("[data-clear-handled]");
  const sendForm = section.querySelector('[data-action="send"]');
  const receiveForm = section.querySelector('[data-action="receive"]');
  const peekForm = section.querySelector('[data-action="peek"]');
  const sendResult = section.querySelector('[data-result="send"]');
  const receiveResult = section.querySelector('[data-result="receive"]');

  sendForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const fields = sendForm.elements;
    sendResult.textContent = "";  // an earlier send's result is not this one's
    showProblem(sendForm, null);
    const request = {};
    try {
      request.body = fields.body.value;
      if (fields.format.value === "json") {
        try {
          JSON.parse(fields.body.value);  // checked here for a quick answer, and by the server
        } catch (error) {
          throw new Problem(422, { errors: [{ field: "body", message: `is not valid JSON (${error.message})` }] });
        }
        // sent as typed: parsed and written again, numbers past 2^53 and repeated keys would change
        request.content_type = "application/json";
      }
      if (fields.delay_seconds.value.trim()) request.delay_seconds = numberOf(fields.delay_seconds.value);
      // trimmed: a stray space would make a key of its own, and every later send with it a duplicate
      if (fields.dedupe_key.value.trim() !== "") request.dedupe_key = fields.dedupe_key.value.trim();
      const headers = parseHeaders(fields.headers.value);
      if (Object.keys(headers).length) request.headers = headers;
    } catch (problem) {
      showProblem(sendForm, problem);
      return;
    }
    busy(sendForm, true);
    try {
      const sent = await api("POST", base, request);
      sendResult.textContent = sent.duplicate ? `Not added: a duplicate of sequence ${sent.sequence} (its dedupe key was sent already).`
        : sent.delayed_until ? `Sent: sequence ${sent.sequence}, delayed until ${when(sent.delayed_until)}.`
          : `Sent: sequence ${sent.sequence}.`;
    } catch (problem) {
      // a body over the queue's size (413, no field named): said beside Body
      const tooLarge = problem.status === 413 && !(problem.body.errors || []).length;
      showProblem(sendForm, tooLarge ? new Problem(413, { errors: [{ field: "body", message: `is too large: ${problem.message}` }] })
        : problem, (text) => { sendResult.textContent = text; });
    } finally {
      busy(sendForm, false);
    }
  });

  receiveForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    showProblem(receiveForm, null);
    busy(receiveForm, true);
    receiveResult.textContent = "Waiting for messages…";
    try {
      const { messages } = await api("POST", `${base}/receive`, {
        max: numberOf(receiveForm.elements.max.value), wait: numberOf(receiveForm.elements.wait.value),
      });
      receiveResult.textContent = messages.length ? `Received ${messages.length}.` : "Nothing to receive.";
      for (const message of messages) received.prepend(receivedItem(message));
    } catch (problem) {
      receiveResult.textContent = "";
      showProblem(receiveForm, problem, (text) => { receiveResult.textContent = text; });
    } finally {
      busy(receiveForm, false);
    }
  });

  // cards that are done with (deleted, handed back, or visible again) can be cleared away
  function handled() { return [...received.children].filter((item) => item.dataset.settled || item.classList.contains("expired")); }
  function offerClear() { clearHandled.hidden = handled().length === 0; }
  clearHandled.addEventListener("click", () => {
    for (const item of handled()) item.remove();
    offerClear();
    receiveForm.querySelector("button").focus();
  });

  // What a hand-back does: on its last allowed receive the message does not come back here, it
  // goes to the dead-letter queue (or is discarded without one).
  function handBackText(message) {
    if (!(maxReceives > 0 && message.receive_count >= maxReceives)) return "Handed back: visible again now.";
    const tries = `its last allowed receive (${message.receive_count} of ${maxReceives})`;
    return deadLetterQueue ? `Handed back on ${tries}: it goes to the dead-letter queue ${deadLetterQueue}, not back to this queue.`
      : `Handed back on ${tries}: it is discarded (this queue has no dead-letter queue).`;
  }

  function receivedItem(message) {
    const until = new Date(message.visible_again_at).getTime();
    const countdown = el("span", { class: "countdown", "data-countdown": true });
    const outcome = el("span", { class: "muted", role: "status", "aria-live": "polite", "data-outcome": true });
    const buttons = [
      el("button", { type: "button", class: "primary", "data-delete": true, onclick: () => settle("DELETE", "", "Deleted.") }, "Delete"),
      el("button", { type: "button", "data-nack": true, onclick: () => settle("POST", "/nack", handBackText(message)) }, "Hand back"),
    ];
    const headers = Object.entries(message.headers || {});
    const item = el("li", { "data-sequence": message.sequence, "data-receive-count": message.receive_count },
      el("div", { class: "meta" },
        el("span", {}, "Sequence ", el("strong", {}, message.sequence)),
        el("span", {}, "Receive count ", el("strong", { "data-count": true }, message.receive_count)),
        el("span", {}, "Sent ", when(message.sent_at)),
        el("span", {}, countdown)),
      headers.length ? el("dl", { class: "headers", "data-headers": true },
        headers.flatMap(([key, value]) => [el("dt", {}, key), el("dd", {}, value)])) : null,
      el("pre", { "data-body": true }, bodyText(message)),
      el("div", { class: "actions" }, buttons, outcome));
    let done = false;
    const tick = () => {
      if (done) return;
      const left = Math.max(0, Math.ceil((until - Date.now()) / 1000));
      if (left > 0) {
        countdown.textContent = `Hidden for ${left} s more`;
      } else {
        countdown.textContent = "Visible again: its visibility timeout ran out";
        item.classList.add("expired");
        done = true;
        clearInterval(timer);
        offerClear();
      }
    };
    const timer = setInterval(tick, 250);
    tick();
    async function settle(method, suffix, text) {
      for (const button of buttons) button.disabled = true;
      try {
        await api(method, `${base}/${encodeURIComponent(message.receipt)}${suffix}`);
        done = true;
        clearInterval(timer);
        countdown.textContent = "";
        outcome.textContent = text;
        item.dataset.settled = method === "DELETE" ? "deleted" : "handed-back";
        offerClear();
      } catch (problem) {
        outcome.textContent = problem.message;
        for (const button of buttons) button.disabled = false;
      }
    }
    return item;
  }

  peekForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const table = section.querySelector("[data-peek]");
    const empty = section.querySelector("[data-peek-empty]");
    const problemText = section.querySelector("[data-peek-problem]");
    problemText.hidden = true;
    busy(peekForm, true);
    try {
      const { messages } = await api("GET", `${base}?limit=10`);
      table.tBodies[0].replaceChildren(...messages.map((m) => el("tr", {},
        el("td", {}, m.sequence), el("td", {}, when(m.sent_at)), el("td", {}, el("pre", {}, bodyText(m))))));
      table.hidden = messages.length === 0;
      empty.hidden = messages.length !== 0;
    } catch (problem) {  // the queue deleted since the page was drawn, the broker away: say so
      table.hidden = true;
      empty.hidden = true;
      problemText.textContent = problem.message;
      problemText.hidden = false;
    } finally {
      busy(peekForm, false);
    }
  });
}

// -- Dead letters tab ---------------------------------------------------------------------------

function deadLettersTab(section) {
  const base = section.dataset.deadLetters;  // the queue the letters are on (a source queue's: its DLQ)
  const source = section.dataset.source || "";  // on a source queue: only its own letters there
  const table = section.querySelector("[data-letters]");
  const empty = section.querySelector("[data-letters-empty]");
  const counts = section.querySelector("[data-letter-counts]");
  const notice = section.querySelector("[data-dl-notice]");
  const problemBox = section.querySelector("[data-dl-problem]");
  const form = section.querySelector('[data-action="redrive"]');
  const progress = section.querySelector("[data-redrive-progress]");
  const bar = progress.querySelector("progress");
  const progressText = section.querySelector("[data-redrive-text]");
  const whyList = section.querySelector("[data-redrive-errors]");
  const where = base.split("/").pop();

  function say(text) {
    problemBox.textContent = text || "";
    problemBox.hidden = !text;
  }
  function tell(text) {  // what the last action did: it stays until the next one
    notice.textContent = text || "";
    notice.hidden = !text;
  }

  const rows = new Map();  // sequence -> its row, kept across refreshes (a pressed Discard stays armed)
  let seen = null;  // the counts (as JSON) read just before the list on screen was fetched

  // The list, bodies and all (up to 100 letters of up to 1 MiB), after the counts: read first,
  // a letter that comes between the two reads is counted at the next refresh, which fetches the
  // list again, so none is missed.
  async function load(tally = null) {
    try {
      tally = tally || await api("GET", section.dataset.counts);
      const query = `limit=100${source ? `&source=${encodeURIComponent(source)}` : ""}`;
      const { dead_letters: letters } = await api("GET", `${base}/dead-letters?${query}`);
      seen = JSON.stringify(tally);
      const shown = letters.map((letter) => rows.get(letter.sequence) || row(letter));
      rows.clear();
      shown.forEach((tr, i) => rows.set(letters[i].sequence, tr));
      const body = table.tBodies[0];
      if (shown.length !== body.rows.length || shown.some((tr, i) => body.rows[i] !== tr)) body.replaceChildren(...shown);
      table.hidden = letters.length === 0;
      empty.hidden = letters.length !== 0;
      counts.textContent = countsText(tally);
      counts.hidden = !counts.textContent;
      say("");
    } catch (problem) {
      seen = null;  // fetched again at the next refresh
      say(problem.message);
    }
  }

  // New dead letters appear by themselves, but the refresh reads only the counts (a few hundred
  // bytes), and the list only when they changed: it used to download every body every 3 s (50 MB
  // in 15 s with 40 letters of 250 KB). If one letter goes and another from the same source comes
  // between two refreshes, the counts stay the same: the list follows at the next change (and at
  // once after this tab's own retry, discard and redrive, which load it). A hidden tab asks for
  // nothing; it refreshes when shown again.
  let refreshing = false;
  async function refresh() {
    if (refreshing || document.visibilityState === "hidden") return;
    refreshing = true;  // a slow list is not asked for again meanwhile
    try {
      const tally = await api("GET", section.dataset.counts);
      if (JSON.stringify(tally) !== seen) await load(tally);
      else say("");
    } catch (problem) {
      say(problem.message);
    } finally {
      refreshing = false;
    }
  }

  function countsText(tally) {
    const bySource = tally.by_source;
    if (source) {
      if (!bySource) return `${where} holds ${tally.total} messages (too many to count them by source).`;
      const mine = bySource[source] || 0;
      if (!mine) return "";  // "No dead letters of …" says it
      return `${mine} dead ${mine === 1 ? "letter" : "letters"} of ${source} on ${where}` +
        (tally.total > mine ? ` (which holds ${tally.total} in all)` : "") + ".";
    }
    if (!bySource) return `${tally.total} messages (too many to count them by source).`;
    if (!tally.total) return "";
    const parts = Object.entries(bySource).map(([queue, n]) => `${n} from ${queue}`);
    const other = tally.total - Object.values(bySource).reduce((a, b) => a + b, 0);
    if (parts.length && other > 0) parts.push(`${other} sent here directly`);
    return `${tally.total} ${tally.total === 1 ? "message" : "messages"}${parts.length ? `: ${parts.join(", ")}` : ""}.`;
  }

  function row(letter) {
    const from = letter.source_queue ? `${letter.source_queue}${letter.source_sequence ? ` #${letter.source_sequence}` : ""}` : "–";
    const status = el("span", { class: "muted", role: "status", "aria-live": "polite" });
    const retry = el("button", { type: "button", "data-retry": true, onclick: () => act("POST", "/retry") }, "Retry");
    const discard = el("button", { type: "button", "data-discard": true, onclick: () => confirmDiscard() }, "Discard");
    function confirmDiscard() {
      if (discard.dataset.armed) return act("DELETE", "");
      discard.dataset.armed = "1";
      discard.textContent = "Confirm discard";
      discard.classList.add("danger");
    }
    async function act(method, suffix) {
      retry.disabled = discard.disabled = true;
      try {
        const done = await api(method, `${base}/dead-letters/${letter.sequence}${suffix}`);
        status.textContent = method === "DELETE" ? "Discarded." : "Sent back.";
        tell(method === "DELETE" ? `Dead letter ${letter.sequence} discarded.`
          : `Dead letter ${letter.sequence} is back on ${done.queue} as message ${done.sequence}; its tries start again.`);
        tr.dataset.done = "1";
        rows.delete(letter.sequence);
        setTimeout(load, 800);
      } catch (problem) {
        status.textContent = problem.message;
        retry.disabled = discard.disabled = false;
      }
    }
    const tr = el("tr", { "data-sequence": letter.sequence },
      el("td", {}, letter.sequence), el("td", {}, from), el("td", { class: "num" }, letter.receive_count ?? "–"),
      el("td", { class: "message", "data-last-error": true }, letter.last_error || "–"),
      el("td", {}, when(letter.dead_lettered_at)), el("td", {}, el("pre", {}, bodyText(letter))),
      el("td", {}, el("div", { class: "actions" }, retry, discard, status)));
    return tr;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showProblem(form, null);
    say("");
    tell("");
    progress.hidden = true;  // the last run's result is not this one's, whether it starts or is refused
    show(null);
    const request = {};
    const filter = form.elements.filter_error.value.trim();
    if (filter) request.filter_error = filter;
    if (form.elements.to.value) request.to = form.elements.to.value;
    if (source) request.source = source;
    const max = form.elements.max.value.trim();
    if (max) request.max = numberOf(max);
    busy(form, true);
    try {
      let task = await api("POST", `${base}/redrives`, request);
      progress.hidden = false;
      while (task.state === "running") {
        show(task);
        await new Promise((resolve) => setTimeout(resolve, 300));
        task = await api("GET", `${base}/redrives/${task.id}`);
      }
      show(task);
      await load();
    } catch (problem) {
      showProblem(form, problem, say);
    } finally {
      busy(form, false);
    }
  });

  // A task's progress, and why letters were not moved: the task's errors (the API keeps the
  // first ten), each as text, never HTML: they quote what the letters carry (the queue one names).
  function show(task) {
    if (!task) {
      progressText.textContent = "";
      delete progressText.dataset.state;
      whyList.replaceChildren();
      whyList.hidden = true;
      return;
    }
    const total = Math.max(task.total, task.moved + task.failed, 1);
    bar.max = total;
    bar.value = task.moved + task.failed;
    const verb = task.state === "running" ? "Moving" : task.state === "done" ? "Done" : task.state;
    progressText.textContent = `${verb}: ${task.moved} moved, ${task.failed} failed, ${task.remaining} remaining.`;
    progressText.dataset.state = task.state;
    const errors = task.errors || [];
    whyList.replaceChildren(...errors.map((error) => el("li", {}, error)));
    if (task.failed > errors.length) {
      whyList.append(el("li", { class: "muted" }, `The task keeps the reasons of the first ${errors.length}.`));
    }
    whyList.hidden = errors.length === 0;
  }

  load();
  setInterval(refresh, 3000);
  document.addEventListener("visibilitychange", refresh);
}

// -- Credentials tab ------------------------------------------------------------------------

function credentialsTab(section) {
  const password = section.querySelector("[data-password]");
  const reveal = section.querySelector("[data-reveal]");
  async function show() {
    try {
      const creds = await api("GET", section.dataset.credentials);
      password.textContent = creds.password;
      reveal.hidden = true;
      section.querySelector('[data-copy="cred-password"]').hidden = false;
    } catch (problem) {
      password.textContent = problem.message;
    }
  }
  reveal.addEventListener("click", show);
  if (section.querySelector("[data-rotated]")) show();  // just rotated: the new password is what is wanted
  for (const button of section.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", async () => {
      const ok = await copyText(document.getElementById(button.dataset.copy).textContent);
      const label = button.textContent;
      button.textContent = ok ? "Copied" : "Copy failed";
      setTimeout(() => { button.textContent = label; }, 1500);
    });
  }
}

// -- Metrics tab: depth and rates over time, drawn by uPlot (static/VENDORED.md) -----------------------

const DEPTH_SERIES = [["waiting", "Waiting", "#2f5bea"], ["in_flight", "In flight", "#e07b00"],
  ["delayed", "Delayed", "#7b5ad6"], ["dead", "Dead letters", "#c62f3b"]];
const RATE_SERIES = [["sent", "Sent", "#1c7c4d"], ["received", "Received", "#2f5bea"], ["removed", "Deleted", "#c62f3b"]];
// whole messages: a count axis never has a tick at 2.5 messages
const COUNT_STEPS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5,
  1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8];

// Per second between two samples of a count since creation (null where it cannot be said: the
// first sample, a sample from before the counts were kept, a count that restarted).
function perSecond(points, key) {
  return points.map((p, i) => {
    const before = points[i - 1];
    if (!before || p[key] === null || p[key] === undefined || before[key] === null || before[key] === undefined) return null;
    const seconds = (new Date(p.t) - new Date(before.t)) / 1000;
    return seconds > 0 && p[key] >= before[key] ? (p[key] - before[key]) / seconds : null;
  });
}

function drawChart(box, series, xs, columns, range, counts) {
  box.uplot?.destroy();
  const ticks = [];
  const options = {
    width: Math.max(box.clientWidth, 240), height: 220,
    scales: { x: { time: true, range: () => range }, y: { range: (u, min, max) => [0, Math.max(counts ? 4 : 1, max || 0)] } },
    series: [{}, ...series.map(([, label, color]) => ({ label, stroke: color, width: 2, points: { show: xs.length <= 120 } }))],
    axes: [{}, {
      incrs: counts ? COUNT_STEPS : undefined, size: 56,
      values: (u, splits) => {
        ticks.splice(0, ticks.length, ...splits);
        return splits.map((v) => (counts ? String(v) : v.toFixed(v < 10 ? 1 : 0)));
      },
    }],
  };
  // what is drawn, for the tests that read it (and anyone who cannot see the canvas), once it is
  options.hooks = { draw: [(u) => {
    box.dataset.points = String(xs.length);
    box.dataset.xMin = String(u.scales.x.min);
    box.dataset.xMax = String(u.scales.x.max);
    box.dataset.yMax = String(u.scales.y.max);
    box.dataset.yTicks = ticks.join(",");
  }] };
  const chart = new uPlot(options, [xs, ...columns], box);
  box.uplot = chart;
  return chart;
}

function metricsTab(section) {
  const note = section.querySelector("[data-chart-note]");
  const hoursSelect = section.querySelector("[data-hours]");
  const boxes = { depth: section.querySelector('[data-chart="depth"]'), rates: section.querySelector('[data-chart="rates"]') };
  let timer = null;
  let last = null;
  function draw() {
    if (!last) return;
    const { points, hours } = last;
    const end = Date.now() / 1000;
    const range = [end - hours * 3600, end];  // the period asked for, whatever the samples cover
    const xs = points.map((p) => new Date(p.t).getTime() / 1000);
    drawChart(boxes.depth, DEPTH_SERIES, xs, DEPTH_SERIES.map(([key]) => points.map((p) => p[key])), range, true);
    drawChart(boxes.rates, RATE_SERIES, xs, RATE_SERIES.map(([key]) => perSecond(points, key)), range, false);
    for (const box of Object.values(boxes)) box.dataset.hours = String(hours);
  }
  async function load() {
    const hours = Number(hoursSelect.value);
    clearTimeout(timer);
    try {
      const { points, sample_seconds: every } = await api("GET", `${section.dataset.metrics}?hours=${hours}`);
      if (Number(hoursSelect.value) !== hours) return;  // the period changed meanwhile: its own load draws
      last = { points, hours };
      draw();
      note.textContent = points.length
        ? `${points.length} ${points.length === 1 ? "sample" : "samples"}, one every ${every} s, in the last ${hoursSelect.selectedOptions[0].text}; the last at ${when(points[points.length - 1].t)}.`
        : `No samples yet: the first comes within ${every} s.`;
      timer = setTimeout(load, Math.max(every, 2) * 1000);
    } catch (problem) {
      note.textContent = problem.message;
    }
  }
  hoursSelect.addEventListener("change", load);
  let resizing = null;
  window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(draw, 150); });
  load();
}

// -- start ------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  document.querySelector('[aria-invalid="true"]')?.focus();  // after a refused form: its first bad field
  const table = document.querySelector("[data-overview]");
  if (table) liveQueues(table);
  const status = document.querySelector('[data-status][data-watch="1"]');
  if (status) watchStatus(status);
  const sections = {
    "[data-messages]": messagesTab, "[data-dead-letters]": deadLettersTab,
    "[data-credentials]": credentialsTab, "[data-metrics]": metricsTab,
  };
  for (const [selector, start] of Object.entries(sections)) {
    const section = document.querySelector(selector);
    if (section) start(section);
  }
});
