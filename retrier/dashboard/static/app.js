// The retrier's dashboard. No framework, no CDN: plain DOM, every text set with textContent.
"use strict";

const REFRESH_MS = 3000;
const PAGE_ROWS = 50;
const LAG_CHART_MINUTES = 181; // the lag chart's width in minutes: the 3 hours (and the minute now) the auditor feed gives
const $ = (id) => document.getElementById(id);

const state = {
  dest: null,
  overview: null,
  filter: {},
  cursors: [null], // the cursor of each page shown so far; the last one is the current page
  nextCursor: null,
  token: sessionStorage.getItem("hifi-token") || "",
  operator: localStorage.getItem("hifi-operator") || "",
  pendingReplay: null,
};

// --- talking to the retrier --------------------------------------------------------------------

async function api(path, options = {}) {
  const headers = { Accept: "application/json" };
  if (state.token) headers["X-Hifi-Token"] = state.token;
  if (state.operator) headers["X-Hifi-Operator"] = state.operator;
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers, credentials: "same-origin" });
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const why = body && body.error ? body.error : `HTTP ${response.status}`;
    const error = new Error(why);
    error.status = response.status;
    throw error;
  }
  return body;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  return q.toString();
}

function notice(text, isError = false) {
  const p = $("notice");
  p.hidden = !text;
  p.textContent = text || "";
  p.classList.toggle("error", isError);
}

// --- small builders ----------------------------------------------------------------------------

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "onclick") node.addEventListener("click", v); else node.setAttribute(k, v);
  }
  return node;
}

function link(text, onclick, href = "#letters") {
  return el("a", text, { href, onclick: (e) => { if (onclick) { e.preventDefault(); onclick(); } } });
}

function row(cells, attrs = {}) {
  const tr = el("tr", null, attrs);
  for (const cell of cells) {
    if (cell instanceof Node) { const td = el("td"); td.appendChild(cell); tr.appendChild(td); }
    else if (cell && typeof cell === "object" && "node" in cell) { const td = el("td", null, cell.attrs || {}); td.appendChild(cell.node); tr.appendChild(td); }
    else if (cell && typeof cell === "object") tr.appendChild(el("td", cell.text, cell.attrs || {}));
    else tr.appendChild(el("td", cell));
  }
  return tr;
}

function fill(tbodyOwner, rows, empty) {
  const body = $(tbodyOwner).tBodies[0];
  body.replaceChildren(...rows);
  if (!rows.length && empty) body.appendChild(row([{ text: empty, attrs: { class: "muted", colspan: "9" } }]));
}

