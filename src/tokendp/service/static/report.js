// A release's certificate as a table: one row per privacy group (a label, or a unit of the vault).
import { fmt, textRow } from "./dom.js";

export function renderGroups(table, report) {
  table.tBodies[0].replaceChildren(...report.groups.map((g) => textRow([g.label, g.n_spans, g.n_tokens, fmt(g.beta), fmt(g.epsilon)], 1)));
}

export function runSummary(report) {
  return `α ${report.alpha}, δ ${report.delta}, T ${report.max_new_tokens} (${report.tokens_generated} generated, ${report.stop_reason}).`;
}
