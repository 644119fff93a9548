// Small DOM helpers shared by the page's panels. Text always goes in through textContent.
export const $ = (id) => document.getElementById(id);

export const fmt = (x) => (x === null || x === undefined ? "-" : Number(x).toPrecision(4));

const LABELS = ["PERSON", "DATE", "DURATION", "LOC", "ORG", "CODE", "DEM", "OCCUPATION", "QUANTITY", "MISC", "DATETIME"];

export function labelOptions(select, chosen) {
  select.replaceChildren(...LABELS.map((l) => new Option(l, l, false, l === chosen)));
}

// A table row of plain text cells; cells from index `numericFrom` on are right-aligned numbers.
export function textRow(values, numericFrom = Infinity) {
  const row = document.createElement("tr");
  values.forEach((v, i) => {
    const cell = row.insertCell();
    cell.textContent = v;
    if (i >= numericFrom) cell.className = "num";
  });
  return row;
}

export function button(text, onclick, className = "small") {
  const b = document.createElement("button");
  Object.assign(b, { textContent: text, className, onclick });
  return b;
}
