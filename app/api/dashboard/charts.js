// The charts, as Vega-Lite specifications drawn by the vendored vega-embed (no network:
// every chart's data is inlined from the API's answers).

const views = new Map();

const COLORS = {
  spent: "#2f6fb0",
  limit: "#c9d6e3",
  charged: "#2f6fb0",
  refunded: "#c0392b",
  net: "#1b7f3b",
  pairs: "#2f6fb0",
  alone: "#8fb3d9",
  unmeasured: "#d98c1f",
};

const CONFIG = {
  font: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
  axis: { labelFontSize: 12, titleFontSize: 13, labelLimit: 220 },
  legend: { labelFontSize: 12, titleFontSize: 13, orient: "bottom" },
  view: { stroke: null },
};

// Draw `spec` into the element `id`, replacing what was there. Expressions are
// interpreted (`ast: true`), never compiled with `new Function`: no 'unsafe-eval'.
export async function draw(id, spec) {
  const element = document.getElementById(id);
  const previous = views.get(id);
  if (previous) previous.finalize();
  views.delete(id);
  element.replaceChildren();
  delete element.dataset.drawn;
  if (!spec) return null;
  const result = await window.vegaEmbed(
    element,
    { config: CONFIG, ...spec },
    {
      mode: "vega-lite",
      actions: false,
      renderer: "svg",
      ast: true,
      defaultStyle: false,
      tooltip: { disableDefaultStyle: true },
    },
  );
  views.set(id, result);
  element.dataset.drawn = "true";
  return result.view;
}

export function clearChart(id) {
  return draw(id, null);
}

// ---- budgets: spent against the limit, one bar per grant -----------------------------

export function budgetSpec(rows) {
  const data = rows.map((row) => ({
    who: row.who,
    spent: row.spent,
    limit: row.limit,
    label: `${row.spentText} of ${row.limitText}`,
  }));
  const y = { field: "who", type: "nominal", sort: null, title: null };
  return {
    description: "ρ spent against each limit",
    width: "container",
    height: Math.max(40, 34 * data.length),
    data: { values: data },
    encoding: { y },
    layer: [
      {
        mark: { type: "bar", color: COLORS.limit, height: 20 },
        encoding: {
          x: { field: "limit", type: "quantitative", title: "ρ (zCDP)" },
          tooltip: [
            { field: "who", title: "grant" },
            { field: "limit", title: "ρ limit", format: ".6~g" },
          ],
        },
      },
      {
        mark: { type: "bar", color: COLORS.spent, height: 12 },
        encoding: {
          x: { field: "spent", type: "quantitative" },
          tooltip: [
            { field: "who", title: "grant" },
            { field: "spent", title: "ρ spent", format: ".6~g" },
            { field: "limit", title: "ρ limit", format: ".6~g" },
          ],
        },
      },
      {
        mark: { type: "text", align: "left", dx: 4, fontSize: 12 },
        encoding: { x: { field: "limit", type: "quantitative" }, text: { field: "label" } },
      },
    ],
  };
}

// ---- the ledger: cumulative charges, refunds and what is spent net -------------------

export function ledgerPoints(entries) {
  let charged = 0;
  let refunded = 0;
  const points = [];
  for (const entry of entries) {
    if (entry.rho >= 0) charged += entry.rho;
    else refunded -= entry.rho;
    const time = entry.created_at;
    points.push({ time, series: "charged", rho: charged, line: entry.description });
    points.push({ time, series: "refunded", rho: refunded, line: entry.description });
    points.push({ time, series: "net spent", rho: charged - refunded, line: entry.description });
  }
  return { points, charged, refunded, net: charged - refunded };
}

export function ledgerSpec(points) {
  return {
    description: "Cumulative ρ charged, refunded and spent net over time",
    width: "container",
    height: 260,
    data: { values: points },
    mark: { type: "line", interpolate: "step-after", point: true, strokeWidth: 2 },
    encoding: {
      x: { field: "time", type: "temporal", title: "time (UTC)", axis: { format: "%b %d %H:%M:%S" } },
      y: { field: "rho", type: "quantitative", title: "cumulative ρ" },
      color: {
        field: "series",
        type: "nominal",
        title: null,
        scale: {
          domain: ["charged", "refunded", "net spent"],
          range: [COLORS.charged, COLORS.refunded, COLORS.net],
        },
      },
      strokeDash: {
        field: "series",
        type: "nominal",
        title: null,
        scale: { domain: ["charged", "refunded", "net spent"], range: [[1, 0], [4, 3], [1, 0]] },
      },
      tooltip: [
        { field: "time", type: "temporal", title: "time", format: "%Y-%m-%d %H:%M:%S" },
        { field: "series", title: "series" },
        { field: "rho", title: "cumulative ρ", format: ".6~g" },
        { field: "line", title: "line" },
      ],
    },
  };
}

// ---- the measured attribute sets as a graph over the attributes ----------------------

