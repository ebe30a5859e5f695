// Dead letters: what could not be delivered (GET /colony/dead_letters), filtered by error code,
// each with its stored message (GET /colony/dead_letters/{id}), its trace, and a replay button
// (POST .../replay; a letter replayed before is replayed again only after a confirmation,
// with ?force=true). A replay links to the run it started.

import { get, notServed, post } from "./api.js";
import {
  badge, clear, fmtAgo, fmtWhen, h, jsonBlock, note, shortId, throttle, toMs,
} from "./dom.js";

export const title = () => "Dead letters";
export const stream = () => ({ kind: "dead_letter" });

const LIMIT = 200;

export function mount(view, ctx) {
  const state = {
    code: ctx.where.params.get("code") || "",
    rows: null,
    codes: new Set(),
    unavailable: false,
    error: null,
    open: new Set(),
    messages: new Map(),
    results: new Map(),
    fresh: new Set(),
    known: null,
  };
  if (state.code) state.codes.add(state.code);

  const select = h("select", { testid: "dl-filter-code", "aria-label": "error code" });
  const count = h("span", { class: "muted", testid: "dl-count" });
  const host = h("div", { testid: "dead-letters" });
  view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Dead letters"),
      h("p", { class: "muted" }, "Messages the colony could not deliver, kept with their body so they can be replayed once the cause is fixed.")),
    h("div", { class: "card" }, h("div", { class: "filters" }, select, h("span", { class: "spacer" }), count), host),
  );

  const fillCodes = () => {
    const codes = [...state.codes].sort();
    clear(select, h("option", { value: "" }, "any error code"),
      codes.map((c) => h("option", { value: c, selected: c === state.code }, c)));
  };

  const render = () => {
    fillCodes();
    count.textContent = state.rows ? `${state.rows.length}${state.rows.length === LIMIT ? "+" : ""} dead letter${state.rows.length === 1 ? "" : "s"}` : "";
    if (state.unavailable) return clear(host, note("Not available: this daemon does not serve GET /colony/dead_letters.", "empty", "dl-unavailable"));
    if (state.error && !state.rows) return clear(host, note(`The dead letters could not be read: ${state.error}`, "error", "dl-error"));
    if (!state.rows) return clear(host, note("Loading…", "empty", "dl-loading"));
    if (!state.rows.length) return clear(host, note(state.code ? `No dead letter with error code ${state.code}.` : "No dead letters. Every message found its way.", "empty", "dl-empty"));
    clear(host, h("div", { class: "dl-list" }, state.rows.map((row) => letter(row, state, actions))));
  };

  let generation = 0;
  async function load() {
    const mine = ++generation;
    try {
      const doc = await get("/colony/dead_letters", { limit: LIMIT, error_code: state.code }, ctx.signal);
      if (mine !== generation) return;
      const ids = new Set(doc.dead_letters.map((d) => d.id));
      state.fresh = state.known ? new Set([...ids].filter((id) => !state.known.has(id))) : new Set();
      state.known = ids;
      state.rows = doc.dead_letters.slice().sort((a, b) => b.id - a.id);
      for (const row of doc.dead_letters) state.codes.add(row.error_code);
      state.error = null;
    } catch (err) {
      if (ctx.signal.aborted || mine !== generation) return;
      if (notServed(err)) state.unavailable = true;
      else state.error = err.message;
    }
    render();
  }

  const actions = {
    async toggle(row) {
      if (state.open.has(row.id)) state.open.delete(row.id);
      else {
        state.open.add(row.id);
        if (!state.messages.has(row.id)) {
          render();
          try {
            const doc = await get(`/colony/dead_letters/${row.id}`, {}, ctx.signal);
            state.messages.set(row.id, { message: doc.dead_letter.message });
          } catch (err) {
            state.messages.set(row.id, { error: err.message });
          }
        }
      }
      render();
    },
    async replay(row) {
      let force = false;
      if (row.replayed_at !== null && row.replayed_at !== undefined) {
        if (!window.confirm(againQuestion(row))) return;
        force = true;
      }
      state.results.set(row.id, { pending: true });
      render();
      try {
        let result;
        try {
          result = await post(`/colony/dead_letters/${row.id}/replay`, force ? { force: "true" } : {});
        } catch (err) {
          // replayed meanwhile (another tab, the CLI): the same question, then force
          if (err.status !== 409 || force || !window.confirm(againQuestion(row))) throw err;
          result = await post(`/colony/dead_letters/${row.id}/replay`, { force: "true" });
        }
        state.results.set(row.id, { result });
      } catch (err) {
        if (err.status === 409) state.results.delete(row.id);
        else state.results.set(row.id, { error: err.message });
      }
      await load();
    },
  };

  select.addEventListener("change", () => {
    state.code = select.value;
    state.known = null;
    const hash = state.code ? `#/dead-letters?code=${encodeURIComponent(state.code)}` : "#/dead-letters";
    history.replaceState(null, "", hash);
    load();
  });

  const refresh = throttle(load, 500);
  ctx.onTeardown(() => refresh.cancel());
  ctx.onEvent(() => refresh());
  ctx.pollWhileOffline(4_000, load);
  load();
}

