// A release's certificate: a table with one row per privacy group (a label, or a unit of the
// vault), and, for the vault's releases, the guarantee in words.
import { $, fmt, textRow } from "./dom.js";

export function renderGroups(table, report) {
  table.tBodies[0].replaceChildren(...report.groups.map((g) => textRow([g.label, g.n_spans, g.n_tokens, fmt(g.beta), fmt(g.epsilon)], 1)));
}

export function runSummary(report) {
  return `α ${report.alpha}, δ ${report.delta}, T ${report.max_new_tokens} (${report.tokens_generated} generated, ${report.stop_reason}).`;
}

// A vault release (a rewrite or an answer) into the elements `${prefix}-summary`, -report, -lifetime, -guarantee.
export function renderCertificate(prefix, { report, lifetime, cached }) {
  const epsilons = [...new Set(report.groups.map((g) => fmt(g.epsilon)))].join(", ");
  $(`${prefix}-summary`).textContent = report.groups.length
    ? `Each of the ${report.groups.length} units below (a person, or a kind of detail) is (ε ${epsilons}, δ ${report.delta})-DP ` +
      `in this release. ${cached ? "This rewrite was made before and is returned again: nothing more was spent." : ""}`
    : "No private spans were read: this release reads only public text.";
  $(`${prefix}-lifetime`).textContent = `Across every release of every document, each person is (ε ${lifetime.epsilon}, ` +
    `δ ${lifetime.delta})-DP for the vault's lifetime (RDP budget ${fmt(lifetime.budget)} at α ${lifetime.alpha}).`;
  renderGroups($(`${prefix}-report`), report);
  $(`${prefix}-guarantee`).textContent = `${report.mechanism} on ${report.model}: ${runSummary(report)} ${report.guarantee}`;
}
