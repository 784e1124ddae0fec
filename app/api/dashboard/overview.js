// The first view: every dataset the key may read, with its budget and model version.
// Everything is composed from public routes: the admin's from GET /v1/datasets, each
// dataset's grants and GET /model; a tenant's from GET /v1/datasets, each /budget and
// /model.

import { get, getAll, getOr404 } from "./api.js";
import { budgetSpec, clearChart, draw } from "./charts.js";
import { byId, el, fillTable, formatCount, formatRho, formatTime, setText } from "./dom.js";
import { JobsTable } from "./jobs.js";

function datasetLink(dataset) {
  return el("a", { href: `#/datasets/${encodeURIComponent(dataset.id)}` }, dataset.name);
}

function purged(dataset) {
  return dataset.records_purged_at ? `purged ${formatTime(dataset.records_purged_at)}` : "kept";
}

async function modelVersion(datasetId) {
  const model = await getOr404(`v1/datasets/${encodeURIComponent(datasetId)}/model`, null);
  return model ? model.version : null;
}

export async function adminRows(datasets) {
  return Promise.all(
    datasets.map(async (dataset) => {
      const id = encodeURIComponent(dataset.id);
      const [grants, version] = await Promise.all([
        getAll(`v1/datasets/${id}/grants`),
        modelVersion(dataset.id),
      ]);
      const spent = grants.reduce((sum, grant) => sum + grant.rho_spent, 0);
      const granted = grants
        .filter((grant) => !grant.revoked_at)
        .reduce((sum, grant) => sum + grant.rho_limit, 0);
      return { dataset, grants, spent, granted, version };
    }),
  );
}

async function showAdmin() {
  const datasets = await getAll("v1/datasets");
  const rows = await adminRows(datasets);
  setText("overview-title", "Datasets");
  setText(
    "datasets-caption",
    `${datasets.length} dataset(s). ρ spent is net of refunds, over every grant (revoked ones too).`,
  );
  fillTable(
    byId("datasets-table"),
    [
      { label: "Dataset" },
      { label: "Rows", numeric: true },
      { label: "ρ total (cap)", numeric: true },
      { label: "ρ granted", numeric: true },
      { label: "ρ spent", numeric: true },
      { label: "Model version", numeric: true },
      { label: "Records" },
    ],
    rows.map(({ dataset, spent, granted, version }) => ({
      cells: [
        datasetLink(dataset),
        formatCount(dataset.rows),
        dataset.rho_total === undefined || dataset.rho_total === null ? "no cap" : formatRho(dataset.rho_total),
        formatRho(granted),
        formatRho(spent),
        version ?? "none",
        purged(dataset),
      ],
      attributes: { "data-dataset-id": dataset.id },
    })),
    "No datasets yet.",
  );
  const capped = rows.filter((row) => typeof row.dataset.rho_total === "number");
  const chartRows = capped.map((row) => ({
    who: row.dataset.name,
    spent: row.spent,
    limit: row.dataset.rho_total,
    spentText: formatRho(row.spent),
    limitText: `${formatRho(row.dataset.rho_total)} cap`,
  }));
  setText(
    "overview-budget-caption",
    chartRows.length
      ? "ρ spent on each dataset against its cap (datasets without a cap are left out)."
      : "",
  );
  await (chartRows.length ? draw("overview-budget-chart", budgetSpec(chartRows)) : clearChart("overview-budget-chart"));
  byId("overview-jobs").hidden = true;
  return null;
}

async function renderTenantDatasets(datasets) {
  const rows = await Promise.all(
    datasets.map(async (dataset) => {
      const id = encodeURIComponent(dataset.id);
      const [budget, version] = await Promise.all([get(`v1/datasets/${id}/budget`), modelVersion(dataset.id)]);
      return { dataset, budget, version };
    }),
  );
  setText("overview-title", "Your datasets");
  setText("datasets-caption", `${datasets.length} dataset(s) granted to you. ε is at δ = 10⁻⁶.`);
  fillTable(
    byId("datasets-table"),
    [
      { label: "Dataset" },
      { label: "ρ limit", numeric: true },
      { label: "ρ spent", numeric: true },
      { label: "ρ remaining", numeric: true },
      { label: "ε spent", numeric: true },
      { label: "Model version", numeric: true },
      { label: "Records" },
    ],
    rows.map(({ dataset, budget, version }) => ({
      cells: [
        datasetLink(dataset),
        formatRho(budget.rho_limit),
        formatRho(budget.rho_spent),
        formatRho(budget.rho_remaining),
        formatRho(budget.epsilon),
        version ?? "none",
        purged(dataset),
      ],
      attributes: { "data-dataset-id": dataset.id },
    })),
    "No dataset is granted to you yet.",
  );
  const chartRows = rows.map(({ dataset, budget }) => ({
    who: dataset.name,
    spent: budget.rho_spent,
    limit: budget.rho_limit,
    spentText: formatRho(budget.rho_spent),
    limitText: formatRho(budget.rho_limit),
  }));
  setText("overview-budget-caption", chartRows.length ? "ρ spent against your limit on each dataset." : "");
  await (chartRows.length ? draw("overview-budget-chart", budgetSpec(chartRows)) : clearChart("overview-budget-chart"));
}

async function showTenant() {
  const datasets = await getAll("v1/datasets");
  await renderTenantDatasets(datasets);
  byId("overview-jobs").hidden = false;
  const names = new Map(datasets.map((dataset) => [dataset.id, dataset.name]));
  // A job that appears or changes state may have charged, refunded or fitted a model.
  const jobs = new JobsTable(byId("overview-jobs-table"), {
    datasetNames: names,
    onSettled: () => renderTenantDatasets(datasets),
  });
  await jobs.start();
  return jobs;
}

// Show the overview for `role`; returns the jobs poller to stop on leaving (or null).
export function showOverview(role) {
  return role === "admin" ? showAdmin() : showTenant();
}
