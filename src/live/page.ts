// The page served at GET /live (docs/live.md §5): plain HTML and JavaScript, no build step, no
// library. Log in like the API (POST /auth), list the tenant's devices with their status
// (GET /device?withStatus), choose one: its attributes update as `attrs` messages arrive on
// the WebSocket (token as the subprotocol `bearer.<token>`), and an SVG chart drawn by hand
// shows a numeric attribute over the last 5 minutes. Kept as a string so that the compiled
// service (dist/ only) serves it as it is.
export const LIVE_PAGE = String.raw`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>device-registry live</title>
<link rel="icon" href="data:,">
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; }
  #devices li { cursor: pointer; padding: 2px 0; }
  #devices li.chosen { font-weight: bold; }
  .online { color: #187a2f; } .offline { color: #999; }
  table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
  #main { display: flex; gap: 2em; align-items: flex-start; }
  #chart { border: 1px solid #ccc; background: #fafafa; }
  .error { color: #b00; }
</style>
</head>
<body>
<h1>device-registry live</h1>
<form id="login">
  <label>User <input id="username" autocomplete="username" required></label>
  <label>Password <input id="passwd" type="password" autocomplete="current-password" required></label>
  <button type="submit">Log in</button>
  <span id="login-error" class="error"></span>
</form>
<div id="app" hidden>
  <p>Tenant <b id="tenant"></b> · stream <span id="conn">connecting</span></p>
  <div id="main">
    <div><h2>Devices</h2><ul id="devices"></ul></div>
    <div id="detail" hidden>
      <h2 id="device-title"></h2>
      <table><thead><tr><th>attribute</th><th>value</th><th>ts</th></tr></thead><tbody id="attrs"></tbody></table>
      <p><label>Chart <select id="series"></select></label> (last 5 minutes)</p>
      <svg id="chart" width="480" height="200" viewBox="0 0 480 200"></svg>
    </div>
  </div>
</div>
<script>
"use strict";
const WINDOW_MS = 5 * 60 * 1000;
const MAX_DRAWN = 600;
// Values and points by attribute label in objects without a prototype: a label may be any
// name, "constructor" and "__proto__" too (found by an audit: in plain objects such a label
// threw or was never shown).
const byLabel = () => Object.create(null);
const state = { token: null, expires: Infinity, devices: new Map(), chosen: null, values: byLabel(), points: byLabel(), ws: null };
// Reconnecting after a stream that closed (the service restarted, a proxy or the network cut
// it): 1 s, then twice as long each time, at most 30 s, until a socket is subscribed again.
const RECONNECT_FIRST_MS = 1000;
const RECONNECT_MAX_MS = 30000;
let reconnectMs = RECONNECT_FIRST_MS;
let reconnectTimer = null;
const $ = (id) => document.getElementById(id);
// The API's root, whether the page was opened as /live or /live/ (or under a proxy's prefix).
const BASE = location.pathname.replace(/\/live\/?$/, "/");

async function api(path) {
  const res = await fetch(BASE + path, { headers: { Authorization: "Bearer " + state.token } });
  if (!res.ok) throw Object.assign(new Error(path + ": " + res.status), { status: res.status });
  return res.json();
}

$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("login-error").textContent = "";
  const res = await fetch(BASE + "auth", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ username: $("username").value, passwd: $("passwd").value }) });
  const body = await res.json().catch(() => ({}));
  if (!res.ok || !body.jwt) { $("login-error").textContent = body.message || ("login failed: " + res.status); return; }
  state.token = body.jwt;
  // Logged in again after the token expired: the stream starts afresh.
  clearTimeout(reconnectTimer);
  const previous = state.ws;
  state.ws = null;
  if (previous) previous.close();
  const claims = JSON.parse(atob(body.jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
  state.expires = typeof claims.exp === "number" ? claims.exp * 1000 : Infinity;
  $("tenant").textContent = claims.service;
  $("login").hidden = true;
  $("app").hidden = false;
  // The stream first, the list once it is subscribed: a status change is then either in the
  // list or a message (read the other way round, a device that came online in between was
  // listed offline for good).
  await connect();
  await loadDevices();
  if (state.chosen !== null) await readRecent(state.chosen); // logged in again: what came meanwhile
});

// Status messages that came while a list was being read, one map per read under way: applied
// over that list once read (its answer may be older than they are).
const reads = new Set();
let readsStarted = 0, shownRead = 0;

// Every device of the tenant, page after page: 1,000 a page, or the API's default page size
// where MAX_PAGE_SIZE is below 1,000 (a page_size above it is a 400).
async function loadDevices() {
  const read = ++readsStarted;
  const later = new Map();
  reads.add(later);
  try {
    await readDevices(read, later);
  } finally {
    reads.delete(later);
  }
}

async function readDevices(read, later) {
  const all = [];
  let size = "&page_size=1000";
  for (let num = 1; ; ) {
    let page;
    try {
      page = await api("device?withStatus&sortBy=label" + size + "&page_num=" + num);
    } catch (err) {
      if (err.status === 400 && size && num === 1) { size = ""; continue; }
      throw err;
    }
    all.push(...page.devices);
    if (!page.pagination || !page.pagination.has_next) break;
    num = page.pagination.next_page;
  }
  if (read < shownRead) return; // a later read is shown already
  shownRead = read;
  state.devices.clear();
  for (const d of all) {
    const m = later.get(d.id);
    if (m) { d.status = m.status; d.last_seen = m.last_seen; }
    state.devices.set(d.id, d);
  }
  renderDevices();
}

function renderDevices() {
  const ul = $("devices");
  ul.textContent = "";
  for (const d of state.devices.values()) {
    const li = document.createElement("li");
    li.dataset.id = d.id;
    li.className = d.id === state.chosen ? "chosen" : "";
    li.innerHTML = "<span></span> <span class=\"status\"></span>";
    li.firstChild.textContent = d.label + " (" + d.id + ")";
    const s = li.querySelector(".status");
    s.textContent = d.status;
    s.classList.add(d.status);
    li.addEventListener("click", () => choose(d.id));
    ul.appendChild(li);
  }
}

async function choose(id) {
  state.chosen = id;
  state.values = byLabel();
  state.points = byLabel();
  renderDevices();
  const d = state.devices.get(id);
  $("device-title").textContent = d.label + " (" + id + ")";
  $("detail").hidden = false;
  await readRecent(id);
}

// The chosen device's last minutes from history, merged with the values already shown (each
// point once): on choosing it, and after a reconnect (what was committed meanwhile).
async function readRecent(id) {
  const since = new Date(Date.now() - WINDOW_MS).toISOString();
  try {
    const history = await api("history/device/" + encodeURIComponent(id) + "/history?dateFrom=" + since);
    if (state.chosen !== id) return; // another device was chosen meanwhile
    for (const [label, records] of Object.entries(history)) {
      for (const r of [...records].reverse()) add(label, r.value, r.ts);
    }
  } catch (err) { /* no history yet */ }
  renderAttrs();
  renderChart();
}

// A value, live or from history (history may answer after live messages came): the newest one
// is shown, and the chart's points stay in time order, each once.
function add(label, value, ts) {
  const t = Date.parse(ts);
  const current = state.values[label];
  if (!current || Date.parse(current.ts) <= t) state.values[label] = { value, ts };
  if (typeof value !== "number") return;
  const points = (state.points[label] ||= []);
  let i = points.length;
  while (i > 0 && points[i - 1].t > t) i--;
  if (i > 0 && points[i - 1].t === t && points[i - 1].v === value) return;
  points.splice(i, 0, { t, v: value });
}

function renderAttrs() {
  const body = $("attrs");
  body.textContent = "";
  for (const [label, { value, ts }] of Object.entries(state.values)) {
    const tr = document.createElement("tr");
    tr.dataset.attr = label;
    for (const text of [label, JSON.stringify(value), ts]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  const select = $("series");
  const numeric = Object.keys(state.points);
  const current = select.value;
  select.textContent = "";
  for (const label of numeric) select.add(new Option(label, label));
  if (numeric.includes(current)) select.value = current;
}
$("series").addEventListener("change", () => renderChart());

function renderChart() {
  const svg = $("chart");
  const w = 480, h = 200, pad = 30;
  const now = Date.now();
  // Points older than the window are dropped for good: a tab left open keeps minutes, not days.
  for (const points of Object.values(state.points)) {
    let old = 0;
    while (old < points.length && points[old].t < now - WINDOW_MS) old++;
    if (old) points.splice(0, old);
  }
  const all = state.points[$("series").value] || [];
  // A loop, not Math.min(...): a busy device's minutes hold more points than a call takes arguments.
  let min = Infinity, max = -Infinity;
  for (const p of all) { if (p.v < min) min = p.v; if (p.v > max) max = p.v; }
  if (!all.length) { min = 0; max = 1; }
  // At most MAX_DRAWN points drawn (evenly chosen, the newest always): the chart is 480 pixels wide.
  const step = Math.max(1, Math.ceil((all.length - 1) / (MAX_DRAWN - 1)));
  const pts = all.filter((p, i) => i % step === 0 || i === all.length - 1);
  if (min === max) { min -= 1; max += 1; }
  const x = (t) => pad + ((t - (now - WINDOW_MS)) / WINDOW_MS) * (w - 2 * pad);
  const y = (v) => h - pad - ((v - min) / (max - min)) * (h - 2 * pad);
  const path = pts.map((p, i) => (i ? "L" : "M") + x(p.t).toFixed(1) + " " + y(p.v).toFixed(1)).join(" ");
  svg.innerHTML =
    '<line x1="' + pad + '" y1="' + (h - pad) + '" x2="' + (w - pad) + '" y2="' + (h - pad) + '" stroke="#888"/>' +
    '<line x1="' + pad + '" y1="' + pad + '" x2="' + pad + '" y2="' + (h - pad) + '" stroke="#888"/>' +
    '<text x="2" y="' + (pad + 4) + '" font-size="10">' + max + '</text>' +
    '<text x="2" y="' + (h - pad) + '" font-size="10">' + min + '</text>' +
    '<path id="series-line" d="' + path + '" fill="none" stroke="#1f5fbf" stroke-width="2"/>' +
    pts.map((p) => '<circle class="point" cx="' + x(p.t).toFixed(1) + '" cy="' + y(p.v).toFixed(1) + '" r="2.5" fill="#1f5fbf"/>').join("");
  svg.dataset.points = String(all.length);
}
setInterval(renderChart, 5000);

// Opens the stream; resolves once it is subscribed (or closed: the list is read all the same).
// A stream that closes is opened again (RECONNECT_FIRST_MS, doubling up to RECONNECT_MAX_MS),
// and once subscribed again the list and the chosen device's recent history are read afresh:
// the stream does not replay what was committed while it was closed (docs/live.md §2). An
// expired token (close code 4001, or found expired before reconnecting) asks to log in again.
function connect() {
  const url = location.origin.replace(/^http/, "ws") + BASE + "stream";
  const ws = new WebSocket(url, ["device-registry.live.v1", "bearer." + state.token]);
  state.ws = ws;
  let subscribed;
  const ready = new Promise((resolve) => { subscribed = resolve; });
  ws.onopen = () => { $("conn").textContent = "open"; };
  ws.onclose = (e) => {
    subscribed();
    if (state.ws !== ws) return;
    const why = "closed (" + e.code + (e.reason ? " " + e.reason : "") + ")";
    if (e.code === 4001 || Date.now() >= state.expires) return logInAgain(why);
    $("conn").textContent = why + ", reconnecting in " + Math.round(reconnectMs / 1000) + " s";
    reconnectTimer = setTimeout(reconnect, reconnectMs);
    reconnectMs = Math.min(reconnectMs * 2, RECONNECT_MAX_MS);
  };
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (m.type === "subscribed") {
      reconnectMs = RECONNECT_FIRST_MS;
      subscribed();
    } else if (m.type === "attrs" && m.device_id === state.chosen) {
      for (const [label, value] of Object.entries(m.attrs)) add(label, value, m.ts);
      renderAttrs();
      renderChart();
    } else if (m.type === "status") {
      for (const later of reads) later.set(m.device_id, m);
      const d = state.devices.get(m.device_id);
      if (d) { d.status = m.status; d.last_seen = m.last_seen; renderDevices(); }
    } else if (m.type === "device" || m.type === "tenant") {
      loadDevices();
    } else if (m.type === "lagged") {
      // Messages were lost: status messages among them (the list), and the chosen device's
      // values (its recent history; before, found by an audit, the value shown stayed the one
      // before the lag, and the chart kept a gap).
      loadDevices();
      if (state.chosen !== null) readRecent(state.chosen);
    }
  };
  return ready;
}

async function reconnect() {
  if (Date.now() >= state.expires) return logInAgain("closed");
  const ws = state.ws;
  await connect();
  if (state.ws !== ws && state.ws.readyState === WebSocket.OPEN) {
    await loadDevices().catch(() => {});
    if (state.chosen !== null) {
      await readRecent(state.chosen);
    }
  }
}

// The token expired: the stream and the API refuse it; the login form again, the list kept.
function logInAgain(why) {
  clearTimeout(reconnectTimer);
  const ws = state.ws;
  state.ws = null;
  if (ws && ws.readyState !== WebSocket.CLOSED) ws.close();
  $("conn").textContent = why;
  $("login-error").textContent = "session expired: log in again";
  $("login").hidden = false;
}
</script>
</body>
</html>
`;
