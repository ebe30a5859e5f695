// Calls to the daemon's API, with its bearer token when it asks for one.
//
// The token lives in sessionStorage (this tab only). A 401 opens the token form; every call
// waiting on it retries once the form is sent.

const TOKEN_KEY = "colony.api-token";

export class ApiError extends Error {
  constructor(status, error, detail, path) {
    super(detail || error || `HTTP ${status}`);
    this.status = status;
    this.error = error;
    this.detail = detail;
    this.path = path;
  }
}

export function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

export function authHeaders(extra = {}) {
  const token = storedToken();
  return token ? { ...extra, Authorization: `Bearer ${token}` } : { ...extra };
}

let asking = null;

/** Opens the token form (once, however many calls were refused) and waits for it. */
export function askForToken() {
  if (asking) return asking;
  const overlay = document.getElementById("token-overlay");
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  const problem = document.getElementById("token-problem");
  problem.hidden = !storedToken();
  overlay.hidden = false;
  input.value = "";
  input.focus();
  asking = new Promise((resolve) => {
    const sent = (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      try {
        sessionStorage.setItem(TOKEN_KEY, token);
      } catch {
        // storage refused (private mode): the token still works until the tab reloads
      }
      form.removeEventListener("submit", sent);
      overlay.hidden = true;
      asking = null;
      resolve(token);
    };
    form.addEventListener("submit", sent);
  });
  return asking;
}

function urlOf(path, params) {
  const url = new URL(path, window.location.origin);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") url.searchParams.set(key, String(value));
  }
  return url;
}

/** One call; resolves to the parsed JSON answer, rejects with an ApiError. */
export async function request(method, path, { params, body, signal } = {}) {
  const url = urlOf(path, params);
  for (;;) {
    const headers = authHeaders(body === undefined ? {} : { "Content-Type": "application/json" });
    const response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      signal,
    });
    if (response.status === 401) {
      await askForToken();
      continue;
    }
    let doc = null;
    try {
      doc = await response.json();
    } catch {
      doc = null;
    }
    if (!response.ok) {
      const error = doc && typeof doc.error === "string" ? doc.error : `http_${response.status}`;
      const detail = doc && typeof doc.detail === "string" ? doc.detail : response.statusText;
      // a 404 naming no route means this daemon lacks the endpoint; one naming an item is data
      const missingRoute = response.status === 404 && /^no route /.test(detail || "");
      throw new ApiError(response.status, missingRoute ? "no_route" : error, detail, path);
    }
    return doc;
  }
}

export const get = (path, params, signal) => request("GET", path, { params, signal });
export const post = (path, params, body) => request("POST", path, { params, body });

/** Whether an error means "this daemon does not serve that read" (shown as not available). */
export function notServed(err) {
  return err instanceof ApiError && (err.error === "no_route" || err.status === 501 || err.status === 405);
}
