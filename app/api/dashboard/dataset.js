// One dataset: its budgets, ledger, jobs and measured attribute sets. The admin sees
// every grant and the whole ledger; a tenant its own budget and ledger lines (the API
// gives it nothing else).

import { get, getAll, getOr404 } from "./api.js";
import { attributeGraph, budgetSpec, clearChart, draw, graphSpec, ledgerPoints, ledgerSpec } from "./charts.js";
import { byId, clear, el, fillTable, formatCount, formatRho, formatTime, setText, shortId } from "./dom.js";
import { setUpExplorer } from "./explorer.js";
import { JobsTable } from "./jobs.js";

async function tenantNames() {
  const tenants = await getAll("v1/tenants");
  return new Map(tenants.map((tenant) => [tenant.id, tenant.name]));
}

async function showAdminBudgets(datasetId) {
  const [grants, names] = await Promise.all([
    getAll(`v1/datasets/${encodeURIComponent(datasetId)}/grants`),
    tenantNames(),
  ]);
  const who = (grant) => names.get(grant.tenant_id) || shortId(grant.tenant_id);
  setText("budgets-caption", `${grants.length} grant(s) on this dataset.`);
  fillTable(
    byId("budgets-table"),
    [
      { label: "Tenant" },
      { label: "ρ limit", numeric: true },
      { label: "ρ spent", numeric: true },
      { label: "ρ remaining", numeric: true },
      { label: "Granted (UTC)" },
      { label: "State" },
    ],
    grants.map((grant) => ({
      cells: [
        who(grant),
        formatRho(grant.rho_limit),
        formatRho(grant.rho_spent),
        formatRho(grant.rho_remaining),
        formatTime(grant.created_at),
        grant.revoked_at ? `revoked ${formatTime(grant.revoked_at)}` : "active",
      ],
      attributes: { "data-grant-id": grant.id, "data-tenant-id": grant.tenant_id },
    })),
    "No grants on this dataset.",
  );
  const rows = grants.map((grant) => ({
    who: who(grant) + (grant.revoked_at ? " (revoked)" : ""),
    spent: grant.rho_spent,
    limit: grant.rho_limit,
    spentText: formatRho(grant.rho_spent),
    limitText: formatRho(grant.rho_limit),
  }));
  setText("budget-chart-caption", rows.length ? "ρ spent (dark) against each grant's limit (light)." : "");
  await (rows.length ? draw("budget-chart", budgetSpec(rows)) : clearChart("budget-chart"));
  return names;
}

async function showTenantBudget(datasetId) {
  const budget = await get(`v1/datasets/${encodeURIComponent(datasetId)}/budget`);
  setText("budgets-caption", "Your grant on this dataset; ε at δ = 10⁻⁶.");
  fillTable(
    byId("budgets-table"),
    [
      { label: "Grant" },
      { label: "ρ limit", numeric: true },
      { label: "ρ spent", numeric: true },
      { label: "ρ remaining", numeric: true },
      { label: "ε spent", numeric: true },
      { label: "ε of the limit", numeric: true },
    ],
    [
      [
        "yours",
        formatRho(budget.rho_limit),
        formatRho(budget.rho_spent),
        formatRho(budget.rho_remaining),
        formatRho(budget.epsilon),
        formatRho(budget.epsilon_limit),
      ],
    ],
    "",
  );
  setText("budget-chart-caption", "ρ spent (dark) against your limit (light).");
  await draw(
    "budget-chart",
    budgetSpec([
      {
        who: "your grant",
        spent: budget.rho_spent,
        limit: budget.rho_limit,
        spentText: formatRho(budget.rho_spent),
        limitText: formatRho(budget.rho_limit),
      },
    ]),
  );
  return new Map();
}

