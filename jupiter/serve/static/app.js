// Jupiter's web page: submit tasks, list jobs, watch one job's tree grow from its event stream.
// Plain JS, no build step, no CDN. Model text (questions, thoughts, cells, outputs, answers) reaches the page
// only through textContent, never innerHTML, so no reply can inject markup or script. The tree is drawn by the
// project's one tree viewer (/static/tree_view.js, the same file tree.html inlines): fed the streamed nodes
// while the job runs, then the finished tree's own view data, read out of the job's tree.html.
"use strict";

const TOKEN_KEY = "jupiter.token";
const FINISHED = new Set(["done", "failed", "cancelled"]);

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  jobId: null,        // the job on screen
  job: null,          // its last job JSON
  source: null,       // its EventSource
  nodes: new Map(),   // tag -> node event data, in arrival order
  final: null,        // the finished tree's view data (from its tree.html), once read
  view: null,         // the tree viewer (JupiterTreeView)
  drawn: null,        // what it shows (a signature of the data last drawn)
  drawQueued: false,
  pollTimer: null,
  settingsLoaded: false, // the settings form is built (from the server's JobSettings schema)
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
  loadSettingsForm();
  if (state.jobId) openJob(state.jobId);
}

// ------------------------------------------------------------------ settings
// The form's settings are the server's job-settings model itself (JobSettings on its OpenAPI page): one field
// per setting, a choice for an enum, a number box with the model's bounds otherwise; left empty, the server's
// profile decides.
async function loadSettingsForm() {
  if (state.settingsLoaded) return;
  let schemas;
  try {
    schemas = (await api("GET", "/openapi.json")).components.schemas;
  } catch (err) {
    if (err.status !== 401) message(err.message, true);
    return;
  }
  const grid = $("settings-grid");
  grid.replaceChildren();
  for (const [name, prop] of Object.entries(schemas.JobSettings.properties)) {
    const type = (prop.anyOf || [prop]).find(t => t.type !== "null");
    const choices = type.$ref ? schemas[type.$ref.split("/").pop()].enum : type.enum;
    const label = document.createElement("label");
    label.htmlFor = "s-" + name;
    label.textContent = name;
    let input;
    if (choices) {
      input = document.createElement("select");
      for (const value of ["", ...choices]) input.add(new Option(value || "default", value));
    } else if (type.type === "integer" || type.type === "number") {
      input = document.createElement("input");
      input.type = "number";
      input.dataset.type = type.type === "integer" ? "int" : "float";
      input.step = type.type === "integer" ? "1" : "any";
      const min = type.minimum ?? type.exclusiveMinimum;
      if (min !== undefined) input.min = min;
      if (type.maximum !== undefined) input.max = type.maximum;
    } else {
      input = document.createElement("input");
      input.type = "text";
    }
    input.id = "s-" + name;
    input.dataset.setting = name;
    label.title = input.title = prop.description || "";
    grid.append(label, input);
  }
  state.settingsLoaded = true;
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
  state.final = null;
  state.drawn = null;
  state.view.reset();
  state.view.render({nodes: []});
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
  queueDraw();  // the header above the vote table follows the job (answer, label)
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
    if (d.status === "done") finalView(state.jobId);
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

async function finalView(id) {
  // node events carry values as of the step that made each node, and answers grouped by their text only: the
  // finished job's tree.html holds the viewer's JSON with the final values and the engine's normalised vote
  try {
    const page = await (await request("GET", "/v1/tasks/" + encodeURIComponent(id) + "/tree.html")).text();
    if (state.jobId !== id) return;  // another job was opened meanwhile
    // parsed as an inert document: its scripts never run here; only the JSON element is read
    const element = new DOMParser().parseFromString(page, "text/html").getElementById("tree-data");
    if (!element) return;
    state.final = JSON.parse(element.textContent);
    queueDraw();
  } catch (err) { /* the drawing keeps the streamed tree */ }
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
  if (known) Object.assign(known, n); else state.nodes.set(n.tag, n);
  queueDraw();
}

function liveData() {
  // the viewer's JSON from what the page has: the streamed nodes and the job (no vote: the viewer groups the
  // answers by their text until the finished tree's normalised vote arrives)
  const job = state.job || {};
  const result = job.result || {};
  return {
    task_id: job.task_id || null,
    question: job.question || null,
    label: result.label === undefined ? null : result.label,
    correct: result.correct === undefined ? null : result.correct,
    answer: result.answer === undefined ? null : result.answer,
    decided_by: result.decided_by || null,
    chosen_tag: result.chosen_tag || null,
    final: FINISHED.has(job.status),
    nodes: Array.from(state.nodes.values()),
  };
}

function queueDraw() {
  if (state.drawQueued) return;
  state.drawQueued = true;
  requestAnimationFrame(() => { state.drawQueued = false; draw(); });
}

function draw() {
  // the finished tree's own data once read (unless the stream has since brought nodes it lacks: a re-run)
  const final = state.final;
  const usable = final && Array.isArray(final.nodes) && final.nodes.length >= state.nodes.size;
  const data = usable ? final : liveData();
  // redraw only on a change: a redraw replaces the shapes, and the page asks for one on every job refresh
  const signature = JSON.stringify([usable, data.question, data.answer, data.chosen_tag, data.label, data.final,
                                    data.nodes.map(n => [n.tag, n.status, n.visits, n.value])]);
  if (signature === state.drawn) return;
  state.drawn = signature;
  state.view.render(data);
}

// ------------------------------------------------------------------ wiring
function switchInput() {
  const json = $("kind-json").checked;
  $("json-input").hidden = !json;
  $("fields-input").hidden = json;
}

document.addEventListener("DOMContentLoaded", () => {
  state.view = JupiterTreeView.create({tree: $("tree-wrap"), detail: $("detail"), header: $("vote"), question: false,
                                       svgId: "tree", emptyText: "Waiting for the first node…"});
  state.view.render({nodes: []});
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
  loadSettingsForm();
  setInterval(() => { if (!document.hidden) refreshJobs(); }, 3000);
});