const num = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
const iso = (ms) => (ms ? new Date(ms).toISOString().replace(".000Z", "Z").replace("T", " ") : "-");
function age(s) {
  if (s === null || s === undefined) return "-";
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

// A bar per value in an SVG that fills its container (the container's CSS sets the height; the
// drawing stretches to it). `slots`: how many bars the width holds, and `at`: the slot of each
// value (default: one after the other), so one value is one narrow bar, not the whole width.
function bars(container, values, { height = 40, labels = [], onclick = null, line = null, classes = [], slots = 0, at = null } = {}) {
  const ns = "http://www.w3.org/2000/svg";
  const slotCount = Math.max(values.length, slots, 1);
  const slot = 10;
  const width = slotCount * slot;
  const max = Math.max(1, line || 0, ...values.map((v) => v || 0));
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("width", "100%");
  svg.setAttribute("height", "100%");
  values.forEach((v, i) => {
    const h = ((v || 0) / max) * (height - 2);
    const r = document.createElementNS(ns, "rect");
    r.setAttribute("x", (at ? at[i] : i) * slot + 1);
    r.setAttribute("width", slot - 2);
    r.setAttribute("y", height - h);
    r.setAttribute("height", h);
    r.setAttribute("fill", classes[i] === "bad" ? "#c62828" : classes[i] === "provisional" ? "#9fb0cf" : "#2457c5");
    const title = document.createElementNS(ns, "title");
    title.textContent = labels[i] || String(v);
    r.appendChild(title);
    if (onclick) { r.style.cursor = "pointer"; r.addEventListener("click", () => onclick(i)); }
    svg.appendChild(r);
  });
  if (line) {
    const y = height - (line / max) * (height - 2);
    const l = document.createElementNS(ns, "line");
    l.setAttribute("x1", 0); l.setAttribute("x2", width); l.setAttribute("y1", y); l.setAttribute("y2", y);
    l.setAttribute("stroke", "#c62828"); l.setAttribute("stroke-dasharray", "4 3"); l.setAttribute("stroke-width", "1");
    l.setAttribute("vector-effect", "non-scaling-stroke");
    svg.appendChild(l);
  }
  container.replaceChildren(svg);
}

// --- the overview ------------------------------------------------------------------------------

async function refreshOverview() {
  const overview = await api("/api/overview");
  state.overview = overview;
  const names = Object.keys(overview.destinations);
  const select = $("dest");
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((n) => el("option", n, { value: n })));
    const wanted = new URLSearchParams(location.search).get("dest");
    state.dest = names.includes(wanted) ? wanted : names[0];
    select.value = state.dest;
    fillReasons(overview.reasons);
    loadLetters(true);
  }
  $("updated").textContent = `updated ${iso(overview.now_ms).slice(11, 19)} UTC`;
  const mode = $("mode");
  if (!overview.can_act) { mode.textContent = "read-only: no dashboard token configured"; mode.className = "badge"; }
  else if (overview.has_token) { mode.textContent = "token accepted: actions enabled"; mode.className = "badge can-act"; }
  else { mode.textContent = "enter the token to act"; mode.className = "badge"; }
  for (const id of ["replay-matching", "l-replay"]) $(id).disabled = !(overview.can_act && overview.has_token);
  showRunbook(overview.runbook);
  const dest = overview.destinations[state.dest];
  if (!dest) return;
  showTiers(dest.tiers, overview.backlog_measured);
  showDlq(dest.dlq);
}

// Each panel's link to its alert's entry in the runbook (docs/alerts.md where the retrier's
// --runbook-url says it is served); no link without one.
function showRunbook(links) {
  for (const a of document.querySelectorAll("a.runbook")) {
    const href = links ? links[a.id.slice("runbook-".length)] : null;
    a.hidden = !href;
    if (href) a.href = href; else a.removeAttribute("href");
  }
}

// Where an event waits on its way around the retrier, in its order (`waiting_per_stage`).
const STAGES = { retry_in: "retry_in: handed off, not yet routed", retry_out: "retry_out: re-offered, not yet taken back" };
const stageName = (stage) => STAGES[stage] || `tier ${stage}: waiting out its delay`;
// JSON keys that read as integers (the tiers) come first in a JS object: put retry_in back first
const stageRank = (stage) => (stage === "retry_in" ? -1 : stage === "retry_out" ? Infinity : Number(stage));

function showTiers(t, measured) {
  const stages = Object.entries(t.waiting_per_stage || {}).sort((a, b) => stageRank(a[0]) - stageRank(b[0]));
  const rows = stages.map(([stage, n]) => row([stageName(stage), { node: link(num(n), null, `/status`), attrs: { class: "n" } }], { "data-stage": stage }));
  if (stages.length) rows.push(row(["in retry, all stages", { text: num(t.waiting_total), attrs: { class: "n", id: "waiting-total" } }], { class: "total" }));
  fill("tiers", rows, "nothing measured yet");
  $("oldest").textContent = age(t.oldest_waiting_age_s);
  $("next-due").textContent = t.next_due ? `${t.next_due.slice(11, 19)} UTC (in ${age(t.next_due_in_s)})` : "-";
  $("held").textContent = num(t.held_partitions);
  $("reoffer-rate").textContent = t.reoffered_per_s === undefined ? "-" :
    `${t.reoffered_per_s.toFixed(1)}/s over the last minute (${num(t.reoffered_since_start)} since start)`;
  $("expired").textContent = t.expired_last_minute === undefined ? "-" :
    `${num(t.expired_last_minute)} in the last minute (${num(t.expired_since_start)} since start)`;
  $("measured").textContent = measured ? measured.slice(11, 19) + " UTC" : "-";
  const recentMin = t.recent_failures_window_s ? Math.round(t.recent_failures_window_s / 60) : null;
  $("recent-window").textContent = recentMin ? `(last ${recentMin} min)` : "";
  fill("recent", (t.recent_failures || []).slice(0, 5).map((f) => row([age(f.age_s), f.at.slice(11, 19), f.attempt, f.status || "-", { text: f.error || "", attrs: { class: "err", title: f.error || "" } }])),
    recentMin ? `no hand-off in the last ${recentMin} min` : "no hand-off since the retrier started");
}

