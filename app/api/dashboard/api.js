// Calls to privq's public API with the signed-in key. Nothing here is privileged: the
// dashboard can do only what its key can do through the API.

const KEY_STORAGE = "privq.dashboard.key";
// A list route pages with `limit` (at most 1000) and a `Link: <…>; rel="next"` header.
const PAGE_LIMIT = 1000;
const MAX_PAGES = 50;

// The API sits beside the page: /dashboard → /, /prefix/dashboard → /prefix/.
const apiRoot = new URL(".", window.location.href);

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function storedKey() {
  return window.sessionStorage.getItem(KEY_STORAGE);
}

export function storeKey(key) {
  window.sessionStorage.setItem(KEY_STORAGE, key);
}

export function forgetKey() {
  window.sessionStorage.removeItem(KEY_STORAGE);
}

function urlOf(path, params) {
  const url = new URL(path, apiRoot);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
  }
  return url;
}

async function send(url, body) {
  const key = storedKey();
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  const options = { headers, credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    options.method = "POST";
    options.body = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(url, options);
  if (!response.ok) {
    let code = "http_error";
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body && body.error) {
        code = body.error.code || code;
        message = body.error.message || message;
      }
    } catch {
      // not JSON: keep the status line
    }
    throw new ApiError(response.status, code, message);
  }
  return response;
}

// One JSON document.
export async function get(path, params) {
  const response = await send(urlOf(path, params));
  return response.json();
}

// One JSON document answering a POST of `body` (free answers such as /queries only).
export async function post(path, body) {
  const response = await send(urlOf(path), body);
  return response.json();
}

// One JSON document, or `fallback` when the API says 404 (e.g. no model yet).
export async function getOr404(path, fallback, params) {
  try {
    return await get(path, params);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return fallback;
    throw error;
  }
}

function nextLink(header) {
  if (!header) return null;
  for (const part of header.split(",")) {
    const match = part.match(/<([^>]+)>\s*;\s*rel="?next"?/);
    if (match) return match[1];
  }
  return null;
}

// Every item of a paged list route, following its `Link: rel="next"` headers.
export async function getAll(path, params) {
  let url = urlOf(path, { limit: PAGE_LIMIT, ...params });
  const items = [];
  for (let page = 0; page < MAX_PAGES && url; page += 1) {
    const response = await send(url);
    items.push(...(await response.json()));
    const next = nextLink(response.headers.get("Link"));
    // Only links to this same service are followed.
    url = next ? new URL(next, url) : null;
    if (url && url.origin !== apiRoot.origin) url = null;
  }
  return items;
}

// Who the key belongs to: "admin" (it may list tenants) or "tenant" (403 there).
export async function whoAmI() {
  try {
    await get("v1/tenants", { limit: 1 });
    return "admin";
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) return "tenant";
    throw error;
  }
}
