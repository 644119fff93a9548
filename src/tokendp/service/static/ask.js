// The reader's questions (POST /v1/ask, docs/vault.md "Asking"): an answer from the documents the
// reader chooses, or from those retrieval finds in the documents' public versions, streamed, then
// its certificate and the ids of the documents it read.
import { failure, headers, stream } from "./api.js";
import { $ } from "./dom.js";
import { renderCertificate } from "./report.js";

function showError(message) { $("ask-error").textContent = message || ""; }

// The choice of documents follows the reader's list (ids and public titles only).
export function offerDocuments(documents) {
  $("ask-documents").replaceChildren(...documents.map((d) => new Option(d.title ? `${d.id}: ${d.title}` : d.id, d.id)));
}

$("ask-run").onclick = async () => {
  showError("");
  const chosen = [...$("ask-documents").selectedOptions].map((o) => o.value);
  const body = { question: $("ask-question").value, epsilon: Number($("ask-epsilon").value), stream: true };
  if (chosen.length) body.documents = chosen;
  if ($("ask-tokens").value) body.max_new_tokens = Number($("ask-tokens").value);
  for (const field of ["ask-output", "ask-read", "ask-summary", "ask-lifetime", "ask-guarantee"]) $(field).textContent = "";
  $("ask-report").tBodies[0].replaceChildren();
  $("ask-run").disabled = true;
  try {
    const response = await fetch("/v1/ask", { method: "POST", headers: headers({ Accept: "text/event-stream" }), body: JSON.stringify(body) });
    if (!response.ok) { showError(await failure(response)); return; }
    const result = await stream(response, $("ask-output"), showError);
    if (result) {
      $("ask-read").textContent = "Read: " + result.documents.join(", ");
      renderCertificate("ask", result);
    }
  } catch (err) {
    showError("The connection failed: " + err.message);
  } finally {
    $("ask-run").disabled = false;
  }
};