function againQuestion(row) {
  const when = row.replayed_at ? fmtWhen(toMs(row.replayed_at)) : "before";
  return `Dead letter #${row.id} was replayed already (${when}${row.replayed_as ? `, as message ${row.replayed_as}` : ""}).\n\nReplay it again?`;
}

function letter(row, state, actions) {
  const open = state.open.has(row.id);
  const outcome = state.results.get(row.id);
  const replayed = row.replayed_at !== null && row.replayed_at !== undefined;
  const created = row.at_ms ?? toMs(row.created_at);
  return h("article", { class: ["dl", state.fresh.has(row.id) && "fresh", replayed && "dl-was-replayed"], testid: "dead-letter", "data-id": row.id, "data-error-code": row.error_code },
    h("div", { class: "dl-head" },
      h("span", { class: "dl-x", "aria-hidden": "true" }, "✗"),
      badge(row.error_code, "bad", "dl-code"),
      h("span", { class: "muted mono" }, `#${row.id}`),
      h("span", { class: "muted", title: fmtWhen(created) }, fmtAgo(created)),
      replayed ? badge(`replayed ${fmtAgo(toMs(row.replayed_at))}`, "ok", "dl-replayed") : null,
      h("span", { class: "spacer" }),
      h("button", { type: "button", class: "ghost", onclick: () => actions.toggle(row), testid: "dl-toggle", "aria-expanded": String(open) }, open ? "Hide message" : "Show message"),
      h("a", { class: "button ghost", href: `#/trace/${encodeURIComponent(row.trace_id)}?m=${encodeURIComponent(row.message_id)}`, testid: "dl-trace-link" }, "Trace"),
      h("button", { type: "button", class: replayed ? "" : "primary", disabled: outcome?.pending, onclick: () => actions.replay(row), testid: "replay-button" }, replayed ? "Replay again" : "Replay")),
    h("div", { class: "dl-route" },
      h("span", { class: "path" }, row.sender_path), h("span", { class: "arrow" }, "→"),
      h("span", { class: "path strong" }, row.original_target),
      row.resolved_target && row.resolved_target !== row.original_target ? h("span", { class: "muted" }, ` (resolved ${row.resolved_target})`) : null),
    row.detail ? h("p", { class: "dl-detail" }, row.detail) : null,
    replayed && row.replayed_as ? h("p", { class: "muted small" }, "Replayed as message ", h("span", { class: "mono" }, shortId(row.replayed_as)), " · ",
      h("a", { href: `#/trace/${encodeURIComponent(row.trace_id)}?m=${encodeURIComponent(row.replayed_as)}` }, "open that run")) : null,
    outcome && !outcome.pending ? replayResult(outcome) : null,
    open ? storedMessage(state.messages.get(row.id)) : null);
}

function replayResult(outcome) {
  if (outcome.error) return h("p", { class: "error", testid: "replay-error" }, `Replay refused: ${outcome.error}`);
  const r = outcome.result;
  return h("p", { class: "replay-result", testid: "replay-result" }, "Replayed as message ",
    h("span", { class: "mono" }, shortId(r.message_id)), ". ",
    h("a", { href: `#/trace/${encodeURIComponent(r.trace_id)}?m=${encodeURIComponent(r.message_id)}`, testid: "replay-run-link" }, "Open the new run →"));
}

function storedMessage(entry) {
  if (!entry) return h("div", { class: "dl-message" }, note("Loading the stored message…", "empty"));
  if (entry.error) return h("div", { class: "dl-message" }, note(`The stored message could not be read: ${entry.error}`, "error"));
  const m = entry.message || {};
  const body = m.body !== undefined ? m.body : m.body_payload;
  return h("div", { class: "dl-message two", testid: "dl-message" },
    h("div", {}, h("h3", {}, "Headers"), jsonBlock(m.headers ?? null, "dl-headers"),
      h("p", { class: "muted small" }, `target ${m.target ?? "—"} · ttl ${m.ttl ?? "—"} · message ${m.id ?? "—"}`)),
    h("div", {}, h("h3", {}, "Body"), jsonBlock(body ?? null, "dl-body")));
}