function showDlq(dlq) {
  $("dlq-size").textContent = num(dlq.waiting ?? dlq.size);
  $("dlq-size").onclick = (e) => { e.preventDefault(); setFilter({ replayed: "no" }); };
  $("dlq-replayed").textContent = num(dlq.replayed ?? 0);
  $("dlq-replayed").onclick = (e) => { e.preventDefault(); setFilter({ replayed: "yes" }); };
  $("index-state").textContent = dlq.ready ? "" : `indexing: ${num(dlq.indexed)} letters read so far`;
  const reasons = Object.entries(dlq.by_reason || {}).sort((a, b) => b[1] - a[1]);
  fill("reasons", reasons.map(([reason, n]) => row([reason, { node: link(num(n), () => setFilter({ reason, replayed: "no" })), attrs: { class: "n" } }])), "no dead letter waiting");
  const bucketMs = dlq.growth_bucket_s * 1000;
  const end = state.overview.now_ms - (state.overview.now_ms % bucketMs) + bucketMs;
  const starts = dlq.growth.map((_, i) => end - (dlq.growth.length - i) * bucketMs);
  bars($("growth"), dlq.growth, {
    labels: dlq.growth.map((n, i) => `${num(n)} letters from ${iso(starts[i]).slice(11, 16)}`),
    onclick: (i) => setFilter({ from: String(starts[i]), to: String(starts[i] + bucketMs) }),
  });
  fill("failures", dlq.failure_groups.map((g) => row([g.status || "-", { text: g.error || "", attrs: { class: "err", title: g.error || "" } }, { node: link(num(g.count), () => setFilter({ q: g.error || g.status })), attrs: { class: "n" } }])), "none in the last hour");
}

// --- loss and lag, from the auditor ------------------------------------------------------------

async function refreshAccounting() {
  if (!state.dest) return;
  const acc = await api(`/api/accounting?${query({ dest: state.dest })}`);
  showHealth(acc);
  const note = $("accounting-note");
  if (!acc.available) {
    note.textContent = `(${acc.why})`;
    fill("minutes", [], "no auditor data");
    $("availability").replaceChildren();
    $("lag-chart").replaceChildren();
    return;
  }
  const sla = acc.lag_sla_s;
  note.textContent = `(from the auditor; p95 end-to-end lag against the ${sla}s SLA; provisional minutes in italics)`;
  const a = acc.availability;
  // availability over the day's final minutes since the auditor counts; before it, no data
  const over = `over ${num(a.minutes)} final minute${a.minutes === 1 ? "" : "s"}`;
  const facts = [
    ["today", a.availability_pct !== null && a.availability_pct !== undefined ? `${a.availability_pct}% ${over}` : `- ${over}`],
    ["nines", a.nines ?? (a.all_up ? "all up" : "-")],
    ["up minutes", num(a.up_minutes)],
    ["down for loss", num(a.down_for_loss)],
    ["down for lag", num(a.down_for_lag)],
    ["pending", num(a.pending_minutes)], // begun and not final yet: minutes still to come are not counted
  ];
  if (a.not_counted_minutes) facts.push(["not counted (before the auditor)", num(a.not_counted_minutes)]);
  $("availability").replaceChildren(...facts.map(([k, v]) => { const s = el("span", `${k} `, { class: "muted" }); s.appendChild(el("b", v)); return s; }));
  const rows = acc.rows.slice().sort((x, y) => (x.minute < y.minute ? -1 : 1));
  const lagLimit = sla * 1000;
  // a time axis: the last LAG_CHART_MINUTES minutes up to now, a slot per minute
  const nowMinute = state.overview.now_ms - (state.overview.now_ms % 60000);
  const chartStart = Math.max(nowMinute, ...rows.map((r) => Date.parse(r.minute))) - (LAG_CHART_MINUTES - 1) * 60000;
  const charted = rows.filter((r) => Date.parse(r.minute) >= chartStart);
  bars($("lag-chart"), charted.map((r) => r.lag_p95_ms || 0), {
    height: 120, line: lagLimit, slots: LAG_CHART_MINUTES,
    at: charted.map((r) => (Date.parse(r.minute) - chartStart) / 60000),
    labels: charted.map((r) => `${r.minute.slice(11, 16)} p95 ${r.lag_p95_ms ?? "-"} ms, missing ${r.missing}`),
    classes: charted.map((r) => (!r.final ? "provisional" : r.up === false ? "bad" : "")),
  });
  const tables = (r) => `${state.overview.auditor}/tables?${query({ dest: state.dest, from: Date.parse(r.minute), to: Date.parse(r.minute) + 60000 })}`;
  const shown = rows.slice().reverse().slice(0, 60);
  fill("minutes", shown.map((r) => {
    const cls = [r.final ? "" : "provisional", r.up === false ? "down" : ""].join(" ");
    const n = (v, bad = false) => ({ node: link(num(v), null, tables(r)), attrs: { class: bad && v > 0 ? "n bad" : "n" } });
    const p95 = r.lag_p95_ms === null || r.lag_p95_ms === undefined ? "-" : `${num(r.lag_p95_ms)} ms`;
    return row([r.minute.slice(0, 16).replace("T", " "), n(r.entered), n(r.delivered), n(r.in_retry), n(r.dead_lettered), n(r.missing, true),
      { text: p95, attrs: { class: r.lag_p95_ms > lagLimit ? "n bad" : "n" } },
      minuteState(r)], { class: cls });
  }), "no minutes yet");
}

