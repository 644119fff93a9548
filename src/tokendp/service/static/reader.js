// The reader's view (docs/vault.md): the tenant's document ids and public titles, and a streamed
// rewrite of one at a chosen epsilon with its certificate (questions: ask.js). It fetches nothing else: a document's
// text, spans, subjects and the ledger are the owner's, and this view never asks for them.
import { call, failure, headers, stream } from "./api.js";
import { offerDocuments } from "./ask.js";
import { $, button, textRow } from "./dom.js";
import { renderCertificate } from "./report.js";

function showError(message) { $("reader-error").textContent = message || ""; }

async function refreshCatalog() {
  let documents;
  try { ({ documents } = await call("GET", "/v1/documents")); } catch (err) { showError(err.message); return; }
  $("catalog").tBodies[0].replaceChildren(...documents.map((d) => {
    const row = textRow([d.id, d.title]);
    row.insertCell().append(button("rewrite", () => rewrite(d.id)));
    return row;
  }));
  if (!documents.length) $("catalog").tBodies[0].replaceChildren(textRow(["No documents have been released to readers yet."]));
  offerDocuments(documents);
}

async function rewrite(id) {
  showError("");
  const params = new URLSearchParams({ epsilon: $("release-epsilon").value, stream: "true" });
  if ($("release-tokens").value) params.set("max_new_tokens", $("release-tokens").value);
  $("release-id").textContent = id;
  for (const field of ["release-output", "release-summary", "release-lifetime", "release-guarantee"]) $(field).textContent = "";
  $("release-report").tBodies[0].replaceChildren();
  $("catalog").classList.add("busy");
  try {
    const response = await fetch(`/v1/documents/${encodeURIComponent(id)}/rewrite?${params}`,
                                 { headers: headers({ Accept: "text/event-stream" }) });
    if (!response.ok) { showError(await failure(response)); return; }
    const result = await stream(response, $("release-output"), showError);
    if (result) renderCertificate("release", result);
  } catch (err) {
    showError("The connection failed: " + err.message);
  } finally {
    $("catalog").classList.remove("busy");
  }
}

$("catalog-refresh").onclick = refreshCatalog;

// Called once a reader key is identified.
export function showReader() {
  return refreshCatalog();
}
