// Jupiter's web page: submit tasks, list jobs, watch one job's tree grow from its event stream.
// Plain JS, no build step, no CDN. Model text (questions, thoughts, cells, outputs, answers) reaches the page
// only through textContent, never innerHTML, so no reply can inject markup or script.
"use strict";

const TOKEN_KEY = "jupiter.token";
const FINISHED = new Set(["done", "failed", "cancelled"]);
const MODEL_FAILURES = new Set(["unparsable", "no-code", "empty-code", "truncated-reply", "too-many-errors",
                                "max-depth", "context-limit"]);
const NS = "http://www.w3.org/2000/svg", DX = 44, DY = 64, R = 11, PAD = 30;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  jobId: null,        // the job on screen
  job: null,          // its last job JSON
  source: null,       // its EventSource
  nodes: new Map(),   // tag -> node event data
  children: new Map(),// tag -> [child tags] in arrival order
  root: null,
  chosen: new Set(),  // tags on the chosen answer's path
  selected: null,
  fresh: new Set(),   // tags added since the last drawing (animated)
  drawQueued: false,
  pollTimer: null,
  answers: new Map(), // job id -> answer of a finished job (the list leaves results out; fetched once)
};

const $ = id => document.getElementById(id);

function text(id, value) { $(id).textContent = value === null || value === undefined ? "" : String(value); }

function message(msg, isError) {
  const el = $("message");
  el.textContent = msg || "";
  el.className = isError ? "error" : "";
  el.hidden = !msg;
}

// ------------------------------------------------------------------ HTTP
class ApiError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

function authHeaders() { return state.token ? {Authorization: "Bearer " + state.token} : {}; }

async function request(method, path, body) {
  let resp;
  try {
    resp = await fetch(path, {method: method, body: body, headers: authHeaders()});
  } catch (err) {
    text("server-state", "server unreachable");
    throw new ApiError(0, "cannot reach the server (" + err.message + ")");
  }
  text("server-state", "");
  if (resp.status === 401) {
    askToken(state.token ? "The token was refused; enter the right one." : "This server needs an access token.");
    throw new ApiError(401, "the server needs an access token");
  }
  if (!resp.ok) {
    let detail = resp.statusText;
    try {
      const data = await resp.json();
      detail = data.error || data.detail || JSON.stringify(data);
    } catch (err) { /* not JSON: keep the status text */ }
    throw new ApiError(resp.status, "HTTP " + resp.status + ": " + detail);
  }
  return resp;
}

async function api(method, path, body) { return (await request(method, path, body)).json(); }

// ------------------------------------------------------------------ token
function askToken(reason) {
  text("token-reason", reason);
  $("token").value = "";
  $("token-overlay").hidden = false;
  $("token").focus();
}

function saveToken(ev) {
  ev.preventDefault();
  state.token = $("token").value.trim();
  if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token); else sessionStorage.removeItem(TOKEN_KEY);
  $("token-overlay").hidden = true;
  refreshJobs();
  if (state.jobId) openJob(state.jobId);
}

// ------------------------------------------------------------------ submit
function readSettings() {
  const settings = {};
  for (const el of document.querySelectorAll("[data-setting]")) {
    const raw = el.value.trim();
    if (raw === "") continue;
    const kind = el.dataset.type;
    const value = kind === "int" ? parseInt(raw, 10) : kind === "float" ? parseFloat(raw) : raw;
    if (kind && !Number.isFinite(value)) throw new Error("setting " + el.dataset.setting + ": not a number");
    settings[el.dataset.setting] = value;
  }
  return settings;
}

function buildTask(fileNames) {
  if ($("kind-json").checked) {
    let task;
    try {
      task = JSON.parse($("task-json").value);
    } catch (err) {
      throw new Error("task JSON: " + err.message);
    }
    if (task === null || typeof task !== "object" || Array.isArray(task)) throw new Error("task JSON: must be an object");
    return task;
  }
  const question = $("question").value.trim();
  if (!question) throw new Error("question: required");
  const task = {
    id: "web-" + new Date().toISOString().replace(/[-:.TZ]/g, "").slice(0, 14),
    question: question,
    constraints: $("constraints").value.trim(),
    format: $("format").value.trim(),
    files: fileNames,
  };
  const label = $("label").value.trim();
  if (label) task.label = label;
  return task;
}

