// The dashboard's entry point: sign in, then show the view the address names.
//   #/                 the datasets (the admin: all; a tenant: its own, and its jobs)
//   #/datasets/{id}    one dataset: budgets, ledger, jobs, measured sets, explorer

import { ApiError, forgetKey, storedKey, storeKey, whoAmI } from "./api.js";
import { showDataset } from "./dataset.js";
import { byId, setText } from "./dom.js";
import { installExplorer } from "./explorer.js";
import { showOverview } from "./overview.js";

const SECTIONS = ["sign-in", "overview", "dataset"];

let role = null;
let poller = null;
let shown = 0; // which navigation is current: a slow view must not overwrite a newer one

function showOnly(section) {
  for (const id of SECTIONS) byId(id).hidden = id !== section;
}

function stopPolling() {
  if (poller) poller.stop();
  poller = null;
}

function signedOut(message) {
  stopPolling();
  role = null;
  forgetKey();
  showOnly("sign-in");
  setText("who", "Not signed in");
  byId("sign-out").hidden = true;
  setText("sign-in-error", message || "");
  document.body.dataset.role = "";
  byId("api-key").focus();
}

async function route() {
  if (!role) return;
  const navigation = ++shown;
  stopPolling();
  const match = window.location.hash.match(/^#\/datasets\/([^/]+)$/);
  setText("status", "Loading…");
  document.body.dataset.ready = "";
  try {
    const section = match ? "dataset" : "overview";
    showOnly(section);
    const started = match
      ? await showDataset(decodeURIComponent(match[1]), role)
      : await showOverview(role);
    if (navigation !== shown) {
      if (started) started.stop();
      return;
    }
    poller = started;
    setText("status", "");
    document.body.dataset.ready = section;
    const heading = byId(match ? "dataset-title" : "overview-title");
    heading.setAttribute("tabindex", "-1");
    heading.focus({ preventScroll: true });
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      signedOut(`Signed out: ${error.message}`);
      return;
    }
    setText("status", `Could not load this view: ${error.message}`);
  }
}

async function signIn(key) {
  storeKey(key);
  try {
    role = await whoAmI();
  } catch (error) {
    signedOut(error instanceof ApiError ? `Not signed in: ${error.message}` : String(error));
    return;
  }
  setText("who", role === "admin" ? "Signed in as the admin" : "Signed in as a tenant");
  byId("sign-out").hidden = false;
  document.body.dataset.role = role;
  setText("sign-in-error", "");
  await route();
}

function start() {
  byId("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = byId("api-key");
    const key = input.value.trim();
    input.value = "";
    if (key) signIn(key);
  });
  byId("sign-out").addEventListener("click", () => {
    window.location.hash = "#/";
    signedOut("");
  });
  window.addEventListener("hashchange", route);
  installExplorer();
  const key = storedKey();
  if (key) signIn(key);
  else signedOut("");
}

start();
