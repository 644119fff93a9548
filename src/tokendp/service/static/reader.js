// The reader's view (docs/vault.md): the tenant's document ids and public titles, and a streamed
// rewrite of one at a chosen epsilon with its certificate. It fetches nothing else: a document's
// text, spans, subjects and the ledger are the owner's, and this view never asks for them.
import { call, failure, headers, stream } from "./api.js";
import { $, button, fmt, textRow } from "./dom.js";
import { renderGroups, runSummary } from "./report.js";

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
    if (result) showCertificate(result);
  } catch (err) {
    showError("The connection failed: " + err.message);
  } finally {
    $("catalog").classList.remove("busy");
  }
}

function showCertificate({ report, lifetime, cached }) {
  const epsilons = [...new Set(report.groups.map((g) => fmt(g.epsilon)))].join(", ");
  $("release-summary").textContent = report.groups.length
    ? `Each of the ${report.groups.length} units below (a person, or a kind of detail) is (ε ${epsilons}, δ ${report.delta})-DP ` +
      `in this release. ${cached ? "This rewrite was made before and is returned again: nothing more was spent." : ""}`
    : "This document has no private spans: the rewrite reads only public text.";
  $("release-lifetime").textContent = `Across every release of every document, each person is (ε ${lifetime.epsilon}, ` +
    `δ ${lifetime.delta})-DP for the vault's lifetime (RDP budget ${fmt(lifetime.budget)} at α ${lifetime.alpha}).`;
  renderGroups($("release-report"), report);
  $("release-guarantee").textContent = `${report.mechanism} on ${report.model}: ${runSummary(report)} ${report.guarantee}`;
}

$("catalog-refresh").onclick = refreshCatalog;

// Called once a reader key is identified.
export function showReader() {
  return refreshCatalog();
}