async function submitTask(ev) {
  ev.preventDefault();
  const button = $("submit");
  try {
    const files = Array.from($("files").files);
    const task = buildTask(files.map(f => f.name));
    const settings = readSettings();
    const form = new FormData();
    form.append("task", JSON.stringify(task));
    for (const f of files) form.append("files", f, f.name);
    if (Object.keys(settings).length) form.append("settings", JSON.stringify(settings));
    button.disabled = true;
    const job = await api("POST", "/v1/tasks", form);
    message("Submitted as job " + job.id + ".");
    await refreshJobs();
    openJob(job.id);
  } catch (err) {
    if (err.status !== 401) message(err.message, true);
  } finally {
    button.disabled = false;
  }
}

// ------------------------------------------------------------------ job list
function answerOf(job) {
  if (job.result && job.result.answer !== undefined && job.result.answer !== null) return job.result.answer;
  if (state.answers.has(job.id)) return state.answers.get(job.id);
  return job.answer === undefined ? null : job.answer;
}

async function fetchAnswers(jobs) {
  // the list has no results: read each newly finished job once (a final job's answer never changes)
  const missing = jobs.filter(j => j.status === "done" && !state.answers.has(j.id)).slice(0, 20);
  let changed = false;
  for (const job of missing) {
    try {
      const full = await api("GET", "/v1/tasks/" + encodeURIComponent(job.id));
      state.answers.set(job.id, full.result ? full.result.answer : null);
      changed = true;
    } catch (err) {
      return changed;
    }
  }
  return changed;
}

function shortTime(stamp) {
  if (stamp === null || stamp === undefined) return "";
  const date = typeof stamp === "number" ? new Date(stamp * 1000) : new Date(stamp);
  if (isNaN(date)) return String(stamp);
  const today = new Date().toDateString() === date.toDateString();
  const time = date.toTimeString().slice(0, 8);
  return today ? time : date.toISOString().slice(5, 10) + " " + time.slice(0, 5);
}

function statusBadge(el, status) {
  el.textContent = status || "";
  el.className = "status status-" + (status || "unknown");
}

async function refreshJobs() {
  let data;
  try {
    data = await api("GET", "/v1/tasks?limit=100");
  } catch (err) {
    if (err.status !== 401) message(err.message, true);
    return;
  }
  const jobs = data.tasks || [];
  await fetchAnswers(jobs);
  const body = $("jobs").querySelector("tbody");
  body.replaceChildren();
  $("no-jobs").hidden = jobs.length > 0;
  for (const job of jobs) {
    const row = document.createElement("tr");
    row.dataset.id = job.id;
    if (job.id === state.jobId) row.className = "current";
    const cells = [shortTime(job.created), job.question || job.task_id || job.id, null, answerOf(job)];
    cells.forEach((value, i) => {
      const td = document.createElement("td");
      if (i === 1) { td.className = "q"; td.title = value || ""; }
      if (i === 3) td.className = "a";
      if (i === 2) { const b = document.createElement("span"); statusBadge(b, job.status); td.appendChild(b); }
      else td.textContent = value === null || value === undefined ? "" : String(value);
      row.appendChild(td);
    });
    row.addEventListener("click", () => openJob(job.id));
    body.appendChild(row);
    if (job.id === state.jobId && state.job && job.status !== state.job.status && !state.source) showJob(job);
  }
}

// ------------------------------------------------------------------ one job
function resetTree() {
  state.nodes = new Map();
  state.children = new Map();
  state.root = null;
  state.chosen = new Set();
  state.selected = null;
  state.fresh = new Set();
  $("tree").replaceChildren();
  $("tree").setAttribute("width", 0);
  $("tree").setAttribute("height", 0);
  $("tree-empty").hidden = false;
  const detail = $("detail");
  detail.replaceChildren();
  const p = document.createElement("p");
  p.className = "muted";
  p.textContent = "Click a node to read its thought, cell and output.";
  detail.appendChild(p);
}

