// FATHOM web demo: run an episode live (server-sent events over a POST) or browse trace files, and show
// either with one viewer. Every piece of model output, document text or trace content reaches the page
// as a text node (el() below): never as HTML, because the model under test is adversarial.
"use strict";

const $ = (id) => document.getElementById(id);

// ---- DOM helpers -------------------------------------------------------------------------------------
// el("div", {class: "x"}, "text", child) — strings become text nodes; attributes are set, never parsed.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const fmtInt = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "?");
const fmtNum = (x, digits = 3) => (typeof x === "number" ? x.toFixed(digits) : "—");
const fmtValue = (v) => (v === null || v === undefined ? "—" : typeof v === "string" ? v : JSON.stringify(v));
const fmtTokens = (n) => (n >= 1 << 20 ? `${n / (1 << 20)}M` : n >= 1024 ? `${n / 1024}K` : String(n));

function chip(label, value, cls) {
  return el("span", { class: `chip ${cls || ""}` }, el("span", { class: "chip-k" }, label), " ", fmtValue(value));
}

// The model's text with its fenced code blocks set apart from the prose.
function modelText(text) {
  const box = el("div", { class: "model-text" });
  const fence = /```([a-zA-Z]*)\n?([\s\S]*?)(?:```|$)/g;
  let last = 0;
  for (const m of text.matchAll(fence)) {
    const prose = text.slice(last, m.index).trim();
    if (prose) box.append(el("p", { class: "prose" }, prose));
    box.append(el("pre", { class: "code", "data-lang": m[1] || "text" }, m[2].replace(/\n$/, "")));
    last = m.index + m[0].length;
  }
  const rest = text.slice(last).trim();
  if (rest) box.append(el("p", { class: "prose" }, rest));
  if (!text.trim()) box.append(el("p", { class: "prose muted" }, "(empty turn)"));
  return box;
}

function collapsible(summary, body, open) {
  return el("details", { class: "fold", open: open || null }, el("summary", {}, summary), body);
}

