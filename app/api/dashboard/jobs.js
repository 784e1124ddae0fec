// Jobs: a table with status and progress, polled while any job is queued or running.

import { get } from "./api.js";
import { el, fillTable, formatNumber, formatTime, shortId } from "./dom.js";

// While a job is queued or running the table is re-read this often; otherwise less
// often, so a job submitted elsewhere (a notebook, the CLI) still shows up.
export const LIVE_POLL_MS = 1500;
export const IDLE_POLL_MS = 5000;
const ACTIVE = new Set(["queued", "running"]);
export const SHOWN_JOBS = 100;

const COLUMNS = [
  { label: "Job" },
  { label: "Kind" },
  { label: "Status" },
  { label: "Progress" },
  { label: "Created (UTC)" },
  { label: "Finished (UTC)" },
  { label: "Model version", numeric: true },
];

// A job's progress as a <progress> bar where the job says how far it is, and its stage.
function progressCell(job) {
  const progress = job.progress || {};
  const stage = progress.stage || job.status;
  let fraction = null;
  if (job.status === "succeeded") fraction = 1;
  else if (typeof progress.rho_used === "number" && progress.rho_total > 0) {
    fraction = Math.min(1, progress.rho_used / progress.rho_total);
  }
  const parts = [];
  if (fraction !== null) {
    parts.push(
      el("progress", { max: "1", value: String(fraction), "aria-label": `job ${shortId(job.id)} progress` }),
      " ",
    );
  }
  let text = stage;
  if (typeof progress.iteration === "number" && job.status === "running") {
    text += `, iteration ${progress.iteration}`;
  }
  if (fraction !== null && job.status !== "succeeded") text += ` (${formatNumber(100 * fraction, 3)}%)`;
  if (typeof job.eta_seconds === "number" && job.status === "running") {
    const eta = job.eta_seconds;
    text += eta < 90 ? `, about ${Math.round(eta)} s left` : `, about ${Math.round(eta / 60)} min left`;
  }
  parts.push(el("span", {}, text));
  if (job.error) {
    const className = job.status === "failed" ? "error-text" : "note-text";
    parts.push(el("span", { className }, ` — ${job.error}`));
  }
  return el("span", { className: "progress-cell" }, parts);
}

function jobRow(job, showDataset, datasetNames) {
  const cells = [
    el("code", { title: job.id }, shortId(job.id)),
    job.kind,
    el("span", { className: `badge status-${job.status}` }, job.status),
    progressCell(job),
    formatTime(job.created_at),
    formatTime(job.finished_at),
    job.model_version ?? "—",
  ];
  if (showDataset) {
    cells.splice(1, 0, datasetNames.get(job.dataset_id) || shortId(job.dataset_id));
  }
  return { cells, attributes: { "data-job-id": job.id, "data-status": job.status } };
}

// Keeps one jobs table up to date; `onSettled` runs when a job appears or changes state
// (so budgets, ledger and model are re-read).
export class JobsTable {
  constructor(table, { datasetId, datasetNames, onSettled }) {
    this.table = table;
    this.datasetId = datasetId;
    this.datasetNames = datasetNames || new Map();
    this.onSettled = onSettled;
    this.active = new Set();
    this.signature = null;
    this.timer = null;
    this.stopped = false;
  }

  async refresh() {
    // The newest jobs only: one page, however long the service has run.
    const params = { limit: SHOWN_JOBS, dataset_id: this.datasetId };
    const jobs = await get("v1/jobs", params);
    if (this.stopped) return jobs;
    const showDataset = !this.datasetId;
    const columns = showDataset ? [COLUMNS[0], { label: "Dataset" }, ...COLUMNS.slice(1)] : COLUMNS;
    fillTable(
      this.table,
      columns,
      jobs.map((job) => jobRow(job, showDataset, this.datasetNames)),
      "No jobs.",
    );
    this.active = new Set(jobs.filter((job) => ACTIVE.has(job.status)).map((job) => job.id));
    // Any job that appeared or changed state may have charged, refunded or fitted.
    const signature = jobs.map((job) => `${job.id}:${job.status}`).join(",");
    const changed = this.signature !== null && signature !== this.signature;
    this.signature = signature;
    if (changed && this.onSettled) await this.onSettled();
    return jobs;
  }

  // Read now, then keep reading: fast while a job is active, slowly otherwise.
  async start() {
    await this.refresh();
    this.schedule();
  }

  schedule() {
    if (this.stopped) return;
    const delay = this.active.size > 0 ? LIVE_POLL_MS : IDLE_POLL_MS;
    this.timer = window.setTimeout(async () => {
      try {
        if (!document.hidden) await this.refresh(); // no polling from a tab nobody sees
      } catch {
        // a failed poll is retried at the next one
      }
      this.schedule();
    }, delay);
  }

  stop() {
    this.stopped = true;
    if (this.timer !== null) window.clearTimeout(this.timer);
  }
}