function closeStream() {
  if (state.source) { state.source.close(); state.source = null; }
  if (state.pollTimer) { clearInterval(state.pollTimer); state.pollTimer = null; }
}

function showJob(job) {
  state.job = job;
  text("job-title", "Job " + job.id + (job.task_id ? " · " + job.task_id : ""));
  text("job-question", job.question || "");
  statusBadge($("job-status"), job.status);
  const p = job.progress || {};
  text("job-progress", p.iterations !== undefined
    ? p.iterations + " iterations · " + (p.nodes || 0) + " nodes · " + (p.answers || 0) + " answers · " + (p.tokens || 0) + " tokens"
    : "");
  const answer = answerOf(job);
  text("job-answer", answer === null ? (FINISHED.has(job.status) ? "none" : "…") : answer);
  $("job-error").hidden = !job.error;
  text("job-error", job.error || "");
  $("cancel").disabled = FINISHED.has(job.status);
  for (const b of document.querySelectorAll("button.download")) b.disabled = job.status !== "done";
  const chosenTag = job.result && job.result.chosen_tag;
  if (chosenTag && !state.chosen.has(chosenTag)) {
    state.chosen = pathTo(chosenTag);
    queueDraw();
  }
}

async function refreshJob() {
  if (!state.jobId) return;
  try {
    showJob(await api("GET", "/v1/tasks/" + encodeURIComponent(state.jobId)));
  } catch (err) {
    if (err.status !== 401) message(err.message, true);
  }
}

async function openJob(id) {
  closeStream();
  state.jobId = id;
  state.job = null;
  resetTree();
  $("job").hidden = false;
  for (const row of $("jobs").querySelectorAll("tbody tr")) row.className = row.dataset.id === id ? "current" : "";
  await refreshJob();
  if (state.jobId !== id) return;
  startStream(id);
}

function startStream(id) {
  let url = "/v1/tasks/" + encodeURIComponent(id) + "/events";
  if (state.token) url += "?token=" + encodeURIComponent(state.token);
  const source = new EventSource(url);
  state.source = source;
  const mine = handler => ev => { if (state.source === source) handler(JSON.parse(ev.data)); };
  source.addEventListener("node", mine(addNode));
  source.addEventListener("iteration", mine(p => {
    if (state.job) { state.job.progress = p; showJob(state.job); }
  }));
  source.addEventListener("status", mine(s => {
    if (state.job) { state.job.status = s.status; showJob(state.job); }
  }));
  source.addEventListener("done", mine(d => {
    source.close();
    state.source = null;
    if (state.job) {
      state.job.status = d.status;
      state.job.error = d.error || state.job.error;
      if (d.answer !== undefined && d.answer !== null) state.job.result = Object.assign({}, state.job.result, {answer: d.answer});
      showJob(state.job);
    }
    refreshJob();
    refreshJobs();
    if (d.status === "done") finalValues(state.jobId);
  }));
  let broken = false;
  source.onopen = () => {
    // after a reconnect (e.g. the server restarted) the stream starts again with every node it has: redraw
    // from those, since a re-queued job's tree starts over from its root
    if (broken && state.source === source) { broken = false; resetTree(); }
  };
  source.onerror = () => {
    if (state.source !== source) return;
    broken = true;
    if (source.readyState === EventSource.CLOSED) {
      // refused for good (e.g. a token problem): fall back to polling the job's status
      state.source = null;
      refreshJob();
      if (!state.pollTimer) state.pollTimer = setInterval(() => {
        if (state.job && FINISHED.has(state.job.status)) { clearInterval(state.pollTimer); state.pollTimer = null; return; }
        refreshJob();
      }, 2000);
    }
    // CONNECTING: the browser reconnects by itself; the server replays every node, which addNode merges
  };
}