// A minute's state as the auditor's verdict reads with its counts now: a minute judged down for
// loss whose missing events turned up after it was final says "late", never "loss" beside 0 missing.
const LATE_TITLE = "judged down for loss, then its missing events turned up after the minute was final: late, not lost";
function minuteState(r) {
  if (!r.final) return "provisional";
  if (r.up !== false) return "up";
  if (r.down_reason === "late") return { text: "down (late)", attrs: { class: "warn", title: LATE_TITLE } };
  return `down (${r.down_reason || "loss"})`;
}

// --- the destination's health, from the auditor ------------------------------------------------

// The circuit breaker's line: shown only while the destination's breaker (or a tenant route's) is
// not closed, red while open; the auditor knows it from the connectors' breaker facts.
function showBreaker(b) {
  const line = $("health-breaker");
  line.hidden = $("breaker-label").hidden = !b;
  line.className = b && b.alarm ? "bad" : "";
  line.textContent = b ? b.text : "";
}

function showHealth(acc) {
  const h = acc.available ? acc.health : null;
  const share = $("failed-share");
  share.className = "";
  showBreaker(h ? h.breaker : null);
  if (!h) {
    for (const id of ["last-2xx", "failed-share", "health-requests", "health-batches", "health-bisection"]) $(id).textContent = "-";
    $("health-source").textContent = !state.overview.auditor
      ? "The last 2xx and the failed events come from the auditor, which reads the connector's audit facts: start the retrier with --auditor-url URL (or HIFI_AUDITOR_URL)."
      : acc.available ? "This auditor does not report the destination's health; upgrade it." : `No health: ${acc.why}.`;
    return;
  }
  const status = `${state.overview.auditor}/status`;
  const last = h.last_delivered_ms;
  $("last-2xx").textContent = last
    ? `${iso(last).slice(0, 19)} UTC (${age(Math.max(0, (state.overview.now_ms - last) / 1000))} ago)`
    : "none seen";
  if (h.failed_event_share === null || h.failed_event_share === undefined) share.textContent = "no event sent";
  else {
    share.replaceChildren(link(`${(h.failed_event_share * 100).toFixed(1)} %`, null, status));
    if (h.alarm) share.className = "bad"; // the retrier decides: more than 5 % of events failed
  }
  $("health-requests").replaceChildren(link(`${num(h.failed_events)} failed of ${num(h.events)}`, null, status));
  $("health-batches").replaceChildren(link(`${num(h.failed_batches)} of ${num(h.batches)}`, null, status));
  $("health-bisection").replaceChildren(link(num(h.bisection_requests), null, status));
  $("health-source").textContent = `From the auditor: what became of the batches the connector sent in the last ${Math.round(h.window_s / 60)} min. A batch the destination rejected is one failed batch, however many requests bisected it; its failed events are those it dead-lettered; hand-offs fail a batch and its events.`;
}

