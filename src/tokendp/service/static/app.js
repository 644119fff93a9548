// The tokendp page: tag, fix spans, set epsilon per group, rewrite (streamed), report, budget.
"use strict";
const LABELS = ["PERSON", "DATE", "DURATION", "LOC", "ORG", "CODE", "DEM", "OCCUPATION", "QUANTITY", "MISC", "DATETIME"];
const $ = (id) => document.getElementById(id);
const state = { text: "", spans: [] };

function headers(extra = {}) {
  return { Authorization: "Bearer " + $("key").value.trim(), "Content-Type": "application/json", ...extra };
}

function showError(message) { $("error").textContent = message || ""; }

async function failure(response) {
  try { const body = await response.json(); return `${body.error.code}: ${body.error.message}`; }
  catch { return `HTTP ${response.status}`; }
}

function labelOptions(select, chosen) {
  select.replaceChildren(...LABELS.map((l) => new Option(l, l, false, l === chosen)));
}

function setText(text) {
  if (text !== state.text) { state.text = text; state.spans = []; }
  render();
}

function render() {
  const doc = $("doc");
  doc.replaceChildren();
  let at = 0;
  state.spans.sort((a, b) => a.start - b.start).forEach((s, i) => {
    doc.append(document.createTextNode(state.text.slice(at, s.start)));
    const mark = document.createElement("mark");
    mark.className = "l-" + s.label;
    mark.dataset.label = s.label;
    mark.dataset.index = i;
    mark.textContent = state.text.slice(s.start, s.end);
    mark.title = "click to remove";
    mark.onclick = () => { state.spans.splice(i, 1); render(); };
    doc.append(mark);
    at = s.end;
  });
  doc.append(document.createTextNode(state.text.slice(at)));
  renderSpanTable();
  renderGroups();
}

function renderSpanTable() {
  const body = $("spans").tBodies[0];
  body.replaceChildren(...state.spans.map((s, i) => {
    const row = body.insertRow();
    row.insertCell().textContent = state.text.slice(s.start, s.end);
    const select = document.createElement("select");
    labelOptions(select, s.label);
    select.onchange = () => { s.label = select.value; render(); };
    row.insertCell().append(select);
    const remove = document.createElement("button");
    remove.textContent = "remove";
    remove.className = "small";
    remove.onclick = () => { state.spans.splice(i, 1); render(); };
    row.insertCell().append(remove);
    return row;
  }));
}

function renderGroups() {
  const box = $("groups");
  const old = Object.fromEntries([...box.querySelectorAll("input")].map((i) => [i.dataset.group, i.value]));
  const groups = [...new Set(state.spans.map((s) => s.label))].sort();
  box.replaceChildren(...groups.map((g) => {
    const label = document.createElement("label");
    const swatch = document.createElement("span");
    swatch.className = "swatch l-" + g;
    const input = document.createElement("input");
    Object.assign(input, { type: "number", min: "0", step: "0.5", value: old[g] ?? "8" });
    input.dataset.group = g;
    label.append(swatch, `${g} ε`, input);
    return label;
  }));
  if (!groups.length) box.textContent = "No spans: nothing private is marked, so every group would be empty.";
}

function selectionOffsets() {
  const sel = window.getSelection();
  const doc = $("doc");
  if (!sel.rangeCount || sel.isCollapsed || !doc.contains(sel.anchorNode) || !doc.contains(sel.focusNode)) return null;
  const range = sel.getRangeAt(0);
  const before = document.createRange();
  before.setStart(doc, 0);
  before.setEnd(range.startContainer, range.startOffset);
  const start = before.toString().length;
  return snapOut(state.text, { start, end: start + range.toString().length });
}

// Offsets. The server counts code points (Python str indices); JavaScript strings and the DOM count
// UTF-16 code units, two for every astral character (emoji, CJK Extension B). state.spans hold code
// units; spans are converted where they cross the API: fromPoints for /v1/tag's, toPoints for /v1/sanitize.
function pointStarts(text) {  // [i]: the code unit where code point i starts; the last entry is text.length
  const starts = [0];
  for (const ch of text) starts.push(starts.at(-1) + ch.length);
  return starts;
}

function bisect(sorted, x) {  // the first index whose value is >= x
  let lo = 0, hi = sorted.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (sorted[mid] < x) lo = mid + 1; else hi = mid; }
  return lo;
}

function fromPoints(text, spans) {
  const starts = pointStarts(text);
  return spans.map(({ start, end, label }) => ({ start: starts[start], end: starts[end], label }));
}

function toPoints(text, spans) {
  const starts = pointStarts(text);
  return spans.map(({ start, end, label }) => ({ start: bisect(starts, start), end: bisect(starts, end), label }));
}