// ---- the viewer --------------------------------------------------------------------------------------
const viewer = {
  root: () => $("viewer"),
  turns: 0,
  gold: undefined,

  clear() {
    this.root().replaceChildren();
    this.turns = 0;
    this.gold = undefined;
  },

  task(task, labels) {
    this.gold = task.gold;
    const chips = el("div", { class: "chips" },
      task.task_id != null && chip("task", task.task_id),
      task.family && chip("family", task.family),
      task.length_tokens != null && chip("length", `${fmtInt(task.length_tokens)} tokens`),
      task.doc_chars != null && chip("document", `${fmtInt(task.doc_chars)} chars`),
      task.difficulty && chip("difficulty", task.difficulty),
      task.metric && chip("metric", task.metric),
      Object.entries(labels || {}).map(([k, v]) => chip(k, v, "label")));
    const card = el("section", { class: "card task-card" }, el("h2", {}, "Task"), chips);
    if (task.question) card.append(el("p", { class: "question" }, task.question));
    if (task.gold !== undefined && task.gold !== null) {
      card.append(el("p", { class: "gold" }, el("span", { class: "k" }, "gold "), el("code", {}, fmtValue(task.gold))));
    }
    if (task.document_head) {
      const shown = task.document_head.length < task.doc_chars ? ` (first ${fmtInt(task.document_head.length)} of ${fmtInt(task.doc_chars)} chars)` : "";
      card.append(collapsible(`Document${shown}`, el("pre", { class: "doc" }, task.document_head)));
    }
    this.root().append(card);
  },

  start(start) {
    const card = el("section", { class: "card prompt-card" });
    if (start.system) card.append(collapsible("System prompt", el("pre", { class: "plain" }, start.system)));
    if (start.first) card.append(collapsible("First user message", el("pre", { class: "plain" }, start.first), true));
    if (card.childElementCount) this.root().append(card);
  },

  turn(turn) {
    this.turns += 1;
    const n = this.turns;
    const meta = el("div", { class: "turn-meta" },
      turn.tokens != null && `${fmtInt(turn.tokens)} tokens`,
      turn.generate_s != null && ` · generate ${fmtNum(turn.generate_s, 2)} s`,
      turn.env_s != null && ` · REPL ${fmtNum(turn.env_s, 2)} s`,
      turn.finished === false && " · cut at the token limit");
    const card = el("article", { class: "card turn", id: `turn-${n}` },
      el("header", { class: "turn-head" }, el("h3", {}, `Turn ${n}`), meta),
      el("div", { class: "section-label" }, "model"),
      modelText(turn.text || ""));
    (turn.cells || []).forEach((cell, i) => card.append(this.cell(cell, i + 1)));
    const calls = turn.subcalls || [];
    if (calls.length) {
      card.append(el("div", { class: "section-label" }, `llm() sub-calls (${calls.length})`),
        el("div", { class: "subcalls" }, calls.map((c) => this.subcall(c))));
    }
    if (turn.error) card.append(el("pre", { class: "error" }, turn.error));
    if (turn.answer !== null && turn.answer !== undefined) {
      card.append(el("p", { class: "final" }, el("span", { class: "k" }, "FINAL "), el("code", {}, fmtValue(turn.answer))));
    }
    if (turn.observation) card.append(collapsible("What the model is shown next", el("pre", { class: "plain" }, turn.observation)));
    this.root().append(card);
  },

  cell(cell, i) {
    const flags = [
      cell.truncated_chars ? `${fmtInt(cell.truncated_chars)} chars cut` : null,
      cell.timed_out ? "timed out" : null,
      cell.restarted ? "REPL restarted" : null,
    ].filter(Boolean);
    const box = el("div", { class: "cell" },
      el("div", { class: "section-label" }, `REPL [${i}]`,
        cell.elapsed_s != null ? el("span", { class: "muted" }, ` ${fmtNum(cell.elapsed_s, 3)} s`) : null,
        flags.map((f) => el("span", { class: "flag" }, f))));
    if (cell.stdout) box.append(el("pre", { class: "stdout" }, cell.stdout));
    if (cell.error) box.append(el("pre", { class: "error" }, cell.error));
    if (!cell.stdout && !cell.error) box.append(el("pre", { class: "stdout muted" }, "(no output)"));
    return box;
  },

  subcall(call) {
    return el("div", { class: "subcall" },
      el("div", { class: "subcall-head" }, `depth ${call.depth} · chunk ${fmtInt(call.chunk_chars)} chars`,
        call.elapsed_s != null ? ` · ${fmtNum(call.elapsed_s, 3)} s` : ""),
      el("div", { class: "k" }, "prompt"), el("pre", { class: "plain small" }, call.prompt),
      el("div", { class: "k" }, "reply"), el("pre", { class: "plain small" }, call.reply));
  },

  end(end) {
    const b = end.breakdown;
    const verdict = b ? (b.correct ? "correct" : "wrong") : end.answer == null ? "no answer" : "ungraded";
    const card = el("section", { class: `card end-card ${verdict.replace(" ", "-")}`, id: "result" },
      el("header", { class: "turn-head" }, el("h2", {}, "Result"),
        el("span", { class: `verdict ${verdict.replace(" ", "-")}`, id: "verdict" }, verdict)),
      el("div", { class: "versus" },
        el("div", {}, el("div", { class: "k" }, "answer"), el("code", { id: "answer" }, fmtValue(end.answer))),
        el("div", {}, el("div", { class: "k" }, "gold"), el("code", { id: "gold-answer" }, fmtValue(this.gold)))),
      el("div", { class: "chips" },
        chip("reward", fmtNum(end.reward), "reward"),
        chip("turns", end.turns != null ? end.turns : this.turns),
        chip("ended", end.end_reason),
        b && chip("score", fmtNum(b.score)),
        b && b.capped && chip("capped", "wrong-answer cap")));
    if (b && b.components) {
      const values = Object.values(b.components);
      const top = Math.max(1, ...values.map(Math.abs));
      const rows = Object.entries(b.components).map(([name, value]) => {
        const bar = el("span", { class: value < 0 ? "bar negative" : "bar" });
        bar.style.width = `${Math.min(100, (Math.abs(value) / top) * 100)}%`;
        return el("tr", {}, el("td", {}, name), el("td", { class: "num" }, fmtNum(value)), el("td", { class: "bar-cell" }, bar));
      });
      rows.push(el("tr", { class: "total" }, el("td", {}, "total"), el("td", { class: "num" }, fmtNum(b.total)), el("td", {})));
      card.append(el("table", { class: "breakdown", id: "breakdown" },
        el("thead", {}, el("tr", {}, el("th", {}, "component"), el("th", { class: "num" }, "reward"), el("th", {}, ""))),
        el("tbody", {}, rows)));
    }
    this.root().append(card);
  },

  pending(text) {
    this.done();
    this.root().append(el("div", { class: "pending", id: "pending" }, el("span", { class: "spinner" }), text));
  },

  done() {
    const p = $("pending");
    if (p) p.remove();
  },

  error(text) {
    this.done();
    this.root().append(el("div", { class: "card failure" }, el("h3", {}, "Error"), el("pre", { class: "error" }, text)));
  },

  show(view) {
    this.clear();
    this.task(view.task, view.labels);
    this.start(view.start);
    view.turns.forEach((t) => this.turn(t));
    this.end(view.end);
  },
};