async function finalValues(id) {
  // node events carry values as of the step that made each node; tree.json has them after the last backup
  try {
    const tree = await (await request("GET", "/v1/tasks/" + encodeURIComponent(id) + "/tree.json")).json();
    if (state.jobId !== id) return;  // another job was opened meanwhile
    for (const rec of (Array.isArray(tree) ? tree : tree.nodes || [])) {
      const n = state.nodes.get(rec.tag);
      if (!n) continue;
      if (typeof rec.value === "number") n.value = rec.value;
      if (typeof rec.visit_count === "number") n.visits = rec.visit_count;
    }
    queueDraw();
  } catch (err) { /* the drawing keeps the streamed values */ }
}

async function cancelJob() {
  if (!state.jobId) return;
  try {
    showJob(await api("DELETE", "/v1/tasks/" + encodeURIComponent(state.jobId)));
    refreshJobs();
  } catch (err) {
    if (err.status !== 401) message(err.message, true);
  }
}

async function download(name) {
  if (!state.jobId) return;
  try {
    // fetch, not a plain link: the Bearer token goes in a header
    const resp = await request("GET", "/v1/tasks/" + encodeURIComponent(state.jobId) + "/" + name);
    const url = URL.createObjectURL(await resp.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = state.jobId + "-" + name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (err) {
    if (err.status !== 401) message(err.message, true);
  }
}

// ------------------------------------------------------------------ the tree
function addNode(n) {
  const known = state.nodes.get(n.tag);
  if (known) { Object.assign(known, n); queueDraw(); return; }
  state.nodes.set(n.tag, n);
  state.fresh.add(n.tag);
  if (n.parent === null || n.parent === undefined) state.root = n.tag;
  else {
    if (!state.children.has(n.parent)) state.children.set(n.parent, []);
    state.children.get(n.parent).push(n.tag);
  }
  const chosenTag = state.job && state.job.result && state.job.result.chosen_tag;
  if (chosenTag) state.chosen = pathTo(chosenTag);
  queueDraw();
}

function pathTo(tag) {
  const path = new Set();
  let n = state.nodes.get(tag);
  while (n) { path.add(n.tag); n = n.parent === null || n.parent === undefined ? null : state.nodes.get(n.parent); }
  return path;
}

function kindOf(n) {
  if (n.parent === null || n.parent === undefined) return "root";
  if (n.status === "answer") return "answer";
  if (n.status === "infrastructure" || n.terminal === "infrastructure") return "infrastructure";
  if (MODEL_FAILURES.has(n.terminal)) return "failure";
  return "step";
}

function colour(v) {
  const t = Math.max(-1, Math.min(1, Number(v) || 0));
  const r = t < 0 ? 220 : Math.round(220 - 170 * t), g = t > 0 ? 190 : Math.round(190 + 100 * t);
  return "rgb(" + r + "," + g + ",80)";
}

function layout() {
  // leaves left to right, parents centred over their children (as tree.html draws it)
  const pos = new Map();
  let slot = 0;
  const place = (tag, depth) => {
    const kids = state.children.get(tag) || [];
    let x;
    if (!kids.length) x = slot++;
    else {
      const xs = kids.map(k => place(k, depth + 1));
      x = (xs[0] + xs[xs.length - 1]) / 2;
    }
    pos.set(tag, [x, depth]);
    return x;
  };
  if (state.root !== null) place(state.root, 0);
  return pos;
}

function queueDraw() {
  if (state.drawQueued) return;
  state.drawQueued = true;
  requestAnimationFrame(() => { state.drawQueued = false; draw(); });
}

function draw() {
  const svg = $("tree");
  const pos = layout();
  svg.replaceChildren();
  $("tree-empty").hidden = pos.size > 0;
  if (!pos.size) return;
  let maxX = 0, maxDepth = 0;
  for (const [x, d] of pos.values()) { maxX = Math.max(maxX, x); maxDepth = Math.max(maxDepth, d); }
  svg.setAttribute("width", PAD * 2 + DX * (maxX + 1));
  svg.setAttribute("height", PAD * 2 + DY * (maxDepth + 1));
  const at = tag => { const [x, d] = pos.get(tag); return [PAD + DX * x + R, PAD + DY * d + R]; };
  const el = (name, attrs) => {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    svg.appendChild(e);
    return e;
  };
  for (const tag of pos.keys()) {
    const n = state.nodes.get(tag);
    if (n.parent === null || n.parent === undefined) continue;
    const [x1, y1] = at(n.parent), [x2, y2] = at(tag);
    const chosen = state.chosen.has(tag);
    el("line", {x1: x1, y1: y1, x2: x2, y2: y2, stroke: chosen ? "#2463eb" : "#999", "stroke-width": chosen ? 3 : 1});
  }
  for (const tag of pos.keys()) {
    const n = state.nodes.get(tag);
    const [x, y] = at(tag);
    const kind = kindOf(n), chosen = state.chosen.has(tag);
    const fill = kind === "failure" ? "#bbb" : kind === "infrastructure" ? "#fff" : colour(n.value);
    const classes = ["node", "kind-" + kind];
    if (state.fresh.has(tag)) classes.push("fresh");
    if (state.selected === tag) classes.push("selected");
    const c = el("circle", {cx: x, cy: y, r: R, fill: fill, class: classes.join(" "), "data-tag": tag,
      stroke: chosen ? "#2463eb" : kind === "infrastructure" ? "#e08a00" : "#333",
      "stroke-width": kind === "answer" || chosen ? 3 : 1,
      "stroke-dasharray": kind === "infrastructure" ? "3,2" : "none"});
    const title = document.createElementNS(NS, "title");
    title.textContent = tag + " " + (n.status || "") + " value " + n.value;
    c.appendChild(title);
    c.addEventListener("click", () => { state.selected = tag; showNode(n); queueDraw(); });
    if (kind === "answer") {  // a leaf: its answer's value(s) below it, the full text in the detail panel
      const label = el("text", {x: x, y: y + R + 11, "text-anchor": "middle", class: "answer"});
      label.textContent = answerLabel(n.answer);
    } else {  // the step's number beside it (lines leave from the top and the bottom)
      const label = el("text", {x: x + R + 2, y: y + 3, "text-anchor": "start"});
      label.textContent = String(tag).split(".").pop();
    }
  }
  state.fresh.clear();
}

function answerLabel(answer) {
  // "@mean_fare[34.65]" -> "34.65"; several answers -> the first value and "…"; long values cut
  const text = String(answer || "");
  const values = Array.from(text.matchAll(/@[^\[\]\s]+\[([^\]]*)\]/g), m => m[1]);
  let label = values.length ? values[0] + (values.length > 1 ? " …" : "") : text;
  if (label.length > 9) label = label.slice(0, 8) + "…";
  return label;
}

function section(parent, label, value) {
  if (value === null || value === undefined || value === "") return;
  const h = document.createElement("div");
  h.className = "label";
  h.textContent = label;
  parent.appendChild(h);
  const pre = document.createElement("pre");
  pre.textContent = String(value);
  parent.appendChild(pre);
}

function showNode(n) {
  const d = $("detail");
  d.replaceChildren();
  section(d, "Node", n.tag + "  status: " + n.status + (n.terminal ? "  terminal: " + n.terminal : "") +
    "\ndepth " + n.depth + "  value " + n.value + "  visits " + n.visits);
  section(d, "Thought", n.thought);
  section(d, "Cell", n.code);
  section(d, "Output", n.observation);
  section(d, "Answer", n.answer);
}

// ------------------------------------------------------------------ wiring
function switchInput() {
  const json = $("kind-json").checked;
  $("json-input").hidden = !json;
  $("fields-input").hidden = json;
}

document.addEventListener("DOMContentLoaded", () => {
  $("submit-form").addEventListener("submit", submitTask);
  $("kind-fields").addEventListener("change", switchInput);
  $("kind-json").addEventListener("change", switchInput);
  $("refresh").addEventListener("click", refreshJobs);
  $("cancel").addEventListener("click", cancelJob);
  for (const b of document.querySelectorAll("button.download")) b.addEventListener("click", () => download(b.dataset.name));
  $("token-form").addEventListener("submit", saveToken);
  $("token-cancel").addEventListener("click", () => { $("token-overlay").hidden = true; });
  $("token-button").addEventListener("click", () => askToken("Set the access token for this server."));
  refreshJobs();
  setInterval(() => { if (!document.hidden) refreshJobs(); }, 3000);
});