// True if code unit i is the second half of a surrogate pair: a selection there splits a character.
const insidePair = (text, i) => i > 0 && text.codePointAt(i - 1) > 0xffff;

function snapOut(text, { start, end }) {  // widen a selection to whole characters, so that it never leaks half of one
  return { start: insidePair(text, start) ? start - 1 : start, end: insidePair(text, end) ? end + 1 : end };
}

$("add-span").onclick = () => {
  const where = selectionOffsets();
  if (!where) { showError("Select some text in the document view first."); return; }
  state.spans = state.spans.filter((s) => s.end <= where.start || s.start >= where.end);
  state.spans.push({ ...where, label: $("new-label").value });
  showError("");
  render();
};

$("text").oninput = () => setText($("text").value);
$("file").onchange = async () => {
  const file = $("file").files[0];
  if (file) { $("text").value = await file.text(); setText($("text").value); }
};
$("key").onchange = () => { sessionStorage.setItem("tokendp-key", $("key").value); refreshBudget(); };

$("tag").onclick = async () => {
  showError("");
  setText($("text").value);
  const text = state.text;
  const response = await fetch("/v1/tag", { method: "POST", headers: headers(), body: JSON.stringify({ text }) });
  if (!response.ok) { showError(await failure(response)); return; }
  const { spans } = await response.json();
  if (text !== state.text) { showError("The document changed while the tagger ran: find the private spans again."); return; }
  state.spans = fromPoints(text, spans);
  render();
};

function epsilons() {
  return Object.fromEntries([...$("groups").querySelectorAll("input")].map((i) => [i.dataset.group, Number(i.value)]));
}

async function* events(response) {
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
      const name = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (name && data) yield [name, JSON.parse(data)];
    }
  }
}

$("run").onclick = async () => {
  showError("");
  setText($("text").value);
  const body = {
    id: $("doc-id").value.trim(), text: state.text, spans: toPoints(state.text, state.spans), epsilon: epsilons(),
    max_new_tokens: Number($("max-tokens").value), temperature: Number($("temperature").value), stream: true,
  };
  $("run").disabled = true;
  $("output").textContent = "";
  try {
    const response = await fetch("/v1/sanitize", { method: "POST", headers: headers({ Accept: "text/event-stream" }), body: JSON.stringify(body) });
    if (!response.ok) { showError(await failure(response)); return; }
    for await (const [name, data] of events(response)) {
      if (name === "token") $("output").textContent += data.text;
      else if (name === "result") { $("output").textContent = data.text; renderReport(data.report); }
      else if (name === "error") showError(`${data.error.code}: ${data.error.message}`);
    }
  } catch (err) {
    showError("The connection failed: " + err.message);
  } finally {
    $("run").disabled = false;
    refreshBudget();
  }
};

const fmt = (x) => (x === null || x === undefined ? "-" : Number(x).toPrecision(4));

function renderReport(report) {
  $("report").tBodies[0].replaceChildren(...report.groups.map((g) => {
    const row = document.createElement("tr");
    [g.label, g.n_spans, g.n_tokens, fmt(g.beta), fmt(g.epsilon)].forEach((v, i) => {
      const cell = row.insertCell();
      cell.textContent = v;
      if (i) cell.className = "num";
    });
    return row;
  }));
  $("guarantee").textContent = `α ${report.alpha}, δ ${report.delta}, T ${report.max_new_tokens} ` +
    `(${report.tokens_generated} generated, ${report.stop_reason}). ${report.guarantee}`;
}

async function refreshBudget() {
  if (!$("key").value.trim()) return;
  const id = $("doc-id").value.trim();
  const response = await fetch("/v1/budget" + (id ? "?id=" + encodeURIComponent(id) : ""), { headers: headers() });
  if (!response.ok) { showError(await failure(response)); return; }
  const budget = await response.json();
  $("budget").tBodies[0].replaceChildren(...budget.units.map((u) => {
    const row = document.createElement("tr");
    [u.id, u.group, fmt(u.epsilon_spent), fmt(u.epsilon_remaining), u.requests].forEach((v, i) => {
      const cell = row.insertCell();
      cell.textContent = v;
      if (i > 1) cell.className = "num";
    });
    return row;
  }));
  $("budget-note").textContent = `Tenant ${budget.tenant}: lifetime ε ${budget.budget} per (document, group) at δ ${budget.delta}; ` +
    "spent ε composes every request's RDP curve (docs/service.md).";
}

$("refresh").onclick = refreshBudget;
$("doc-id").onchange = refreshBudget;
labelOptions($("new-label"), "PERSON");
$("key").value = sessionStorage.getItem("tokendp-key") || "";
render();
refreshBudget();
