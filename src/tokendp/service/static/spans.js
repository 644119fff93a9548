// A text with its private spans highlighted by label: remove a span by clicking it or its row,
// add one by selecting text and choosing a label (and, in the vault, a subject).
import { labelOptions } from "./dom.js";

// Offsets. The server counts code points (Python str indices); JavaScript strings and the DOM count
// UTF-16 code units, two for every astral character (emoji, CJK Extension B). An editor's spans hold
// code units; they are converted where they cross the API: fromPoints for the server's spans,
// toPoints for the spans sent. Other fields of a span (a subject) travel unchanged.
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

export function fromPoints(text, spans) {
  const starts = pointStarts(text);
  return spans.map((s) => ({ ...s, start: starts[s.start], end: starts[s.end] }));
}

function toPoints(text, spans) {
  const starts = pointStarts(text);
  return spans.map((s) => ({ ...s, start: bisect(starts, s.start), end: bisect(starts, s.end) }));
}

// True if code unit i is the second half of a surrogate pair: a selection there splits a character.
const insidePair = (text, i) => i > 0 && text.codePointAt(i - 1) > 0xffff;

function snapOut(text, { start, end }) {  // widen a selection to whole characters, so that it never leaks half of one
  return { start: insidePair(text, start) ? start - 1 : start, end: insidePair(text, end) ? end + 1 : end };
}

export class SpanEditor {
  // view: where the text is shown; table: the spans' table (text, label, [subject,] remove); label: the
  // <select> for a new span; add: its button; subject: the <input> for a new span's subject, or null
  // where spans have no subject; onChange after every change; onError(message) for a bad selection.
  constructor({ view, table, label, add, subject = null, onChange = () => {}, onError = () => {} }) {
    Object.assign(this, { view, table, label, subject, onChange, onError, text: "", spans: [], selected: null });
    labelOptions(label, "PERSON");
    add.onclick = () => this.addSelection();
    // The last selection made in the view, kept while the label or the subject is chosen
    // (typing a subject moves the browser's selection into its input).
    document.addEventListener("selectionchange", () => {
      const sel = window.getSelection();
      if (sel.rangeCount && this.view.contains(sel.anchorNode)) this.selected = this.selection();
    });
  }

  load(text, spans) {  // spans in code units
    this.text = text;
    this.spans = spans;
    this.selected = null;
    this.render();
  }

  setText(text) {  // a new text drops the spans found for the old one
    if (text !== this.text) { this.text = text; this.spans = []; this.selected = null; }
    this.render();
  }

  pointSpans() {
    return toPoints(this.text, this.spans);
  }

  remove(i) {
    this.spans.splice(i, 1);
    this.render();
  }

  render() {
    this.view.replaceChildren();
    let at = 0;
    this.spans.sort((a, b) => a.start - b.start).forEach((s, i) => {
      this.view.append(document.createTextNode(this.text.slice(at, s.start)));
      const mark = document.createElement("mark");
      mark.className = "l-" + s.label;
      mark.dataset.label = s.label;
      mark.dataset.index = i;
      mark.textContent = this.text.slice(s.start, s.end);
      mark.title = (s.subject ? `subject ${s.subject}; ` : "") + "click to remove";
      mark.onclick = () => this.remove(i);
      this.view.append(mark);
      at = s.end;
    });
    this.view.append(document.createTextNode(this.text.slice(at)));
    this.renderTable();
    this.onChange();
  }

  renderTable() {
    const body = this.table.tBodies[0];
    body.replaceChildren(...this.spans.map((s, i) => {
      const row = document.createElement("tr");
      row.insertCell().textContent = this.text.slice(s.start, s.end);
      const select = document.createElement("select");
      labelOptions(select, s.label);
      select.onchange = () => { s.label = select.value; this.render(); };
      row.insertCell().append(select);
      if (this.subject) {
        const subject = document.createElement("input");
        Object.assign(subject, { value: s.subject ?? "", placeholder: "the document's", maxLength: 200 });
        subject.onchange = () => { if (subject.value.trim()) s.subject = subject.value.trim(); else delete s.subject; this.render(); };
        row.insertCell().append(subject);
      }
      const remove = document.createElement("button");
      Object.assign(remove, { textContent: "remove", className: "small", onclick: () => this.remove(i) });
      row.insertCell().append(remove);
      return row;
    }));
  }

  selection() {  // the selected part of the view, in code units, or null
    const sel = window.getSelection();
    if (!sel.rangeCount || sel.isCollapsed || !this.view.contains(sel.anchorNode) || !this.view.contains(sel.focusNode)) return null;
    const range = sel.getRangeAt(0);
    const before = document.createRange();
    before.setStart(this.view, 0);
    before.setEnd(range.startContainer, range.startOffset);
    const start = before.toString().length;
    return snapOut(this.text, { start, end: start + range.toString().length });
  }

  addSelection() {
    const where = this.selection() ?? this.selected;
    this.selected = null;
    if (!where) { this.onError("Select some text in the document view first."); return; }
    const span = { ...where, label: this.label.value };
    const subject = this.subject?.value.trim();
    if (subject) span.subject = subject;
    this.spans = this.spans.filter((s) => s.end <= where.start || s.start >= where.end);
    this.spans.push(span);
    this.onError("");
    this.render();
  }
}