// --- browsing letters --------------------------------------------------------------------------

function fillReasons(reasons) {
  const select = $("f-reason");
  select.replaceChildren(el("option", "any", { value: "" }), ...reasons.map((r) => el("option", r, { value: r })), el("option", "unknown", { value: "unknown" }));
}

function readFilter() {
  return { reason: $("f-reason").value, from: $("f-from").value.trim(), to: $("f-to").value.trim(), q: $("f-q").value.trim(), replayed: $("f-replayed").value };
}

function setFilter(filter) {
  $("f-reason").value = filter.reason || "";
  $("f-from").value = filter.from || "";
  $("f-to").value = filter.to || "";
  $("f-q").value = filter.q || "";
  $("f-replayed").value = filter.replayed || "";
  state.filter = readFilter();
  loadLetters(true);
  $("letters").scrollIntoView({ behavior: "smooth" });
}

async function loadLetters(reset) {
  if (!state.dest) return;
  if (reset) { state.cursors = [null]; state.filter = readFilter(); }
  const cursor = state.cursors[state.cursors.length - 1];
  try {
    const page = await api(`/api/letters?${query({ dest: state.dest, ...state.filter, cursor, limit: PAGE_ROWS })}`);
    state.nextCursor = page.next;
    $("match-count").textContent = num(page.total);
    showLetters(page.rows);
    $("page-info").textContent = `page ${state.cursors.length}`;
    $("older").disabled = !page.next;
    $("newer").disabled = state.cursors.length <= 1;
    notice("");
  } catch (error) {
    if (error.status === 401) {
      fill("letter-list", [], "dead letters need the dashboard token here: enter it above");
      try {
        const counted = await api(`/api/letters/count?${query({ dest: state.dest, ...state.filter, q: "" })}`);
        $("match-count").textContent = num(counted.count);
      } catch (e) { $("match-count").textContent = "-"; }
    } else notice(`letters: ${error.message}`, true);
  }
}

function showLetters(rows) {
  fill("letter-list", rows.map((r) => row([
    r.dead_at.replace("T", " ").replace("+00:00", ""), r.reason, r.status || "-",
    { text: r.error, attrs: { class: "err" } }, { text: r.event_id, attrs: { class: "id" } }, { text: r.origin, attrs: { class: "id" } },
    r.replayed_ms ? `${iso(r.replayed_ms).slice(0, 16)} by ${r.replayed_by}` : "",
    link("open", () => openLetter(r.partition, r.offset)),
  ], { class: "clickable", "data-origin": r.origin, "data-event-id": r.event_id })), "no dead letter matches");
  for (const tr of $("letter-list").tBodies[0].rows) {
    tr.addEventListener("click", (e) => { if (e.target.tagName !== "A") tr.querySelector("a").click(); });
  }
}

async function find(key) {
  try {
    const found = await api(`/api/find?${query({ dest: state.dest, key })}`);
    showLetters(found.rows);
    $("match-count").textContent = num(found.rows.length);
    $("page-info").textContent = `found by ${key}`;
    $("older").disabled = true;
    $("newer").disabled = true;
  } catch (error) { notice(`find: ${error.message}`, true); }
}

