// The owner's per-request panel: tag a text, fix its spans, set epsilon per group, rewrite it
// through /v1/sanitize (streamed), show the report and the (document, group) budgets.
import { call, failure, headers, stream } from "./api.js";
import { $, fmt, textRow } from "./dom.js";
import { renderGroups, runSummary } from "./report.js";
import { SpanEditor, fromPoints } from "./spans.js";

function showError(message) { $("error").textContent = message || ""; }

const editor = new SpanEditor({ view: $("doc"), table: $("spans"), label: $("new-label"), add: $("add-span"),
                                onChange: renderEpsilons, onError: showError });

function renderEpsilons() {
  const box = $("groups");
  const old = Object.fromEntries([...box.querySelectorAll("input")].map((i) => [i.dataset.group, i.value]));
  const groups = [...new Set(editor.spans.map((s) => s.label))].sort();
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

function epsilons() {
  return Object.fromEntries([...$("groups").querySelectorAll("input")].map((i) => [i.dataset.group, Number(i.value)]));
}

$("text").oninput = () => editor.setText($("text").value);
$("file").onchange = async () => {
  const file = $("file").files[0];
  if (file) { $("text").value = await file.text(); editor.setText($("text").value); }
};

$("tag").onclick = async () => {
  showError("");
  editor.setText($("text").value);
  const text = editor.text;
  let spans;
  try { ({ spans } = await call("POST", "/v1/tag", { text })); } catch (err) { showError(err.message); return; }
  if (text !== editor.text) { showError("The document changed while the tagger ran: find the private spans again."); return; }
  editor.load(text, fromPoints(text, spans.map(({ start, end, label }) => ({ start, end, label }))));
};

$("run").onclick = async () => {
  showError("");
  editor.setText($("text").value);
  const body = {
    id: $("doc-id").value.trim(), text: editor.text, spans: editor.pointSpans(), epsilon: epsilons(),
    max_new_tokens: Number($("max-tokens").value), temperature: Number($("temperature").value), stream: true,
  };
  $("run").disabled = true;
  $("output").textContent = "";
  try {
    const response = await fetch("/v1/sanitize", { method: "POST", headers: headers({ Accept: "text/event-stream" }), body: JSON.stringify(body) });
    if (!response.ok) { showError(await failure(response)); return; }
    const result = await stream(response, $("output"), showError);
    if (result) {
      renderGroups($("report"), result.report);
      $("guarantee").textContent = `${runSummary(result.report)} ${result.report.guarantee}`;
    }
  } catch (err) {
    showError("The connection failed: " + err.message);
  } finally {
    $("run").disabled = false;
    refreshBudget();
  }
};

async function refreshBudget() {
  const id = $("doc-id").value.trim();
  let budget;
  try { budget = await call("GET", "/v1/budget" + (id ? "?id=" + encodeURIComponent(id) : "")); }
  catch (err) { showError(err.message); return; }
  $("budget").tBodies[0].replaceChildren(...budget.units.map((u) =>
    textRow([u.id, u.group, fmt(u.epsilon_spent), fmt(u.epsilon_remaining), u.requests], 2)));
  $("budget-note").textContent = `Tenant ${budget.tenant}: lifetime ε ${budget.budget} per (document, group) at δ ${budget.delta}; ` +
    "spent ε composes every request's RDP curve (docs/service.md).";
}

$("refresh").onclick = refreshBudget;
$("doc-id").onchange = refreshBudget;

// Called once an owner key is identified: the panel's first fetch.
export function showSanitize() {
  editor.render();
  refreshBudget();
}
