// The dashboard's code, served apart from the page so that its Content-Security-Policy
// allows no inline script (dashboard/endpoints.py).
"use strict";
const API = "/api/v1/admin";
const KEY = "relay.dashboard.key";
const $ = (id) => document.getElementById(id);
let timer = null;
let dlqReadAt = 0;
let oldest = {};  // lane -> age in seconds of its oldest pending transaction

function key() { return sessionStorage.getItem(KEY); }

async function call(path, options = {}) {
  const response = await fetch(API + path, {
    ...options,
    headers: { "X-API-Key": key(), "Content-Type": "application/json", ...(options.headers || {}) },
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.detail || body.error || ("HTTP " + response.status));
    error.status = response.status;
    throw error;
  }
  return body;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "–" : String(text);
  if (className) td.className = className;
  return td;
}

function pill(text) {
  const td = document.createElement("td");
  const span = document.createElement("span");
  span.className = "pill " + text;
  span.textContent = text;
  td.appendChild(span);
  return td;
}

function row(cells, attrs = {}) {
  const tr = document.createElement("tr");
  for (const [name, value] of Object.entries(attrs)) tr.setAttribute(name, value);
  cells.forEach((c) => tr.appendChild(c));
  return tr;
}

function fill(id, rows) { $(id).replaceChildren(...rows); }

function ago(iso) {
  if (!iso) return "–";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 60 ? Math.round(s) + " s ago" : s < 3600 ? Math.round(s / 60) + " min ago"
    : Math.round(s / 3600) + " h ago";
}

function seconds(s) {
  if (s === null || s === undefined) return "none";
  return s < 120 ? s.toFixed(1) + " s" : (s / 60).toFixed(1) + " min";
}

async function switchLane(lane, state) {
  const reason = state === "running" ? null : "from the dashboard";
  try {
    await call("/queues/" + encodeURIComponent(lane),
               { method: "PATCH", body: JSON.stringify({ state, reason }) });
    await refresh();
  } catch (error) { $("problem").textContent = error.message; }
}

function laneButtons(lane, state) {
  const td = document.createElement("td");
  td.className = "actions";
  const actions = state === "running" ? [["paused", "Pause"], ["draining", "Drain"]]
    : [["running", "Resume"]];
  for (const [target, label] of actions) {
    const button = document.createElement("button");
    button.textContent = label;
    button.dataset.lane = lane;
    button.dataset.action = target;
    button.addEventListener("click", () => switchLane(lane, target));
    td.appendChild(button);
    td.appendChild(document.createTextNode(" "));
  }
  return td;
}

function renderQueues(view) {
  // depths: "queue" for the normal lane, the lane's name for the others
  const lanes = view.lanes.filter((lane) => (lane.lane === "normal" ? "queue" : lane.lane) in view.depths);
  fill("lanes", lanes.map((lane) => {
    const depth = view.depths[lane.lane === "normal" ? "queue" : lane.lane];
    const known = typeof depth === "object";
    return row([
      cell(lane.lane), pill(lane.state),
      cell(known ? depth.visible : "?", "num"),
      cell(known ? depth.inFlight : "?", "num"), cell(known ? depth.delayed : "?", "num"),
      cell(seconds(oldest[lane.lane]), "num oldest"),
      laneButtons(lane.lane, lane.state),
    ], { "data-lane": lane.lane, "data-state": lane.state });
  }));
  const live = view.consumers.filter((c) => c.state !== "stopped" && c.seenSecondsAgo < 60);
  $("inflight-total").textContent = live.reduce((sum, c) => sum + c.inFlight, 0);
  // one report per consumer and lane: count consumers once
  const processes = new Set(live.map((c) => c.consumer));
  const circuits = new Set(live.map((c) => c.circuit));
  $("circuit").textContent = live.length === 0 ? "no consumer"
    : circuits.has("open") ? "open" : circuits.has("half_open") ? "half_open" : "closed";
  $("circuit").className = "big pill " + $("circuit").textContent;
  $("consumer-count").textContent = processes.size;
  fill("consumers", view.consumers.map((c) => row([
    cell(c.consumer), cell(c.lane), pill(c.state), cell(c.inFlight, "num"),
    cell(c.received, "num"), pill(c.circuit), cell(Math.round(c.seenSecondsAgo) + " s", "num"),
  ])));
}

function eth(wei) {
  if (wei === null || wei === undefined) return "–";
  return (Number(BigInt(wei) / 10n ** 14n) / 1e4).toFixed(4);
}

async function switchRelayer(relayer, state) {
  const reason = state === "running" ? null : "from the dashboard";
  try {
    await call("/relayers/" + encodeURIComponent(relayer),
               { method: "PATCH", body: JSON.stringify({ state, reason }) });
    await refresh();
  } catch (error) { $("problem").textContent = error.message; }
}

function relayerButton(relayer, paused) {
  const td = document.createElement("td");
  td.className = "actions";
  const button = document.createElement("button");
  button.textContent = paused ? "Resume" : "Pause";
  button.dataset.action = paused ? "running" : "paused";
  button.addEventListener("click", () => switchRelayer(relayer, button.dataset.action));
  td.appendChild(button);
  return td;
}

