// Enclave Queues console: what happens on a page after it loads. Plain JavaScript, no
// dependencies. Every call goes to the HTTP API (/v1/...) with the session cookie and the
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

// Field errors of a JSON problem, shown beside their fields; the rest in `fallback`.
function showProblem(form, problem, fallback) {
  for (const p of form.querySelectorAll("[data-error-for]")) { p.hidden = true; p.textContent = ""; }
  for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  if (!problem) return;
  let placed = false;
  for (const error of (problem.body && problem.body.errors) || []) {
    const name = String(error.field).split(".")[0];
    const slot = form.querySelector(`[data-error-for="${name}"]`);
    if (!slot) continue;
    slot.textContent = `${error.field} ${error.message}`;
    slot.hidden = false;
    document.getElementById(slot.id.replace(/-error$/, ""))?.setAttribute("aria-invalid", "true");
    placed = true;
  }
  if (!placed && fallback) fallback(problem.message);
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
  const cells = ["waiting", "in_flight", "delayed", "dead"];
  async function refresh() {
    try {
      const { queues } = await api("GET", url);
      const body = table.tBodies[0];
      body.replaceChildren(...queues.map((row) => {
        const d = row.depth;
        return el("tr", { "data-queue": row.name },
          el("th", { scope: "row" }, el("a", { href: `/projects/${project}/queues/${row.name}/settings` }, row.name)),
          el("td", {}, el("span", { class: `state state-${row.state.toLowerCase()}`, "data-col": "state", title: row.message }, row.state)),
          cells.map((key) => el("td", { class: "num", "data-col": key }, d && d[key] !== null ? d[key] : "–")),
          el("td", { class: "num", "data-col": "oldest_age_seconds" }, age(d ? d.oldest_age_seconds : null)));
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
  async function poll() {
    for (;;) {
      try {
        const status = await api("GET", `${line.dataset.status}?wait_seconds=10`);
        state.textContent = status.state;
        state.className = `state state-${status.state.toLowerCase()}`;
        message.textContent = status.message;
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

function messagesTab(section) {
  const base = section.dataset.messages;
  const received = section.querySelector("[data-received]");
  const sendForm = section.querySelector('[data-action="send"]');
  const receiveForm = section.querySelector('[data-action="receive"]');
  const peekForm = section.querySelector('[data-action="peek"]');
  const sendResult = section.querySelector('[data-result="send"]');
  const receiveResult = section.querySelector('[data-result="receive"]');

  sendForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = sendForm.elements.body.value;
    const format = sendForm.elements.format.value;
    let body = text;
    showProblem(sendForm, null);
    if (format === "json") {
      try {
        body = JSON.parse(text);
      } catch (error) {
        showProblem(sendForm, new Problem(422, { errors: [{ field: "body", message: `is not valid JSON (${error.message})` }] }));
        return;
      }
    }
    busy(sendForm, true);
    try {
      const sent = await api("POST", base, { body });
      sendResult.textContent = `Sent: sequence ${sent.sequence}${sent.duplicate ? " (a duplicate)" : ""}.`;
    } catch (problem) {
      showProblem(sendForm, problem, (text) => { sendResult.textContent = text; });
    } finally {
      busy(sendForm, false);
    }
  });

  receiveForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    showProblem(receiveForm, null);
    const number = (value) => (value.trim() !== "" && !isNaN(Number(value)) ? Number(value) : value);
    busy(receiveForm, true);
    receiveResult.textContent = "Waiting for messages…";
    try {
      const { messages } = await api("POST", `${base}/receive`, {
        max: number(receiveForm.elements.max.value), wait: number(receiveForm.elements.wait.value),
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

  function receivedItem(message) {
    const until = new Date(message.visible_again_at).getTime();
    const countdown = el("span", { class: "countdown", "data-countdown": true });
    const outcome = el("span", { class: "muted", role: "status", "aria-live": "polite", "data-outcome": true });
    const buttons = [
      el("button", { type: "button", class: "primary", "data-delete": true, onclick: () => settle("DELETE", "", "Deleted.") }, "Delete"),
      el("button", { type: "button", "data-nack": true, onclick: () => settle("POST", "/nack", "Handed back: visible again now.") }, "Hand back"),
    ];
    const item = el("li", { "data-sequence": message.sequence, "data-receive-count": message.receive_count },
      el("div", { class: "meta" },
        el("span", {}, "Sequence ", el("strong", {}, message.sequence)),
        el("span", {}, "Receive count ", el("strong", { "data-count": true }, message.receive_count)),
        el("span", {}, "Sent ", when(message.sent_at)),
        el("span", {}, countdown)),
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
    const { messages } = await api("GET", `${base}?limit=10`);
    table.tBodies[0].replaceChildren(...messages.map((m) => el("tr", {},
      el("td", {}, m.sequence), el("td", {}, when(m.sent_at)), el("td", {}, el("pre", {}, bodyText(m))))));
    table.hidden = messages.length === 0;
    empty.hidden = messages.length !== 0;
  });
}

// -- Dead letters tab ---------------------------------------------------------------------------

function deadLettersTab(section) {
  const base = section.dataset.deadLetters;
  const table = section.querySelector("[data-letters]");
  const empty = section.querySelector("[data-letters-empty]");
  const problemBox = section.querySelector("[data-dl-problem]");
  const form = section.querySelector('[data-action="redrive"]');
  const progress = section.querySelector("[data-redrive-progress]");
  const bar = progress.querySelector("progress");
  const progressText = section.querySelector("[data-redrive-text]");

  function say(text) {
    problemBox.textContent = text || "";
    problemBox.hidden = !text;
  }

  const rows = new Map();  // sequence -> its row, kept across refreshes (a pressed Discard stays armed)

  async function load() {
    try {
      const { dead_letters: letters } = await api("GET", `${base}/dead-letters?limit=100`);
      const shown = letters.map((letter) => rows.get(letter.sequence) || row(letter));
      rows.clear();
      shown.forEach((tr, i) => rows.set(letters[i].sequence, tr));
      const body = table.tBodies[0];
      if (shown.length !== body.rows.length || shown.some((tr, i) => body.rows[i] !== tr)) body.replaceChildren(...shown);
      table.hidden = letters.length === 0;
      empty.hidden = letters.length !== 0;
    } catch (problem) {
      say(problem.message);
    }
  }

  function row(letter) {
    const from = letter.source_queue ? `${letter.source_queue}${letter.source_sequence ? ` #${letter.source_sequence}` : ""}` : "–";
    const status = el("span", { class: "muted", role: "status", "aria-live": "polite" });
    const retry = el("button", { type: "button", "data-retry": true, onclick: () => act("POST", "/retry", "Sent back.") }, "Retry");
    const discard = el("button", { type: "button", "data-discard": true, onclick: () => confirmDiscard() }, "Discard");
    function confirmDiscard() {
      if (discard.dataset.armed) return act("DELETE", "", "Discarded.");
      discard.dataset.armed = "1";
      discard.textContent = "Confirm discard";
      discard.classList.add("danger");
    }
    async function act(method, suffix, text) {
      retry.disabled = discard.disabled = true;
      try {
        await api(method, `${base}/dead-letters/${letter.sequence}${suffix}`);
        status.textContent = text;
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
    const request = {};
    const filter = form.elements.filter_error.value.trim();
    if (filter) request.filter_error = filter;
    if (form.elements.to.value) request.to = form.elements.to.value;
    const max = form.elements.max.value.trim();
    if (max) request.max = isNaN(Number(max)) ? max : Number(max);
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

  function show(task) {
    const total = Math.max(task.total, task.moved + task.failed, 1);
    bar.max = total;
    bar.value = task.moved + task.failed;
    const verb = task.state === "running" ? "Moving" : task.state === "done" ? "Done" : task.state;
    progressText.textContent = `${verb}: ${task.moved} moved, ${task.failed} failed, ${task.remaining} remaining.`;
    progressText.dataset.state = task.state;
  }

  load();
  setInterval(load, 3000);  // new dead letters appear by themselves
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

// -- Metrics tab: depth over time as an SVG chart -------------------------------------------------

const SERIES = ["waiting", "in_flight", "delayed", "dead"];
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceCeiling(value) {
  if (value <= 4) return 4;
  const step = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 5, 10]) if (m * step >= value) return m * step;
  return value;
}

function drawChart(box, points, hours, every) {
  const width = 860, height = 280, left = 48, right = 12, top = 12, bottom = 28;
  // the period asked for, or less when the samples cover less of it (a young queue)
  const end = Date.now();
  const first = points.length ? new Date(points[0].t).getTime() : end;
  const shortest = Math.max(60, 20 * every) * 1000;
  const start = Math.max(end - hours * 3600 * 1000, Math.min(first - every * 1000, end - shortest));
  const max = niceCeiling(Math.max(0, ...points.flatMap((p) => SERIES.map((k) => p[k] || 0))));
  const x = (t) => left + ((t - start) / (end - start)) * (width - left - right);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, "data-points": points.length });
  for (let i = 0; i <= 4; i++) {
    const value = (max * i) / 4;
    chart.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(value), y2: y(value) }));
    chart.append(svg("text", { x: left - 6, y: y(value) + 4, "text-anchor": "end" }, String(Math.round(value))));
  }
  chart.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: y(0), y2: y(0) }));
  for (let i = 0; i <= 4; i++) {
    const t = start + ((end - start) * i) / 4;
    const span = end - start;
    const label = span > 48 * 3600 * 1000 ? new Date(t).toLocaleDateString()
      : new Date(t).toLocaleTimeString([], span < 3600 * 1000 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
        : { hour: "2-digit", minute: "2-digit" });
    chart.append(svg("text", { x: x(t), y: height - 8, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, label));
  }
  for (const key of SERIES) {
    const shown = points.filter((p) => p[key] !== null && p[key] !== undefined);
    const coords = shown.map((p) => [x(new Date(p.t).getTime()).toFixed(1), y(p[key]).toFixed(1)]);
    if (!coords.length) continue;
    chart.append(svg("polyline", { class: `series-${key}`, points: coords.map((c) => c.join(",")).join(" "), "data-series": key }));
    if (coords.length <= 120) {  // dots where the samples are, so a few samples still show
      for (const [cx, cy] of coords) chart.append(svg("circle", { class: `series-${key} dot`, cx, cy, r: 2.5 }));
    }
  }
  box.replaceChildren(chart);
}

function metricsTab(section) {
  const box = section.querySelector("[data-chart]");
  const note = section.querySelector("[data-chart-note]");
  const hoursSelect = section.querySelector("[data-hours]");
  let timer = null;
  async function load() {
    const hours = Number(hoursSelect.value);
    try {
      const { points, sample_seconds: every } = await api("GET", `${section.dataset.metrics}?hours=${hours}`);
      drawChart(box, points, hours, every);
      note.textContent = points.length
        ? `${points.length} ${points.length === 1 ? "sample" : "samples"}, one every ${every} s; the last at ${when(points[points.length - 1].t)}.`
        : `No samples yet: the first comes within ${every} s.`;
      clearTimeout(timer);
      timer = setTimeout(load, Math.max(every, 2) * 1000);
    } catch (problem) {
      note.textContent = problem.message;
    }
  }
  hoursSelect.addEventListener("change", load);
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