// ---- running an episode ------------------------------------------------------------------------------
let controller = null;
let options = null;

function setStatus(text, cls) {
  const s = $("status");
  s.textContent = text;
  s.className = `status ${cls || ""}`;
}

function runRequest() {
  const source = document.querySelector("input[name=source]:checked").value;
  const body = {
    policy: $("policy").value,
    max_turns: Number($("max-turns").value),
  };
  if (body.policy === "model") {
    body.max_new_tokens = Number($("max-new-tokens").value);
    body.temperature = Number($("temperature").value);
  }
  if (source === "generated") {
    body.generated = {
      family: $("family").value,
      length_tokens: Number($("length").value),
      seed: Number($("seed").value),
      difficulty: $("difficulty").value,
    };
  } else {
    body.pasted = {
      document: $("document").value,
      question: $("question").value,
      gold: $("gold").value,
      metric: $("metric").value,
    };
  }
  return body;
}

// Server-sent events from a streamed POST body: blocks separated by a blank line, "event:" and "data:".
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield [event, JSON.parse(data.join("\n"))];
    }
  }
}

async function errorText(response) {
  try {
    const body = await response.json();
    return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

async function runEpisode(event) {
  event.preventDefault();
  if (controller) return;
  controller = new AbortController();
  $("run").disabled = true;
  $("stop").disabled = false;
  viewer.clear();
  viewer.pending("Preparing the task…");
  setStatus("running…", "busy");
  let ended = false;
  try {
    const response = await fetch("/demo/api/run", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(runRequest()),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const [name, data] of sseEvents(response)) {
      viewer.done();
      if (name === "task") { viewer.task(data); viewer.pending("Starting the REPL…"); }
      else if (name === "start") { viewer.start(data); viewer.pending(`Turn ${viewer.turns + 1} running…`); }
      else if (name === "turn") { viewer.turn(data); viewer.pending(`Turn ${viewer.turns + 1} running…`); }
      else if (name === "end") { viewer.end(data); ended = true; }
      else if (name === "error") throw new Error(data.detail);
    }
    if (!ended) throw new Error("the stream ended before the episode did");
    setStatus(`done: ${viewer.turns} turn${viewer.turns === 1 ? "" : "s"}`, "ok");
  } catch (err) {
    if (err.name === "AbortError") { viewer.done(); setStatus("stopped", ""); }
    else { viewer.error(err.message); setStatus("failed", "bad"); }
  } finally {
    controller = null;
    $("run").disabled = false;
    $("stop").disabled = true;
  }
}

// ---- trace browser -----------------------------------------------------------------------------------
let traceOffset = 0;
const TRACE_PAGE = 50;

async function getJSON(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

async function loadRuns() {
  const select = $("trace-file");
  if (!options.runs) {
    $("runs-root").textContent = "No runs folder: start the server with --runs DIR to browse its traces.jsonl files.";
    return;
  }
  try {
    const runs = await getJSON("/demo/api/runs");
    $("runs-root").textContent = `${runs.files.length} trace file${runs.files.length === 1 ? "" : "s"} under ${runs.root}`;
    select.replaceChildren(...runs.files.map((f) =>
      el("option", { value: f.file }, `${f.file} (${fmtInt(f.lines)} episode${f.lines === 1 ? "" : "s"})`)));
    if (runs.files.length) await loadTraceList(true);
  } catch (err) {
    $("runs-root").textContent = err.message;
  }
}

async function loadTraceList(reset) {
  const file = $("trace-file").value;
  const body = $("trace-list").tBodies[0];
  if (reset) { traceOffset = 0; body.replaceChildren(); }
  const page = await getJSON(`/demo/api/traces?file=${encodeURIComponent(file)}&offset=${traceOffset}&limit=${TRACE_PAGE}`);
  for (const row of page.rows) {
    const tr = row.problem
      ? el("tr", { class: "bad-line" }, el("td", {}, row.line), el("td", { colspan: 4 }, row.problem))
      : el("tr", { class: "trace-row", "data-line": row.line, tabindex: 0 },
        el("td", {}, row.line),
        el("td", {}, el("div", {}, row.task_id || "?"),
          el("div", { class: "muted small" }, [row.family, row.kind, row.step != null ? `step ${row.step}` : null].filter((x) => x != null).join(" · "))),
        el("td", { class: "num" }, row.turns),
        el("td", { class: "num" }, fmtNum(row.reward)),
        el("td", {}, row.correct === true ? el("span", { class: "dot good" }, "✓") : row.correct === false ? el("span", { class: "dot bad" }, "✗") : ""));
    if (!row.problem) {
      const open = () => showTrace(file, row.line, tr);
      tr.addEventListener("click", open);
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
    }
    body.append(tr);
  }
  traceOffset += TRACE_PAGE;
  $("trace-more").hidden = page.rows.length < TRACE_PAGE;
}

async function showTrace(file, line, row) {
  document.querySelectorAll(".trace-row.selected").forEach((r) => r.classList.remove("selected"));
  row.classList.add("selected");
  try {
    viewer.show(await getJSON(`/demo/api/trace?file=${encodeURIComponent(file)}&line=${line}`));
  } catch (err) {
    viewer.clear();
    viewer.error(err.message);
  }
}

// ---- wiring ------------------------------------------------------------------------------------------
function showTab(name) {
  $("tab-run").classList.toggle("active", name === "run");
  $("tab-traces").classList.toggle("active", name === "traces");
  $("run-form").hidden = name !== "run";
  $("trace-browser").hidden = name !== "traces";
}

function syncForm() {
  const pasted = document.querySelector("input[name=source]:checked").value === "pasted";
  $("generated-fields").hidden = pasted;
  $("pasted-fields").hidden = !pasted;
  const model = $("policy").value === "model";
  $("model-fields").hidden = !model;
  $("policy-hint").textContent = model
    ? "The model writes every turn and answers its own llm() calls, on CPU: expect it to be slow and, untrained, wrong."
    : "The scripted expert: looks with a regex first, computes in code, and calls llm() only where reading is needed.";
  const family = options && options.families.find((f) => f.name === $("family").value);
  $("family-summary").textContent = family ? family.summary : "";
}

async function init() {
  options = await getJSON("/demo/api/options");
  $("family").replaceChildren(...options.families.map((f) => el("option", { value: f.name }, f.name)));
  $("length").replaceChildren(...options.lengths.map((n) =>
    el("option", { value: n, selected: n === 8192 || null }, `${fmtTokens(n)} tokens`)));
  $("difficulty").replaceChildren(...options.difficulties.map((d) =>
    el("option", { value: d, selected: d === "medium" || null }, d)));
  $("policy").replaceChildren(...options.policies.map((p) => el("option", { value: p.id }, p.label)));
  for (const input of document.querySelectorAll("input[name=source], #policy, #family")) {
    input.addEventListener("change", syncForm);
  }
  syncForm();
  $("run-form").addEventListener("submit", runEpisode);
  $("stop").addEventListener("click", () => controller && controller.abort());
  $("tab-run").addEventListener("click", () => showTab("run"));
  $("tab-traces").addEventListener("click", () => { showTab("traces"); if (!$("trace-file").options.length) loadRuns(); });
  $("trace-file").addEventListener("change", () => loadTraceList(true));
  $("trace-more").addEventListener("click", () => loadTraceList(false));
  document.body.dataset.ready = "1";  // for tests: options loaded, handlers attached
}

document.addEventListener("DOMContentLoaded", () => init().catch((err) => setStatus(err.message, "bad")));
