// Runs: the recent traces (GET /colony/runs), newest first, filtered by outcome, cell prefix
// and trace id text. A run that starts (a route event with no parent message) appears
// without a reload; runs in flight are read again as their events arrive.

import { get, notServed } from "./api.js";
import {
  clear, fmtInt, fmtMs, fmtWhen, h, isNum, note, outcomeBadge, shortId, throttle,
} from "./dom.js";

export const title = () => "Runs";
export const stream = () => ({ kind: "route,handle_end,dead_letter" });

const ROWS = 100;
const OUTCOMES = [["", "any outcome"], ["answered", "answered"], ["dead_lettered", "dead-lettered"], ["in_flight", "in flight"]];

export function mount(view, ctx) {
  const params = ctx.where.params;
  const filters = {
    outcome: params.get("outcome") || "",
    cell_prefix: params.get("cell") || "",
    text: params.get("q") || "",
  };
  const state = { runs: null, unavailable: false, error: null, known: null, fresh: new Set() };

  const outcome = h("select", { testid: "runs-filter-outcome", "aria-label": "outcome" },
    OUTCOMES.map(([value, label]) => h("option", { value, selected: value === filters.outcome }, label)));
  const prefix = h("input", { type: "search", placeholder: "cell prefix, e.g. /planner", value: filters.cell_prefix, testid: "runs-filter-cell", "aria-label": "cell prefix" });
  const text = h("input", { type: "search", placeholder: "trace id contains…", value: filters.text, testid: "runs-filter-trace", "aria-label": "trace id" });
  const count = h("span", { class: "muted", testid: "runs-count" });
  const host = h("div", { testid: "runs" });

  view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Runs"),
      h("p", { class: "muted" }, "Each run is one trace: a message from outside and every hop it caused.")),
    h("div", { class: "card" },
      h("div", { class: "filters" }, outcome, prefix, text, h("span", { class: "spacer" }), count),
      host),
  );

  const keepInHash = () => {
    const q = new URLSearchParams();
    if (filters.outcome) q.set("outcome", filters.outcome);
    if (filters.cell_prefix) q.set("cell", filters.cell_prefix);
    if (filters.text) q.set("q", filters.text);
    const hash = `#/runs${q.toString() ? `?${q}` : ""}`;
    if (window.location.hash !== hash) history.replaceState(null, "", hash);
  };

  const render = () => {
    const shown = (state.runs || []).filter((r) => !filters.text || r.trace_id.toLowerCase().includes(filters.text.toLowerCase()));
    count.textContent = state.runs ? `${shown.length} run${shown.length === 1 ? "" : "s"}` : "";
    clear(host, table(state, shown));
  };

  let generation = 0;
  async function load() {
    const mine = ++generation;
    try {
      const doc = await get("/colony/runs", {
        limit: ROWS,
        outcome: filters.outcome,
        cell_prefix: filters.cell_prefix.trim(),
      }, ctx.signal);
      if (mine !== generation) return;
      const ids = new Set(doc.runs.map((r) => r.trace_id));
      state.fresh = state.known ? new Set([...ids].filter((id) => !state.known.has(id))) : new Set();
      state.known = ids;
      state.runs = doc.runs;
      state.error = null;
      state.unavailable = false;
    } catch (err) {
      if (ctx.signal.aborted || mine !== generation) return;
      if (notServed(err)) state.unavailable = true;
      else state.error = err.message;
    }
    render();
  }

  const refresh = throttle(load, 600);
  ctx.onTeardown(() => refresh.cancel());
  const refilter = () => {
    filters.outcome = outcome.value;
    filters.cell_prefix = prefix.value;
    filters.text = text.value.trim();
    keepInHash();
    state.known = null; // a new filter shows no row as new
    load();
  };
  outcome.addEventListener("change", refilter);
  prefix.addEventListener("input", throttle(refilter, 300));
  text.addEventListener("input", () => { filters.text = text.value.trim(); keepInHash(); render(); });

  ctx.onEvent((kind, data) => {
    const started = kind === "route" && !data.parent_message_id;
    const inFlight = (state.runs || []).some((r) => r.trace_id === data.trace_id && r.outcome === "in_flight");
    if (started || inFlight || kind === "dead_letter") refresh();
  });
  ctx.pollWhileOffline(3_000, load);
  ctx.every(1_000, () => tickDurations(host));
  load();
}

function table(state, runs) {
  if (state.unavailable) return note("Not available: this daemon does not serve GET /colony/runs.", "empty", "runs-unavailable");
  if (state.error && !state.runs) return note(`The runs could not be read: ${state.error}`, "error", "runs-error");
  if (!state.runs) return note("Loading…", "empty", "runs-loading");
  if (!runs.length) return note(state.runs.length ? "No run matches the trace id." : "No runs yet. Send a message and it shows up here.", "empty", "runs-empty");
  return h("table", { class: "table clickable", testid: "runs-table" },
    h("thead", {}, h("tr", {},
      h("th", {}, "Started"), h("th", {}, "Trace"), h("th", {}, "Entry"),
      h("th", { class: "num" }, "Duration"), h("th", { class: "num" }, "Hops"),
      h("th", { class: "num" }, "LLM calls"), h("th", { class: "num", title: "prompt + completion tokens" }, "Tokens"),
      h("th", {}, "Outcome"))),
    h("tbody", {}, runs.map((r) => row(r, state.fresh.has(r.trace_id)))));
}

function row(run, fresh) {
  const href = `#/trace/${encodeURIComponent(run.trace_id)}`;
  const tokens = isNum(run.tokens_prompt) || isNum(run.tokens_completion)
    ? (run.tokens_prompt || 0) + (run.tokens_completion || 0) : null;
  const inFlight = run.outcome === "in_flight";
  const tr = h("tr", { testid: "run-row", "data-trace-id": run.trace_id, "data-outcome": run.outcome, class: fresh && "fresh" },
    h("td", { class: "nowrap" }, fmtWhen(run.started_ms)),
    h("td", { class: "mono" }, h("a", { href, testid: "run-link", title: run.trace_id }, shortId(run.trace_id))),
    h("td", { class: "path" }, run.entry || "—"),
    h("td", { class: "num", testid: "run-duration", "data-since": inFlight && isNum(run.started_ms) ? run.started_ms : null },
      inFlight && isNum(run.started_ms) ? fmtMs(Date.now() - run.started_ms) : fmtMs(run.duration_ms)),
    h("td", { class: "num" }, fmtInt(run.hops)),
    h("td", { class: "num" }, fmtInt(run.llm_calls)),
    h("td", { class: "num", title: isNum(tokens) ? `${fmtInt(run.tokens_prompt)} prompt + ${fmtInt(run.tokens_completion)} completion` : null }, fmtInt(tokens)),
    h("td", {}, outcomeBadge(run.outcome, "run-outcome"),
      run.dead_letters > 0 ? h("span", { class: "muted small" }, ` ${run.dead_letters} ✗`) : null),
  );
  tr.addEventListener("click", (event) => {
    if (!(event.target instanceof HTMLAnchorElement)) window.location.hash = href;
  });
  return tr;
}

function tickDurations(host) {
  for (const cell of host.querySelectorAll("td[data-since]")) {
    cell.textContent = fmtMs(Date.now() - Number(cell.dataset.since));
  }
}