// Attributes on a circle; an edge joins two attributes that some measurement covers
// together (its width: how many); a node's colour says whether anything measured it.
export function attributeGraph(attributes, measuredSets) {
  const n = attributes.length;
  const position = new Map();
  attributes.forEach((name, i) => {
    const angle = (2 * Math.PI * i) / Math.max(n, 1) - Math.PI / 2;
    position.set(name, { x: Math.cos(angle), y: -Math.sin(angle) }); // the first on top
  });
  const pairs = new Map();
  const inPair = new Set();
  const alone = new Set();
  for (const set of measuredSets) {
    if (set.length === 1) alone.add(set[0]);
    for (let i = 0; i < set.length; i += 1) {
      for (let j = i + 1; j < set.length; j += 1) {
        const [a, b] = [set[i], set[j]].sort();
        const key = `${a}\u0000${b}`;
        pairs.set(key, { a, b, count: (pairs.get(key)?.count || 0) + 1 });
        inPair.add(a);
        inPair.add(b);
      }
    }
  }
  const nodes = attributes.map((name) => {
    const { x, y } = position.get(name);
    let status = "not measured";
    if (inPair.has(name)) status = "measured with others";
    else if (alone.has(name)) status = "measured alone";
    return {
      name,
      x,
      y,
      lx: x * 1.16,
      ly: y * 1.16,
      align: x > 0.2 ? "left" : x < -0.2 ? "right" : "center",
      status,
    };
  });
  const edges = [...pairs.values()].map(({ a, b, count }) => ({
    pair: `${a} × ${b}`,
    count,
    x: position.get(a).x,
    y: position.get(a).y,
    x2: position.get(b).x,
    y2: position.get(b).y,
  }));
  const unmeasured = nodes.filter((node) => node.status === "not measured").map((node) => node.name);
  return { nodes, edges, unmeasured };
}

export function graphSpec(graph) {
  const scale = { domain: [-1.55, 1.55] };
  const x = { field: "x", type: "quantitative", scale, axis: null };
  const y = { field: "y", type: "quantitative", scale, axis: null };
  return {
    description: "Attributes, joined where a measurement covers them together",
    width: 460,
    height: 460,
    layer: [
      {
        data: { values: graph.edges },
        mark: { type: "rule", color: COLORS.pairs, opacity: 0.6 },
        encoding: {
          x,
          y,
          x2: { field: "x2" },
          y2: { field: "y2" },
          strokeWidth: {
            field: "count",
            type: "quantitative",
            title: "measurements",
            scale: { range: [1.5, 7] },
            legend: graph.edges.length ? { format: "d", tickMinStep: 1 } : null,
          },
          tooltip: [
            { field: "pair", title: "measured together" },
            { field: "count", title: "measurements" },
          ],
        },
      },
      {
        data: { values: graph.nodes },
        mark: { type: "circle", size: 260, stroke: "#333", strokeWidth: 1, opacity: 1 },
        encoding: {
          x,
          y,
          color: {
            field: "status",
            type: "nominal",
            title: null,
            scale: {
              domain: ["measured with others", "measured alone", "not measured"],
              range: [COLORS.pairs, COLORS.alone, COLORS.unmeasured],
            },
          },
          tooltip: [
            { field: "name", title: "attribute" },
            { field: "status", title: "status" },
          ],
        },
      },
      // Labels outside the circle, anchored away from it (Vega-Lite has no `align`
      // channel: one layer per alignment).
      ...["left", "center", "right"].map((align) => ({
        data: { values: graph.nodes },
        transform: [{ filter: { field: "align", equal: align } }],
        mark: { type: "text", fontSize: 12, baseline: "middle", align },
        encoding: {
          x: { field: "lx", type: "quantitative", scale, axis: null },
          y: { field: "ly", type: "quantitative", scale, axis: null },
          text: { field: "name" },
        },
      })),
    ],
  };
}

// ---- marginals: a bar chart with error bars, or a heat map ---------------------------

export function marginalBarSpec(attribute, cells, hasErrors) {
  const xAxis = { labelAngle: cells.length > 12 ? -60 : 0 };
  const tooltip = [
    { field: "label", title: attribute },
    { field: "count", title: "count", format: ",.1f" },
  ];
  if (hasErrors) {
    tooltip.push({ field: "lo", title: "95% low", format: ",.1f" });
    tooltip.push({ field: "hi", title: "95% high", format: ",.1f" });
  }
  const layers = [
    {
      mark: { type: "bar", color: COLORS.spent },
      encoding: {
        x: { field: "label", type: "nominal", sort: null, title: attribute, axis: xAxis },
        y: { field: "count", type: "quantitative", title: "count (model)" },
        tooltip,
      },
    },
  ];
  if (hasErrors) {
    layers.push({
      mark: { type: "rule", color: "#222", strokeWidth: 1.5 },
      encoding: {
        x: { field: "label", type: "nominal", sort: null },
        y: { field: "lo", type: "quantitative" },
        y2: { field: "hi" },
        tooltip,
      },
    });
  }
  return {
    description: `Model counts over ${attribute}`,
    width: "container",
    height: 300,
    data: { values: cells },
    layer: layers,
  };
}

export function marginalHeatSpec(first, second, cells, hasErrors) {
  const tooltip = [
    { field: "a", title: first },
    { field: "b", title: second },
    { field: "count", title: "count", format: ",.1f" },
  ];
  if (hasErrors) tooltip.push({ field: "pm", title: "± (95%)", format: ",.1f" });
  const encoding = {
    x: { field: "a", type: "nominal", sort: null, title: first },
    y: { field: "b", type: "nominal", sort: null, title: second },
  };
  const layers = [
    {
      mark: { type: "rect", stroke: "#fff", strokeWidth: 0.5 },
      encoding: {
        color: { field: "count", type: "quantitative", title: "count", scale: { scheme: "blues" } },
        tooltip,
      },
    },
  ];
  if (cells.length <= 80) {
    layers.push({
      mark: { type: "text", fontSize: 11 },
      encoding: {
        text: { field: "count", type: "quantitative", format: ",.0f" },
        color: { condition: { test: "datum.dark", value: "#fff" }, value: "#111" },
      },
    });
  }
  return {
    description: `Model counts over ${first} and ${second}`,
    width: "container",
    height: Math.min(520, Math.max(160, 26 * new Set(cells.map((c) => c.b)).size)),
    data: { values: cells },
    encoding,
    layer: layers,
  };
}
