// Small DOM helpers. Text from the API is always set as text, never parsed as HTML.

export function byId(id) {
  return document.getElementById(id);
}

// An element with attributes and children (strings become text nodes).
export function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "className") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

export function setText(id, text) {
  byId(id).textContent = text;
}

// Fill a table: `columns` are {label, numeric?}; `rows` are arrays of cells (strings,
// numbers or nodes). The first cell of each row is its header cell.
export function fillTable(table, columns, rows, emptyText) {
  const head = clear(table.tHead || table.createTHead());
  head.append(
    el("tr", {}, columns.map((c) => el("th", { scope: "col", className: c.numeric ? "num" : "" }, c.label))),
  );
  const body = clear(table.tBodies[0] || table.createTBody());
  if (rows.length === 0) {
    body.append(el("tr", {}, el("td", { colspan: columns.length, className: "empty" }, emptyText)));
    return;
  }
  for (const row of rows) {
    const cells = row.cells || row;
    const tr = el("tr", row.attributes || {});
    cells.forEach((cell, index) => {
      const tag = index === 0 ? "th" : "td";
      const attrs = { className: columns[index].numeric ? "num" : "" };
      if (index === 0) attrs.scope = "row";
      tr.append(el(tag, attrs, cell));
    });
    body.append(tr);
  }
}

// ---- numbers and dates as people read them -------------------------------------------

export function formatRho(value) {
  if (value === null || value === undefined) return "—";
  if (value === 0) return "0";
  return String(Number(value.toPrecision(6)));
}

export function formatCount(value) {
  if (value === null || value === undefined) return "—";
  return Math.round(value).toLocaleString("en-US");
}

export function formatNumber(value, digits = 4) {
  if (value === null || value === undefined) return "—";
  return String(Number(value.toPrecision(digits)));
}

export function formatTime(text) {
  if (!text) return "—";
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) return text;
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function shortId(id) {
  return id ? id.slice(0, 8) : "—";
}