function renderRelayers(view) {
  fill("relayers", view.relayers.map((r) => {
    const state = pill(r.state);
    state.title = [r.paused ? "paused by " + r.pausedBy : "", r.pauseReason, r.detail]
      .filter(Boolean).join("; ");
    return row([
      cell(r.relayer), state, cell(r.submitted, "num"), cell(eth(r.balanceWei), "num"),
      cell(ago(r.lastMinedAt), "num"), relayerButton(r.relayer, r.paused),
    ], { "data-relayer": r.relayer, "data-state": r.state });
  }));
  $("relayers-note").textContent = "jammed: not mined for " + view.jamAfterS + " s; low: under "
    + eth(view.minBalanceWei) + " ETH. Paused takes no new work.";
}

function renderDlq(views) {
  $("dlq-depth").textContent = views.reduce((sum, v) => sum + v.depth, 0);
  const messages = views.flatMap((v) => v.messages);
  const newest = [...messages].sort((a, b) =>
    (b.deadLetteredAt || "").localeCompare(a.deadLetteredAt || "")).slice(0, 5);
  fill("dlq", newest.map((m) => row([
    cell(m.transactionId), cell(m.kind || "redrive policy"), cell(m.reason),
    cell(ago(m.deadLetteredAt)),
  ])));
}

function renderActivity(view) {
  oldest = view.oldestPendingAgeS;
  for (const tr of $("lanes").querySelectorAll("tr")) {
    tr.querySelector("td.oldest").textContent = seconds(oldest[tr.dataset.lane]);
  }
  $("window").textContent = view.minutes.length;
  const accepted = view.minutes.reduce((s, m) => s + m.accepted, 0);
  const finished = view.minutes.reduce((s, m) => s + m.finished, 0);
  $("accepted-total").textContent = accepted;
  $("finished-total").textContent = finished;
  const top = Math.max(1, ...view.minutes.map((m) => Math.max(m.accepted, m.finished)));
  const width = 600 / view.minutes.length;
  const bars = [];
  view.minutes.forEach((m, i) => {
    const x = i * width;
    for (const [value, offset, colour] of [[m.accepted, 0.1, "#2f5fb3"], [m.finished, 0.5, "#1a7f37"]]) {
      const h = (value / top) * 100;
      bars.push(`<rect x="${x + width * offset}" y="${105 - h}" width="${width * 0.38}" ` +
                `height="${h}" fill="${colour}"><title>${m.minute}: ${value}</title></rect>`);
    }
  });
  bars.push(`<text x="0" y="118">${view.minutes[0].minute.slice(11, 16)}</text>`);
  bars.push(`<text x="570" y="118">${view.minutes[view.minutes.length - 1].minute.slice(11, 16)}</text>`);
  $("chart").innerHTML = bars.join("");
  const unlimited = view.clientsWithoutLimits || [];
  $("unlimited-section").hidden = unlimited.length === 0;
  fill("unlimited", unlimited.map((c) => row([
    cell(c.name), cell(c.id), cell(ago(c.grantedAt)), cell(c.grantedBy),
  ], { "data-client": c.name })));
  fill("transactions", view.transactions.map((t) => row([
    cell(t.transactionId), cell(t.client), cell(t.type), pill(t.status),
    cell(t.attempts, "num"), cell(ago(t.createdAt)), cell(ago(t.updatedAt)), cell(t.error),
  ], { "data-transaction": t.transactionId, "data-status": t.status })));
}

async function refresh() {
  const queues = call("/queues").then(renderQueues);
  const reads = [queues, call("/activity").then(renderActivity),
                 call("/relayers").then(renderRelayers)];
  // Reading the DLQ hides its messages for a moment: not more often than every 30 s.
  if (Date.now() - dlqReadAt > 30000) {
    dlqReadAt = Date.now();
    reads.push(queues.then(() => {
      const lanes = [...$("lanes").querySelectorAll("tr")].map((tr) => tr.dataset.lane);
      return Promise.all(lanes.map((lane) =>
        call("/dlq?limit=10&lane=" + encodeURIComponent(lane))));
    }).then(renderDlq));
  }
  const results = await Promise.allSettled(reads);
  const failed = results.find((r) => r.status === "rejected");
  if (failed && (failed.reason.status === 401 || failed.reason.status === 403)) {
    sessionStorage.removeItem(KEY);
    show();
    $("problem").textContent = failed.reason.message;
    return;
  }
  $("problem").textContent = failed ? failed.reason.message : "";
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  document.body.dataset.loaded = "true";
}

function show() {
  const signedIn = Boolean(key());
  $("login").hidden = signedIn;
  $("board").hidden = !signedIn;
  $("logout").hidden = !signedIn;
  clearInterval(timer);
  if (signedIn) {
    dlqReadAt = 0;
    refresh();
    timer = setInterval(refresh, 5000);
  }
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("key").value.trim());
  $("key").value = "";
  show();
});
$("logout").addEventListener("click", () => { sessionStorage.removeItem(KEY); show(); });
show();
