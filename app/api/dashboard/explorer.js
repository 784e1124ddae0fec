// The marginal explorer: one attribute as a bar chart, two as a heat map, from
// GET /marginals (free: answered from the model, nothing charged).

import { ApiError, get, post } from "./api.js";
import { clearChart, draw, marginalBarSpec, marginalHeatSpec } from "./charts.js";
import { byId, clear, el, fillTable, formatNumber, setText } from "./dom.js";

// A 95% interval for a cell: ± 1.96 standard errors (the noise is close to normal
// once several cells' noise is summed; the API's `error_bound` is the rigorous L1 one).
const Z95 = 1.96;
const NONE = "";

let current = null;

const NUMBERS = new Set(["numeric", "integer"]);

function option(value, text) {
  return el("option", { value }, text);
}

function fillSelects(dataset) {
  const names = dataset.attributes.map((attribute) => attribute.name);
  const first = clear(byId("explorer-first"));
  const second = clear(byId("explorer-second"));
  names.forEach((name) => first.append(option(name, name)));
  second.append(option(NONE, "— none —"));
  names.forEach((name) => second.append(option(name, name)));
}

function caption(marginal, hasErrors) {
  const parts = [`Model version ${marginal.model_version}.`];
  if (hasErrors) {
    parts.push(
      `Measured by ${marginal.covered_by} measurement(s): each count ± ${formatNumber(Z95 * marginal.standard_error)} ` +
        `(1.96 standard errors of ${formatNumber(marginal.standard_error)}).`,
    );
  } else {
    parts.push("No measurement covers these attributes together: the counts are the model's inference, without error bars.");
  }
  if (marginal.error_bound) {
    const bound = marginal.error_bound;
    parts.push(
      `With ${Math.round(100 * bound.confidence)}% confidence the counts are within ${formatNumber(bound.l1)} in total (L1, ${bound.method}).`,
    );
  }
  if (marginal.note) parts.push(marginal.note);
  return parts.join(" ");
}

async function show(dataset) {
  const firstName = byId("explorer-first").value;
  const secondName = byId("explorer-second").value;
  setText("explorer-error", "");
  if (secondName && secondName === firstName) {
    setText("explorer-error", "Pick two different attributes, or no second one.");
    return;
  }
  const attrs = secondName ? [firstName, secondName] : [firstName];
  let marginal;
  try {
    marginal = await get(`v1/datasets/${encodeURIComponent(dataset.id)}/marginals`, { attrs: attrs.join(",") });
  } catch (error) {
    const message = error instanceof ApiError && error.code === "no_model"
      ? "No model yet: nothing has been measured on this dataset."
      : error.message;
    setText("explorer-error", message);
    setText("explorer-caption", "");
    byId("explorer-details").hidden = true;
    byId("explorer-averages").hidden = true;
    await clearChart("explorer-chart");
    return;
  }
  const hasErrors = typeof marginal.standard_error === "number";
  const pm = hasErrors ? Z95 * marginal.standard_error : 0;
  const labels = marginal.values.map((cell) => cell.map((label) => (label === null ? "(missing)" : String(label))));
  const counts = marginal.counts;
  const table = byId("explorer-table");
  if (attrs.length === 1) {
    const cells = labels.map((cell, i) => ({
      label: cell[0],
      count: counts[i],
      lo: Math.max(0, counts[i] - pm),
      hi: counts[i] + pm,
    }));
    await draw("explorer-chart", marginalBarSpec(firstName, cells, hasErrors));
  } else {
    const max = Math.max(...counts, 0);
    const cells = labels.map((cell, i) => ({
      a: cell[0],
      b: cell[1],
      count: counts[i],
      pm,
      dark: counts[i] > 0.6 * max,
    }));
    await draw("explorer-chart", marginalHeatSpec(firstName, secondName, cells, hasErrors));
  }
  const columns = [...attrs.map((name) => ({ label: name })), { label: "Count", numeric: true }];
  if (hasErrors) columns.push({ label: "± (95%)", numeric: true });
  fillTable(
    table,
    columns,
    labels.map((cell, i) => {
      const row = [...cell, formatNumber(counts[i], 6)];
      if (hasErrors) row.push(formatNumber(pm, 6));
      return row;
    }),
    "No cells.",
  );
  byId("explorer-details").hidden = false;
  setText("explorer-caption", caption(marginal, hasErrors));
  await showAverages(dataset, attrs, labels, counts);
  byId("explorer-chart").dataset.attrs = attrs.join(",");
}

// The first attribute's average (per value of the second, if any) from POST /queries
// `moments`, with the bounds its bins' edges allow and how the estimate was made.
// Records without a value of the first attribute are left out of the average.
async function showAverages(dataset, attrs, labels, counts) {
  const section = byId("explorer-averages");
  const [first, second] = attrs;
  const attribute = dataset.attributes.find((a) => a.name === first);
  if (!attribute || !NUMBERS.has(attribute.type)) {
    section.hidden = true;
    return;
  }
  const query = { moments: { [first]: 1 } };
  if (second) query.by = { [second]: "value" };
  let answer;
  try {
    const body = await post(`v1/datasets/${encodeURIComponent(dataset.id)}/queries`, { queries: [query] });
    answer = body.answers[0];
  } catch (error) {
    section.hidden = true;
    setText("explorer-error", error.message);
    return;
  }
  // Records with a value of `first`, per group (the marginal's cells; `first` is axis 0).
  const present = new Map();
  labels.forEach((cell, i) => {
    if (cell[0] === "(missing)") return;
    const group = second ? cell[1] : "";
    present.set(group, (present.get(group) || 0) + counts[i]);
  });
  const rows = answer.values.map((sum, i) => {
    const group = second ? (answer.labels[i][0] === null ? "(missing)" : String(answer.labels[i][0])) : "all records";
    const n = present.get(second ? group : "") || 0;
    const [low, high] = answer.bounds[i];
    const shown = (value) => (n > 0 ? formatNumber(value / n, 6) : "—");
    return [group, shown(sum), `${shown(low)} … ${shown(high)}`];
  });
  const method = answer.estimates[first];
  fillTable(
    byId("explorer-averages-table"),
    [{ label: second || "" }, { label: `Average ${first}`, numeric: true }, { label: "Bounds", numeric: true }],
    rows,
    "No records.",
  );
  setText(
    "explorer-averages-caption",
    `Estimate: ${method} (${method === "exact" ? "each code is one value" : "each record counted at its bin's representative value"}); ` +
      "the bounds are what the bins' edges allow given the model's counts.",
  );
  section.hidden = false;
}

export function setUpExplorer(dataset) {
  fillSelects(dataset);
  setText("explorer-error", "");
  setText("explorer-caption", "");
  byId("explorer-details").hidden = true;
  byId("explorer-averages").hidden = true;
  clearChart("explorer-chart");
  current = dataset;
}

export function installExplorer() {
  byId("explorer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (current) show(current);
  });
}