async function openLetter(partition, offset) {
  try {
    const l = await api(`/api/letter?${query({ dest: state.dest, partition, offset })}`);
    $("l-where").textContent = `${state.dest}.dlq/${partition}/${offset}`;
    const facts = [["dead at", iso(l.dead_ms)], ["key", l.key ?? "(none)"], ["body", `${num(l.body_bytes)} bytes`],
      ["replayed", l.replayed_ms ? `${iso(l.replayed_ms)} by ${l.replayed_by}` : "no"]];
    $("l-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
    fill("l-history", l.history.map((h) => row([iso(h.at_ms), h.attempt ?? "-", h.status ?? "-", { text: h.error, attrs: { class: "err" } }])), "no history");
    fill("l-headers", l.headers.map(([k, v]) => row([{ text: k, attrs: { class: "id" } }, { text: v, attrs: { class: "err" } }])), "no headers");
    $("l-body").textContent = l.body;
    $("l-body-note").textContent = l.body_cut ? "(cut: only the start is shown)" : "";
    $("l-replay").onclick = () => { $("letter-dialog").close(); askReplay({ letter: { partition, offset } }, `letter ${partition}/${offset}`); };
    $("letter-dialog").showModal();
  } catch (error) { notice(`letter: ${error.message}`, true); }
}

// --- replaying ---------------------------------------------------------------------------------

async function askReplay(selection, words) {
  const again = $("again").checked;
  const body = { dest: state.dest, ...selection, again, dry_run: true };
  try {
    const dry = await api("/api/replays", { method: "POST", body: JSON.stringify(body) });
    state.pendingReplay = { ...body, dry_run: false };
    $("c-text").textContent = `Replay ${num(dry.count)} dead letters (${words}) of ${state.dest} into ${state.dest}.retry_out?`;
    $("c-skipped").textContent = dry.skipped_replayed ? `${num(dry.skipped_replayed)} already replayed are skipped (tick "again" to include them).` : "";
    $("c-result").textContent = "";
    $("c-progress").hidden = true;
    $("c-yes").disabled = dry.count === 0;
    $("confirm-dialog").showModal();
  } catch (error) { notice(`replay: ${error.message}`, true); }
}

async function confirmReplay() {
  $("c-yes").disabled = true;
  try {
    const job = await api("/api/replays", { method: "POST", body: JSON.stringify(state.pendingReplay) });
    $("c-progress").hidden = false;
    await followJob(job);
  } catch (error) { $("c-result").textContent = `refused: ${error.message}`; }
}

async function followJob(job) {
  for (;;) {
    $("c-progress").max = Math.max(1, job.total);
    $("c-progress").value = job.replayed;
    $("c-result").textContent = job.state === "running" ? `replaying: ${num(job.replayed)} of ${num(job.total)}` :
      job.state === "done" ? `replayed ${num(job.replayed)}` : `failed after ${num(job.replayed)}: ${job.error}`;
    if (job.state !== "running") { loadLetters(true); refreshOverview(); return; }
    await new Promise((r) => setTimeout(r, 500));
    job = await api(`/api/replays/${encodeURIComponent(job.id)}`);
  }
}

// --- wiring ------------------------------------------------------------------------------------

function wire() {
  $("token").value = state.token;
  $("operator").value = state.operator;
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    state.operator = $("operator").value.trim();
    sessionStorage.setItem("hifi-token", state.token);
    localStorage.setItem("hifi-operator", state.operator);
    tick();
    loadLetters(true);
  });
  $("dest").addEventListener("change", () => { state.dest = $("dest").value; tick(); loadLetters(true); });
  $("filters").addEventListener("submit", (e) => { e.preventDefault(); loadLetters(true); });
  $("f-clear").addEventListener("click", () => setFilter({}));
  $("find").addEventListener("submit", (e) => { e.preventDefault(); const key = $("find-key").value.trim(); if (key) find(key); });
  $("older").addEventListener("click", () => { if (state.nextCursor) { state.cursors.push(state.nextCursor); loadLetters(false); } });
  $("newer").addEventListener("click", () => { if (state.cursors.length > 1) { state.cursors.pop(); loadLetters(false); } });
  $("replay-matching").addEventListener("click", () => {
    const f = state.filter;
    const words = Object.entries(f).filter(([, v]) => v).map(([k, v]) => `${k}=${v}`).join(", ") || "all";
    askReplay({ filter: f }, words);
  });
  $("c-yes").addEventListener("click", confirmReplay);
  $("c-no").addEventListener("click", () => $("confirm-dialog").close());
  $("l-close").addEventListener("click", () => $("letter-dialog").close());
}

async function tick() {
  try {
    await refreshOverview();
    await refreshAccounting();
  } catch (error) { notice(`the retrier did not answer: ${error.message}`, true); }
}

wire();
tick();
setInterval(tick, REFRESH_MS);
