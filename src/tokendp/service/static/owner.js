// The owner's view of the vault (docs/vault.md): the tenant's documents, adding one, confirming a
// draft's spans, the units' lifetime budgets (the ledger) and the reader keys' quotas.
import { call } from "./api.js";
import { $, button, fmt, textRow } from "./dom.js";
import { SpanEditor, fromPoints } from "./spans.js";

function showError(message) { $("owner-error").textContent = message || ""; }

async function attempt(action) {  // run action, showing its failure
  showError("");
  try { await action(); } catch (err) { showError(err.message); }
}

// --- documents -------------------------------------------------------------------------------
async function refreshDocuments() {
  const { documents } = await call("GET", "/v1/documents");
  $("documents").tBodies[0].replaceChildren(...documents.map((d) => {
    const row = textRow([d.id, d.title, d.state]);
    row.cells[2].className = "state-" + d.state;
    row.insertCell().append(button(d.state === "draft" ? "review spans" : "spans", () => attempt(() => review(d.id))),
                            button("delete", () => attempt(() => remove(d.id))));
    return row;
  }));
  if (!documents.length) $("documents").tBodies[0].replaceChildren(textRow(["No documents yet.", "", ""]));
}

function parseSpans(json) {  // the optional spans field of the form: null (the server tags) or a list
  if (!json.trim()) return null;
  let spans;
  try { spans = JSON.parse(json); } catch { throw new Error("Spans: not valid JSON (a list of {start, end, label, subject?})."); }
  if (!Array.isArray(spans)) throw new Error("Spans: give a JSON list of {start, end, label, subject?}.");
  return spans;
}

$("add-document").onclick = () => attempt(async () => {
  const id = $("new-id").value.trim();
  const body = { id, title: $("new-title").value, text: $("new-text").value };
  const spans = parseSpans($("new-spans").value);
  if (spans !== null) body.spans = spans;
  if ($("new-subject").value.trim()) body.subject = $("new-subject").value.trim();
  $("add-document").disabled = true;
  try {
    const added = await call("POST", "/v1/documents", body);
    for (const field of ["new-id", "new-title", "new-subject", "new-text", "new-spans"]) $(field).value = "";
    await refreshDocuments();
    if (added.state === "draft") await review(id);
  } finally {
    $("add-document").disabled = false;
  }
});

async function remove(id) {
  if (!window.confirm(`Delete ${id} and its stored rewrites? The spend of its units stays.`)) return;
  await call("DELETE", "/v1/documents/" + encodeURIComponent(id));
  if (reviewed?.id === id) closeReview();
  await refreshDocuments();
}

// --- reviewing and confirming a document's spans ---------------------------------------------
const editor = new SpanEditor({ view: $("review-doc"), table: $("review-spans"), label: $("review-label"),
                                add: $("review-add"), subject: $("review-subject"), onError: showError });
let reviewed = null;  // the document as the server holds it

// A document's spans in a canonical order, for comparing the edited ones with the stored ones.
const canonical = (spans) => JSON.stringify(spans.map(({ start, end, label, subject }) => ({ start, end, label, subject: subject ?? null }))
  .sort((a, b) => a.start - b.start || a.end - b.end));

async function review(id) {
  reviewed = await call("GET", "/v1/documents/" + encodeURIComponent(id));
  $("review-id").textContent = reviewed.id;
  $("review-state").textContent = reviewed.state;
  $("review-state").className = "badge state-" + reviewed.state;
  $("review-title").textContent = reviewed.title || "(no title)";
  $("review-default").value = reviewed.subject ?? "";
  $("review-confirm").textContent = reviewed.state === "draft" ? "Confirm spans" : "Save spans";
  editor.load(reviewed.text, fromPoints(reviewed.text, reviewed.spans));
  $("review-card").hidden = false;
}

function closeReview() {
  reviewed = null;
  editor.load("", []);
  $("review-card").hidden = true;
}

// Unchanged spans of a draft: confirm them as stored. Changed ones: PUT the document with them,
// which stores it confirmed (a new version: a confirmed document's stored rewrites go).
$("review-confirm").onclick = () => attempt(async () => {
  const spans = editor.pointSpans();
  const subject = $("review-default").value.trim() || null;
  const unchanged = canonical(spans) === canonical(reviewed.spans) && subject === reviewed.subject;
  if (unchanged && reviewed.state === "confirmed") { showError("Nothing changed."); return; }
  if (unchanged) await call("POST", `/v1/documents/${encodeURIComponent(reviewed.id)}/confirm`);
  else await call("PUT", "/v1/documents/" + encodeURIComponent(reviewed.id),
                  { title: reviewed.title, text: reviewed.text, spans, ...(subject ? { subject } : {}) });
  closeReview();
  await refreshDocuments();
});
$("review-close").onclick = closeReview;

// --- units and their lifetime budgets --------------------------------------------------------
const unitName = (u) => (u.subject !== undefined ? `subject ${u.subject}` : `${u.document} / ${u.label}`) +
  (u.merged && u.merged.length ? ` (merged from ${u.merged.map((m) => JSON.stringify(m.subject)).join(", ")})` : "");

async function refreshLedger() {
  const book = await call("GET", "/v1/ledger");
  $("ledger-note").textContent = `Every unit's lifetime budget: ε ${book.epsilon} at δ ${book.delta}, that is B = ${fmt(book.budget)} ` +
    `in Rényi DP at order α ${book.alpha}. Releases: ` +
    (Object.entries(book.releases).map(([state, n]) => `${n} ${state}`).join(", ") || "none yet") + ".";
  $("ledger").tBodies[0].replaceChildren(...book.units.map((u) => {
    const row = textRow([unitName(u), fmt(u.spent), fmt(u.reserved), fmt(u.remaining)], 1);
    const meter = document.createElement("meter");
    Object.assign(meter, { min: 0, max: book.budget || 1, value: u.remaining, title: "remaining of B" });
    row.insertCell().append(meter);
    return row;
  }));
  if (!book.units.length) $("ledger").tBodies[0].replaceChildren(textRow(["No unit has been released yet."]));
}

// --- reader keys and their quotas ------------------------------------------------------------
function quotaInput(value) {
  const input = document.createElement("input");
  Object.assign(input, { type: "number", min: "0", step: "1", value: value ?? "", placeholder: "no limit" });
  return input;
}

async function refreshReaders() {
  const { readers } = await call("GET", "/v1/readers");
  $("readers").tBodies[0].replaceChildren(...readers.map((r) => {
    const row = textRow([r.prefix + "…", r.created]);
    const releases = quotaInput(r.releases_per_day), tokens = quotaInput(r.tokens_per_day);
    row.insertCell().append(releases);
    row.insertCell().append(tokens);
    const limit = (input) => (input.value === "" ? null : Number(input.value));
    row.insertCell().append(button("save", () => attempt(async () => {
      await call("PUT", `/v1/readers/${encodeURIComponent(r.prefix)}/quota`,
                 { releases_per_day: limit(releases), tokens_per_day: limit(tokens) });
      await refreshReaders();
    })));
    return row;
  }));
  if (!readers.length) $("readers").tBodies[0].replaceChildren(textRow(["No reader keys: tokendp keys create --role reader."]));
}

$("documents-refresh").onclick = () => attempt(refreshDocuments);
$("ledger-refresh").onclick = () => attempt(refreshLedger);
$("readers-refresh").onclick = () => attempt(refreshReaders);

// Called once an owner key is identified.
export function showOwner() {
  return attempt(() => Promise.all([refreshDocuments(), refreshLedger(), refreshReaders()]));
}