async function showLedger(datasetId, role, names) {
  const entries = await getAll(`v1/datasets/${encodeURIComponent(datasetId)}/ledger`);
  const { points, charged, refunded, net } = ledgerPoints(entries);
  const charges = entries.filter((entry) => entry.rho >= 0).length;
  const whose = role === "admin" ? "All tenants'" : "Your";
  setText(
    "ledger-caption",
    entries.length
      ? `${whose} ledger: ${charges} charge(s) totalling ρ ${formatRho(charged)}, ` +
          `${entries.length - charges} refund(s) totalling ρ ${formatRho(refunded)}; ` +
          `ρ ${formatRho(net)} spent net.`
      : `${whose} ledger is empty: nothing charged yet.`,
  );
  byId("ledger-caption").dataset.net = String(net);
  const columns = [
    { label: "Time (UTC)" },
    { label: "Kind" },
    { label: "ρ", numeric: true },
    { label: "Job" },
    { label: "What" },
  ];
  if (role === "admin") columns.splice(1, 0, { label: "Tenant" });
  fillTable(
    byId("ledger-table"),
    columns,
    entries.map((entry) => {
      const cells = [
        formatTime(entry.created_at),
        entry.kind,
        formatRho(entry.rho),
        entry.job_id ? el("code", { title: entry.job_id }, shortId(entry.job_id)) : "—",
        entry.description,
      ];
      if (role === "admin") cells.splice(1, 0, names.get(entry.tenant_id) || shortId(entry.tenant_id));
      return { cells, attributes: { "data-ledger-id": entry.id } };
    }),
    "No ledger lines.",
  );
  await (points.length ? draw("ledger-chart", ledgerSpec(points)) : clearChart("ledger-chart"));
}

async function showGraph(dataset) {
  const model = await getOr404(`v1/datasets/${encodeURIComponent(dataset.id)}/model`, null);
  const attributes = dataset.attributes.map((attribute) => attribute.name);
  const measurements = model ? model.measurements : [];
  const graph = attributeGraph(
    attributes,
    measurements.map((m) => m.attributes),
  );
  const list = clear(byId("graph-sets"));
  if (!model) {
    setText("graph-caption", "No model yet: nothing has been measured on this dataset.");
    await clearChart("graph-chart");
    return null;
  }
  setText(
    "graph-caption",
    `Model version ${model.version} rests on ${measurements.length} measurement(s); ` +
      `a line joins attributes measured together. ` +
      (graph.unmeasured.length
        ? `Nothing measured ${graph.unmeasured.join(", ")}: the model gives them its maximum-entropy guess.`
        : "Every attribute is measured."),
  );
  const bySet = new Map();
  for (const m of measurements) {
    const key = m.attributes.join(" × ");
    const noise = m.noise === "gaussian" ? `σ ${formatRho(m.sigma)}` : `b ${formatRho(m.scale)}`;
    if (!bySet.has(key)) bySet.set(key, []);
    bySet.get(key).push(`${m.noise} ${noise}`);
  }
  for (const [key, noises] of bySet) {
    list.append(el("li", {}, el("strong", {}, key), ` — ${noises.length} measurement(s): ${noises.join("; ")}`));
  }
  list.append(
    el("li", {}, el("strong", {}, "model cliques"), ` — ${model.cliques.map((c) => c.join(" × ")).join("; ")}`),
  );
  await draw("graph-chart", graphSpec(graph));
  return model;
}

// Show dataset `datasetId`; returns the jobs poller to stop on leaving.
export async function showDataset(datasetId, role) {
  const dataset = await get(`v1/datasets/${encodeURIComponent(datasetId)}`);
  setText("dataset-title", dataset.name);
  const facts = [`${dataset.attributes.length} attributes`, `estimator ${dataset.estimator}`];
  if (typeof dataset.rows === "number") facts.unshift(`${formatCount(dataset.rows)} rows`);
  if (typeof dataset.rho_total === "number") facts.push(`ρ cap ${formatRho(dataset.rho_total)}`);
  facts.push(dataset.records_purged_at ? `records purged ${formatTime(dataset.records_purged_at)}` : "records kept");
  setText("dataset-summary", facts.join(" · "));

  const refresh = async () => {
    const names = role === "admin" ? await showAdminBudgets(datasetId) : await showTenantBudget(datasetId);
    await Promise.all([showLedger(datasetId, role, names), showGraph(dataset)]);
  };
  await refresh();
  setUpExplorer(dataset);
  const jobs = new JobsTable(byId("jobs-table"), { datasetId, onSettled: refresh });
  await jobs.start();
  return jobs;
}
