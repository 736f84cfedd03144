// app.js - the job dashboard: reads the job master's API (docs/API.md) and redraws.
//
// Served by a job server (dtrain server, docs/SERVER.md: its healthz says "server"), the page
// lists the server's jobs with their state, queue position and reason, and the capacity
// used and free, and the experiments `dtrain tune` runs on it; ?job=NAME shows that job's page
// through the server, which passes the job API to the job's master; ?experiment=NAME an
// experiment's trials table and charts of its objective (GET /v1/experiments/NAME).
//
// The token: `dtrain run` prints http://HOST:PORT/#token=TOKEN. The fragment never goes to a
// server; the page keeps it in sessionStorage (this tab only) and takes it out of the
// address bar, then sends it as a Bearer token to its own origin only.
"use strict";

const state = {
  token: null, job: null, status: null, logReplica: null, logOffset: 0,
  eventsOffset: 0, charts: {}, polls: 0, server: null, jobs: null,
};
window.dtrain = state; // for tests and curious users

function takeToken() {
  const m = /(?:^|[#&])token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem("dtrain-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  state.token = sessionStorage.getItem("dtrain-token");
}

function showError(msg) {
  const e = document.getElementById("error");
  e.textContent = msg || "";
  e.hidden = !msg;
}

async function api(path, asText) {
  const r = await fetch(path, {
    headers: state.token ? { Authorization: "Bearer " + state.token } : {},
    cache: "no-store",
  });
  if (r.status === 401) throw new Error(state.server ?
    "the server's token is missing or wrong: open the page with #token=TOKEN (the token of the server's server.json)" :
    "the job's token is missing or wrong: open the URL `dtrain run` printed (it ends in #token=...)");
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return asText ? r : r.json();
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

function fmt(x, digits) {
  return typeof x === "number" ? (digits == null ? String(Math.round(x)) : x.toFixed(digits)) : "";
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 90 ? Math.round(s) + "s ago" : s < 5400 ? Math.round(s / 60) + "m ago" : Math.round(s / 3600) + "h ago";
}

function renderHeader(st) {
  document.getElementById("job").textContent = st.kind + " " + st.name;
  document.title = st.name + " - " + st.phase + " - dtrain";
  const ph = document.getElementById("phase");
  ph.textContent = st.phase;
  ph.className = "phase " + st.phase;
  const p = st.progress, box = document.getElementById("progress");
  box.replaceChildren();
  if (p) {
    const pct = (100 * p.fraction).toFixed(1);
    const bar = el("div", { class: "bar" }, el("div", { style: "width:" + pct + "%" }));
    let text = pct + "% of the data, epoch " + p.epoch + "/" + p.epochs;
    if (p.samplesPerSec != null) text += ", " + Math.round(p.samplesPerSec) + " samples/s";
    if (p.etaSeconds != null) text += ", ETA " + Math.round(p.etaSeconds) + " s";
    box.append(el("span", { id: "progress-text" }, text), bar);
  }
}

function renderConditions(st) {
  const tb = document.querySelector("#conditions tbody");
  tb.replaceChildren(...(st.conditions || []).map((c) =>
    el("tr", {}, el("td", {}, c.type), el("td", {}, c.status), el("td", {}, c.reason),
      el("td", {}, c.message), el("td", {}, ago(c.lastTransitionTime)))));
}

function renderReplicas(st) {
  const tb = document.querySelector("#replicas tbody");
  tb.replaceChildren(...st.replicas.map((r) => {
    const p = r.state === "Running" ? r.progress || {} : {};
    return el("tr", { "data-replica": r.name, "data-state": r.state },
      el("td", {}, r.name), el("td", { class: "state-" + r.state }, r.state),
      el("td", { class: "num" }, r.restarts), el("td", { class: "num" }, r.exitCode == null ? "" : r.exitCode),
      el("td", { class: "num" }, fmt(p.step)), el("td", { class: "num" }, fmt(p.loss, 4)),
      el("td", { class: "num" }, fmt(p.samples_per_sec)), el("td", {}, r.message || ""));
  }));
  const sel = document.getElementById("log-replica");
  const names = st.replicas.map((r) => r.name);
  if (sel.options.length !== names.length || names.some((n, i) => sel.options[i].value !== n)) {
    sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (state.logReplica && names.includes(state.logReplica)) sel.value = state.logReplica;
    else pickLog(names[0]);
  }
}

function renderData(st) {
  const box = document.getElementById("datasets");
  const sets = (st.data && st.data.datasets) || {};
  const names = Object.keys(sets);
  if (!names.length) return;
  box.replaceChildren(...names.map((n) => {
    const d = sets[n];
    let done = 0, total = 0;
    for (const e of d.epochs || []) { done += e.shards_done; total += e.shards_total; }
    total = Math.max(total, (d.shards_per_epoch || 0) * (d.num_epochs || 0));
    const pct = total ? (100 * done / total).toFixed(1) : "0";
    const reps = Object.entries(d.replicas || {}).map(([r, v]) => r + ": " + v.shards_done + " shards").join(", ");
    return el("div", { "data-dataset": n },
      el("strong", {}, n), " " + d.state + ": " + done + " of " + total + " shards (" + pct + "%), in flight " +
        (d.in_flight || 0) + ", re-queued " + (d.requeued || 0),
      el("div", { class: "bar" }, el("div", { style: "width:" + pct + "%" })),
      el("div", { class: "muted" }, reps));
  }));
}

function renderCluster(st) {
  const box = document.getElementById("cluster"), title = document.getElementById("cluster-title");
  const ps = st.replicas.filter((r) => r.type === "ps");
  if (st.ring) {
    title.textContent = "All-reduce ring";
    box.replaceChildren(el("p", { id: "ring" }, "generation " + st.ring.generation));
  } else if (ps.length) {
    title.textContent = "Parameter servers";
    const up = ps.filter((r) => r.state === "Running").length;
    box.replaceChildren(el("p", { id: "ps" }, up + " of " + ps.length + " running: " +
      ps.map((r) => r.name + " " + r.state).join(", ")));
  } else {
    title.textContent = "Cluster";
    box.replaceChildren(el("p", { class: "muted" }, "no parameter servers, no ring"));
  }
}

const palette = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#57606a"];

function chart(id, yTitle, xTitle) {
  if (state.charts[id]) return state.charts[id];
  if (!window.Chart) return null;
  state.charts[id] = new window.Chart(document.getElementById(id), {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
      normalized: true, elements: { point: { radius: 0 } },
      scales: { x: { type: "linear", title: { display: true, text: xTitle || "step" } },
                y: { title: { display: true, text: yTitle } } },
      plugins: { legend: { position: "bottom" } },
    },
  });
  return state.charts[id];
}

function setSeries(c, list) {
  c.data.datasets = list.map((s, i) => ({
    label: s.label, data: s.points, borderColor: palette[i % palette.length],
    backgroundColor: palette[i % palette.length], borderWidth: 1.5, pointRadius: s.points.length < 30 ? 3 : 0,
  }));
  c.update("none");
}

async function pollSeries() {
  const s = await api("/v1/jobs/" + encodeURIComponent(state.job) + "/series");
  const loss = chart("loss-chart", "loss"), ev = chart("eval-chart", "accuracy");
  if (!loss || !ev) return;
  setSeries(loss, Object.entries(s.train).map(([name, pts]) =>
    ({ label: name, points: pts.filter((p) => p[1] >= 0 && p[2] >= 0).map((p) => ({ x: p[1], y: p[2] })) })));
  setSeries(ev, [{ label: "accuracy", points: s.eval.map((p) => ({ x: p[1], y: p[2] })) }]);
}

function pickLog(name) {
  state.logReplica = name;
  state.logOffset = 0;
  document.getElementById("log").textContent = "";
}

async function pollLog() {
  if (!state.logReplica) return;
  const name = state.logReplica;
  const r = await api("/v1/jobs/" + encodeURIComponent(state.job) + "/replicas/" +
    encodeURIComponent(name) + "/logs?offset=" + state.logOffset, true);
  const text = await r.text();
  if (name !== state.logReplica) return;
  state.logOffset = Number(r.headers.get("X-Dtrain-Log-Offset")) || state.logOffset;
  if (!text) return;
  const pre = document.getElementById("log");
  const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = (pre.textContent + text).slice(-200000);
  if (stick) pre.scrollTop = pre.scrollHeight;
}

function describe(e) {
  const skip = new Set(["ev", "time"]);
  return Object.entries(e).filter(([k]) => !skip.has(k)).map(([k, v]) =>
    k + "=" + (typeof v === "object" ? JSON.stringify(v) : v)).join(" ").slice(0, 300);
}

async function pollEvents() {
  const r = await api("/v1/jobs/" + encodeURIComponent(state.job) + "/events?offset=" + state.eventsOffset);
  state.eventsOffset = r.next;
  if (!r.events.length) return;
  const ol = document.getElementById("events");
  const stick = ol.scrollTop + ol.clientHeight >= ol.scrollHeight - 4;
  for (const e of r.events) {
    const t = e.time ? new Date(e.time * 1000).toLocaleTimeString() : "";
    ol.append(el("li", { "data-ev": e.ev }, t + "  " + e.ev + "  " + describe(e)));
  }
  while (ol.children.length > 2000) ol.firstChild.remove();
  if (stick) ol.scrollTop = ol.scrollHeight;
}

function gib(b) {
  return b >= 1 << 30 ? (b / (1 << 30)).toFixed(1) + " GiB" : Math.round(b / (1 << 20)) + " MiB";
}

function renderServer(sv, jobs) {
  const cap = sv.capacity, used = sv.used;
  document.getElementById("job").textContent = "dtrain server";
  document.title = "dtrain server - " + sv.running.length + " running, " + sv.queue.length + " queued";
  const ph = document.getElementById("phase");
  ph.textContent = sv.running.length + " running, " + sv.queue.length + " queued";
  ph.className = "phase";
  const pct = cap.cpus ? Math.min(100, 100 * used.cpus / cap.cpus).toFixed(0) : "0";
  document.getElementById("capacity").replaceChildren(
    el("p", { id: "capacity-text" }, "cpus: " + used.cpus + " used of " + cap.cpus + ", " +
      Math.max(0, cap.cpus - used.cpus) + " free; memory: " + gib(used.memoryBytes) + " used of " +
      gib(cap.memoryBytes) + ", " + gib(Math.max(0, cap.memoryBytes - used.memoryBytes)) + " free"),
    el("div", { class: "bar" }, el("div", { style: "width:" + pct + "%" })));
  const tb = document.querySelector("#jobs tbody");
  tb.replaceChildren(...jobs.map((j) => {
    const link = el("a", { href: "?job=" + encodeURIComponent(j.name) }, j.name);
    return el("tr", { "data-job": j.name, "data-state": j.state },
      el("td", {}, link), el("td", {}, j.kind), el("td", { class: "state-" + j.state }, j.state),
      el("td", { class: "num" }, j.position || ""), el("td", { class: "num" }, j.priority),
      el("td", { class: "num" }, j.demand.cpus), el("td", { class: "num" }, gib(j.demand.memoryBytes)),
      el("td", {}, ago(j.submitTime)), el("td", {}, j.message || j.reason || ""));
  }));
}

async function pollServer() {
  try {
    const sv = await api("/v1/server");
    const jobs = (await api("/v1/jobs")).jobs;
    state.jobs = jobs;
    renderServer(sv, jobs);
    renderExperiments((await api("/v1/experiments")).experiments || []);
    showError("");
  } catch (e) {
    showError(String(e.message || e));
  }
  setTimeout(pollServer, 1000);
}

// ---- experiments (dtrain tune, docs/TUNE.md): what the runner PUTs to the server ----

function renderExperiments(list) {
  document.getElementById("experiments").hidden = list.length === 0;
  const tb = document.querySelector("#experiments-table tbody");
  tb.replaceChildren(...list.map((x) => {
    const c = x.counts || {}, obj = x.objective || {};
    const best = x.best ? x.best.trial + ": " + fmt(x.best.objective, 4) : "";
    return el("tr", { "data-experiment": x.name },
      el("td", {}, el("a", { href: "?experiment=" + encodeURIComponent(x.name) }, x.name)),
      el("td", { class: "state-" + x.status }, x.status + (x.reason ? " (" + x.reason + ")" : "")),
      el("td", {}, x.algorithm + (x.earlyStopping ? " + " + x.earlyStopping : "")),
      el("td", {}, obj.type + " " + obj.metric),
      el("td", {}, (x.trials || []).length + ": " + (c.succeeded || 0) + " succeeded, " +
        (c.running || 0) + " running, " + (c.failed || 0) + " failed"),
      el("td", {}, best), el("td", {}, ago(x.updated)));
  }));
}

function paramText(p) {
  return Object.entries(p || {}).map(([k, v]) => k + "=" + v).join(" ");
}

function renderExperiment(x) {
  const obj = x.objective || {};
  document.getElementById("job").textContent = "experiment " + x.name;
  document.title = x.name + " - " + x.status + " - dtrain tune";
  const ph = document.getElementById("phase");
  ph.textContent = x.status;
  ph.className = "phase " + x.status;
  const trials = x.trials || [];
  document.getElementById("experiment-summary").textContent =
    x.algorithm + (x.earlyStopping ? " + " + x.earlyStopping : "") + ", " + obj.type + " " +
    obj.metric + (obj.goal != null ? " (goal " + obj.goal + ")" : "") + "; " + trials.length +
    " trials of " + (x.maxTrialCount || "all") + ", " + x.parallelTrialCount + " in parallel" +
    (x.best ? "; best " + x.best.trial + " " + paramText(x.best.parameters) + ": " + fmt(x.best.objective, 4) : "") +
    (x.message ? ". " + x.message : "");
  const tb = document.querySelector("#trials tbody");
  tb.replaceChildren(...trials.map((t) => {
    const isBest = x.best && x.best.trial === t.name;
    return el("tr", { "data-trial": t.name, "data-state": t.state, class: isBest ? "best" : "" },
      el("td", {}, t.name + (isBest ? " ★" : "")), el("td", { class: "state-" + t.state }, t.state),
      el("td", {}, paramText(t.parameters)), el("td", { class: "num" }, fmt(t.objective, 4)),
      el("td", { class: "num" }, (t.observations || []).length),
      el("td", {}, el("a", { href: "?job=" + encodeURIComponent(t.job) }, t.jobState || "job")),
      el("td", {}, t.message || ""));
  }));
  const byEpoch = chart("objective-chart", obj.metric, "epoch");
  if (byEpoch) {
    document.getElementById("objective-caption").textContent = obj.metric + " by epoch, one line a trial";
    setSeries(byEpoch, trials.filter((t) => (t.observations || []).length).map((t) => ({
      label: t.name, points: t.observations.map((o) => ({ x: o.resource, y: o.value })),
    })));
  }
  const byTrial = chart("final-chart", obj.metric, "trial");
  if (byTrial) {
    document.getElementById("final-caption").textContent = obj.metric + " of each trial (its final value, or last)";
    setSeries(byTrial, [{
      label: obj.metric,
      points: trials.filter((t) => typeof t.objective === "number").map((t) => ({ x: t.index, y: t.objective })),
    }]);
    byTrial.data.datasets[0].showLine = false; // points: trials are not a series
    byTrial.data.datasets[0].pointRadius = 4;
    byTrial.options.scales.x.ticks = { stepSize: 1, precision: 0 };
    byTrial.update("none");
  }
}

async function pollExperiment(name) {
  let done = false;
  try {
    const x = await api("/v1/experiments/" + encodeURIComponent(name));
    renderExperiment(x);
    done = x.status !== "Running";
    showError("");
  } catch (e) {
    showError(String(e.message || e));
  }
  setTimeout(() => pollExperiment(name), done ? 5000 : 1000);
}

async function poll() {
  try {
    const st = await api("/v1/jobs/" + encodeURIComponent(state.job));
    state.status = st;
    renderHeader(st); renderConditions(st); renderReplicas(st); renderData(st); renderCluster(st);
    // through a server, a job that does not run yet has no master to ask
    const waiting = st.server && ["Queued", "Suspended", "Starting"].includes(st.phase);
    if (!waiting) await pollLog();
    if (!waiting && state.polls % 2 === 0) { await pollSeries(); await pollEvents(); }
    state.polls++;
    showError("");
  } catch (e) {
    showError(String(e.message || e));
  }
  // a finished job changes no more: slow down
  const done = state.status && ["Succeeded", "Failed", "Stopped"].includes(state.status.phase);
  setTimeout(poll, done ? 5000 : 1000);
}

async function start() {
  takeToken();
  document.getElementById("log-replica").addEventListener("change", (ev) => pickLog(ev.target.value));
  try {
    const h = await api("/v1/healthz");
    state.server = !!h.server;
    state.job = state.server ? new URLSearchParams(location.search).get("job") : h.job;
  } catch (e) {
    showError("the job's master does not answer: " + (e.message || e));
    return;
  }
  if (state.server && state.job)
    document.querySelector("header h1").after(el("a", { href: location.pathname, id: "all-jobs" }, "all jobs of the server"));
  const experiment = state.server && new URLSearchParams(location.search).get("experiment");
  if (experiment) {
    document.querySelector("header h1").after(el("a", { href: location.pathname, id: "all-jobs" }, "all jobs of the server"));
    document.getElementById("experiment").hidden = false;
    document.getElementById("experiment-charts").hidden = false;
    for (const s of document.querySelectorAll("section.job")) s.hidden = true;
    pollExperiment(experiment);
    return;
  }
  if (state.server && !state.job) {
    document.getElementById("server").hidden = false;
    for (const s of document.querySelectorAll("section.job")) s.hidden = true;
    pollServer();
    return;
  }
  poll();
}

start();
