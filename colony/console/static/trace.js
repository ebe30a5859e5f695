// One run (#/trace/<id>): a waterfall of the cells' handling times and the tree of hops, each
// with its headers and body, the edges that fired, the LLM call it made, its error, and a ✗
// where a message died as a dead letter. While the run is in flight the page follows its
// events (GET /colony/events?trace_id=<id>) and reads the trace again.

import { get, notServed } from "./api.js";
import {
  badge, card, clear, fmtClock, fmtInt, fmtMs, h, isNum, jsonBlock, note, outcomeBadge, shortId,
  throttle, toMs,
} from "./dom.js";

export const title = (where) => `Trace ${shortId(where.id)}`;
export const stream = (where) => ({ trace_id: where.id });

const LIMIT = 1000;
const FOLDED_ROWS = 20;

export function mount(view, ctx) {
  const id = ctx.where.id;
  const focus = ctx.where.params.get("m");
  const state = { doc: null, error: null, missing: false, run: null, edges: new Map(), open: new Set(focus ? [focus] : []), busy: new Map() };
  const head = h("div", { class: "page-head" });
  const body = h("div", { testid: "trace" });
  view.append(head, body);

  const render = () => {
    const model = state.doc ? modelOf(state) : null;
    clear(head,
      h("a", { href: "#/runs", class: "back" }, "← Runs"),
      h("h1", {}, "Trace ", h("span", { class: "mono", testid: "trace-id" }, id)),
      model ? summary(model, state) : null);
    if (state.error && !state.doc) {
      clear(body, note(`The trace could not be read: ${state.error}`, "error", "trace-error"));
    } else if (!state.doc) {
      clear(body, note("Loading…", "empty", "trace-loading"));
    } else if (!model.hops.length && !model.dead.length) {
      clear(body, note("No hop of this trace is recorded (yet). It shows up here as soon as one is.", "empty", "trace-empty"));
    } else {
      const orphans = model.dead.filter((d) => !model.hops.some((hp) => hp.id === d.message_id));
      clear(body,
        card("Timeline", h("span", { class: "muted" }, "when each cell handled a message"), waterfall(model, state, render)),
        orphans.length ? card("Died before a hop was logged", null, deadList(orphans)) : null,
        model.hops.length ? card("Hops", h("span", { class: "muted" }, `${model.hops.length} routing decisions; click one for its headers and body`),
          hopTree(model, state)) : null);
      if (focus && !state.scrolled) {
        const el = body.querySelector(`[data-message-id="${CSS.escape(focus)}"]`);
        if (el) { el.scrollIntoView({ block: "center" }); el.classList.add("focus"); state.scrolled = true; }
      }
    }
  };

  let generation = 0;
  async function load() {
    const mine = ++generation;
    try {
      const [doc, runs] = await Promise.all([
        get("/colony/trace", { trace_id: id, limit: LIMIT }, ctx.signal),
        get("/colony/runs", { limit: LIMIT }, ctx.signal).catch(() => null),
      ]);
      if (mine !== generation) return;
      state.doc = doc;
      state.run = runs?.runs?.find((r) => r.trace_id === id) || null;
      // a handling the record holds is over, even when its handle_end event was missed
      for (const row of doc.handling || []) state.busy.delete(row.message_id);
      state.error = null;
    } catch (err) {
      if (ctx.signal.aborted || mine !== generation) return;
      state.error = notServed(err) ? "this daemon does not serve GET /colony/trace" : err.message;
    }
    render();
  }

  async function loadEdges() {
    try {
      const doc = await get("/colony/graph", {}, ctx.signal);
      // a hop names the edges that fired by ref (<hive>#<index>); older daemons by id
      for (const e of doc.graph.edges) {
        state.edges.set(e.id, e);
        if (e.ref) state.edges.set(e.ref, e);
      }
      if (state.doc) render();
    } catch {
      // the edges are then named by id only
    }
  }

  const refresh = throttle(load, 400);
  ctx.onTeardown(() => refresh.cancel());
  ctx.onEvent((kind, data) => {
    if (kind === "handle_start") state.busy.set(data.message_id, data);
    if (kind === "handle_end") state.busy.delete(data.message_id);
    refresh();
  });
  ctx.pollWhileOffline(2_000, load);
  ctx.every(1_000, () => { if (state.busy.size || state.run?.outcome === "in_flight") render(); });
  body.addEventListener("toggle", (event) => {
    const el = event.target;
    if (el.dataset?.messageId) (el.open ? state.open.add(el.dataset.messageId) : state.open.delete(el.dataset.messageId));
  }, true);
  load();
  loadEdges();
}

/** The trace as the page shows it: hops in order, handling and dead letters by message. */
function modelOf(state) {
  const doc = state.doc;
  const hops = (doc.trace || []).map((row) => ({ ...row, at: isNum(row.at_ms) ? row.at_ms : toMs(row.created_at) }));
  const handling = (doc.handling || []).slice().sort((a, b) => a.started_ms - b.started_ms);
  const dead = doc.dead_letters || [];
  const byMessage = new Map();
  for (const row of handling) {
    const list = byMessage.get(row.message_id) || [];
    list.push(row);
    byMessage.set(row.message_id, list);
  }
  const deadBy = new Map(dead.map((d) => [d.message_id, d]));
  for (const d of dead) d.at = d.at_ms ?? hops.find((hp) => hp.id === d.message_id)?.at ?? toMs(d.created_at);
  const times = [...hops.map((hp) => hp.at), ...handling.map((r) => r.started_ms), ...dead.map((d) => d.at)].filter(isNum);
  const ends = [...hops.map((hp) => hp.at), ...handling.map((r) => r.started_ms + (r.duration_ms || 0)), ...dead.map((d) => d.at)].filter(isNum);
  const running = [...state.busy.values()];
  for (const r of running) if (isNum(r.at_ms)) ends.push(Date.now());
  const t0 = times.length ? Math.min(...times) : null;
  const t1 = ends.length ? Math.max(...ends) : null;
  const llm = handling.filter((r) => r.model);
  const sum = (key) => llm.reduce((n, r) => n + (isNum(r[key]) ? r[key] : 0), 0);
  const outcome = state.run?.outcome || (dead.length ? "dead_lettered" : running.length ? "in_flight" : null);
  return {
    hops, handling, dead, byMessage, deadBy, t0, t1, running, outcome,
    hasHandling: Array.isArray(doc.handling),
    llmCalls: llm.length,
    tokensPrompt: sum("tokens_prompt"),
    tokensCompletion: sum("tokens_completion"),
  };
}

function summary(m, state) {
  const entry = m.hops[0]?.to_path;
  const duration = isNum(m.t0) && isNum(m.t1) ? m.t1 - m.t0 : null;
  const item = (label, value, testid) => h("div", { class: "fact", testid }, h("span", { class: "fact-label" }, label), h("span", { class: "fact-value" }, value));
  return h("div", { class: "facts", testid: "trace-summary" },
    m.outcome ? item("Outcome", outcomeBadge(m.outcome, "trace-outcome")) : null,
    item("Entry", h("span", { class: "path" }, entry || "—")),
    item("Started", fmtClock(m.t0)),
    item("Duration", fmtMs(state.run?.duration_ms ?? duration), "trace-duration"),
    item("Hops", fmtInt(m.hops.length), "trace-hops"),
    item("LLM calls", m.hasHandling ? fmtInt(m.llmCalls) : "—"),
    item("Tokens", m.hasHandling ? `${fmtInt(m.tokensPrompt)} → ${fmtInt(m.tokensCompletion)}` : "—"),
    item("Dead letters", fmtInt(m.dead.length), "trace-dead-letters"),
  );
}

// -- the waterfall ---------------------------------------------------------------------------

function waterfall(m, state, render) {
  if (!m.hasHandling) return note("Not available: this daemon records no handling times (GET /colony/trace has no \"handling\").", "empty", "waterfall-unavailable");
  const span = Math.max(1, (m.t1 ?? 0) - (m.t0 ?? 0));
  const at = (t) => `${(100 * (t - m.t0)) / span}%`;
  const wide = (d) => `${Math.max(0.3, (100 * d) / span)}%`;
  const rows = [];
  // routing decisions and deaths on one lane
  rows.push(h("div", { class: "wf-row wf-lane" },
    h("div", { class: "wf-label muted" }, "routing"),
    h("div", { class: "wf-track" },
      m.hops.filter((hp) => isNum(hp.at)).map((hp) => h("span", {
        class: "wf-tick",
        style: { left: at(hp.at) },
        title: `+${fmtMs(hp.at - m.t0)}: ${hp.from_path} → ${hp.to_path}`,
      })),
      m.dead.filter((d) => isNum(d.at)).map((d) => h("span", {
        class: "wf-dead",
        style: { left: at(d.at) },
        title: `+${fmtMs(d.at - m.t0)}: dead letter ${d.error_code} (${d.sender_path} → ${d.original_target})`,
        testid: "wf-dead-letter",
      }, "✗")))));
  const folded = !state.unfolded && m.handling.length > FOLDED_ROWS + 4;
  for (const r of folded ? m.handling.slice(0, FOLDED_ROWS) : m.handling) {
    const llm = r.model ? `${r.model} · ${fmtMs(r.llm_latency_ms)} · ${fmtInt(r.tokens_prompt)} → ${fmtInt(r.tokens_completion)} tokens` : null;
    const tip = [`${r.cell} (${r.cell_type})`, `started +${fmtMs(r.started_ms - m.t0)}, took ${fmtMs(r.duration_ms)}`, `outcome: ${r.outcome}`, llm, r.error].filter(Boolean).join("\n");
    rows.push(h("div", { class: "wf-row", testid: "handling-row", "data-cell": r.cell, "data-message-id": r.message_id },
      h("div", { class: "wf-label path", title: r.cell }, r.cell),
      h("div", { class: "wf-track", title: tip },
        h("span", { class: ["wf-bar", `wf-${r.outcome}`, r.model && "wf-llm"], style: { left: at(r.started_ms), width: wide(r.duration_ms || 0) } }),
        h("span", { class: "wf-text", style: { left: at(r.started_ms + (r.duration_ms || 0)) } },
          h("span", { testid: "handling-duration" }, fmtMs(r.duration_ms)),
          r.model ? h("span", { class: "muted" }, ` · ${r.model}`) : null,
          r.outcome !== "ok" ? h("span", { class: "bad-text" }, ` · ${r.outcome}`) : null))));
  }
  for (const r of m.running) {
    rows.push(h("div", { class: "wf-row", testid: "handling-row-running" },
      h("div", { class: "wf-label path" }, r.cell),
      h("div", { class: "wf-track" },
        h("span", { class: "wf-bar wf-running", style: { left: at(r.at_ms), width: wide(Date.now() - r.at_ms) } }),
        h("span", { class: "wf-text", style: { left: at(Date.now()) } }, "running…"))));
  }
  if (folded) {
    const rest = m.handling.slice(FOLDED_ROWS);
    const llm = rest.filter((r) => r.model).length;
    rows.push(h("div", { class: "wf-row" }, h("div", {}),
      h("div", {}, h("button", { type: "button", class: "ghost", testid: "waterfall-more", onclick: () => { state.unfolded = true; render(); } },
        `Show ${rest.length} more handlings${llm ? ` (${llm} LLM call${llm === 1 ? "" : "s"})` : ""}`))));
  }
  return h("div", { class: "waterfall", testid: "waterfall" }, axis(span), rows);
}

function axis(span) {
  const step = niceStep(span / 5);
  const ticks = [];
  for (let t = 0; t <= span + 0.5; t += step) ticks.push(t);
  return h("div", { class: "wf-row wf-axis" }, h("div", { class: "wf-label" }),
    h("div", { class: "wf-track" }, ticks.map((t) => h("span", { class: "wf-axis-tick", style: { left: `${(100 * t) / span}%` } }, t ? fmtMs(t) : "0"))));
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 0.001)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

// -- the hop tree ----------------------------------------------------------------------------

function hopTree(m, state) {
  const ids = new Set(m.hops.map((hp) => hp.id));
  const children = new Map();
  const roots = [];
  for (const hp of m.hops) {
    if (hp.parent_message_id && ids.has(hp.parent_message_id)) {
      const list = children.get(hp.parent_message_id) || [];
      list.push(hp);
      children.set(hp.parent_message_id, list);
    } else roots.push(hp);
  }
  const list = h("ol", { class: "hops", testid: "hops" });
  // A chain continues at the same depth; only a fork indents (a run is mostly a chain).
  const walk = (hp, depth) => {
    list.append(hopRow(hp, depth, m, state));
    const next = children.get(hp.id) || [];
    next.forEach((child) => walk(child, next.length > 1 ? depth + 1 : depth));
  };
  roots.forEach((root) => walk(root, 0));
  return list;
}

function hopRow(hp, depth, m, state) {
  const handled = m.byMessage.get(hp.id) || [];
  const died = m.deadBy.get(hp.id);
  const running = m.running.find((r) => r.message_id === hp.id);
  const details = h("details", { class: ["hop", died && "hop-dead"], "data-message-id": hp.id, open: state.open.has(hp.id) },
    h("summary", {},
      h("span", { class: "hop-at mono", title: fmtClock(hp.at) }, isNum(hp.at) && isNum(m.t0) ? (hp.at > m.t0 ? `+${fmtMs(hp.at - m.t0)}` : "0") : ""),
      h("span", { class: "hop-route" },
        h("span", { class: "path" }, hp.from_path), h("span", { class: "arrow" }, "→"),
        h("span", { class: "path strong", testid: "hop-to" }, hp.to_path)),
      h("span", { class: "chip", title: "TTL left" }, `ttl ${hp.ttl}`),
      (hp.edges || []).map((eid) => edgeChip(eid, state.edges.get(eid))),
      handled.map((r) => handlingChip(r)),
      running ? badge("handling…", "live", "hop-running") : null,
      died ? h("span", { class: "dead-mark", testid: "hop-dead-letter", title: died.detail || "" }, `✗ ${died.error_code}`) : null),
    h("div", { class: "hop-body" },
      died ? h("p", { class: "error" }, `Dead letter #${died.id}: ${died.error_code}${died.detail ? ` — ${died.detail}` : ""} `,
        h("a", { href: `#/dead-letters?code=${encodeURIComponent(died.error_code)}` }, "see dead letters")) : null,
      handled.filter((r) => r.error).map((r) => h("p", { class: "error", testid: "hop-error" }, `${r.cell}: ${r.error}`)),
      h("div", { class: "kv" },
        kv("message", hp.id), kv("parent", hp.parent_message_id), kv("correlation", hp.correlation_id),
        kv("reply to", hp.reply_to), kv("at", fmtClock(hp.at))),
      h("div", { class: "two" },
        h("div", {}, h("h3", {}, "Headers"), jsonBlock(hp.headers ?? null, "hop-headers")),
        h("div", {}, h("h3", {}, "Body"), jsonBlock(hp.body ?? null, "hop-body")))));
  details.style.setProperty("--depth", depth);
  return h("li", { testid: "hop", "data-message-id": hp.id }, details);
}

function deadList(letters) {
  return h("ul", { class: "dead-list" }, letters.map((d) => h("li", { testid: "trace-dead-letter" },
    h("span", { class: "dead-mark" }, `✗ ${d.error_code}`), " ",
    h("span", { class: "path" }, d.sender_path), h("span", { class: "arrow" }, "→"),
    h("span", { class: "path strong" }, d.original_target),
    d.detail ? h("span", { class: "muted" }, ` — ${d.detail}`) : null, " ",
    h("a", { href: `#/dead-letters?code=${encodeURIComponent(d.error_code)}` }, `dead letter #${d.id}`))));
}

function kv(key, value) {
  if (value === null || value === undefined || value === "") return null;
  return h("span", {}, h("span", { class: "muted" }, `${key} `), h("span", { class: "mono" }, value));
}

function edgeChip(id, edge) {
  if (!edge) return h("span", { class: "chip chip-edge", title: `edge ${id}` }, "edge");
  const tip = `edge ${edge.from} → ${edge.to}${edge.condition ? `\nwhen ${edge.condition}` : ""}`;
  return h("span", { class: "chip chip-edge", title: tip, testid: "hop-edge" }, `⇢ ${edge.to}`);
}

function handlingChip(r) {
  const bad = r.outcome !== "ok";
  const parts = [h("span", { testid: "hop-duration" }, fmtMs(r.duration_ms))];
  if (r.model) parts.push(` · ${r.model} · ${fmtInt(r.tokens_prompt)} → ${fmtInt(r.tokens_completion)} tok`);
  if (bad) parts.push(` · ${r.outcome}`);
  const tip = r.model ? `LLM call: ${r.model}, ${fmtMs(r.llm_latency_ms)}, ${fmtInt(r.tokens_prompt)} prompt + ${fmtInt(r.tokens_completion)} completion tokens` : `handled by ${r.cell} in ${fmtMs(r.duration_ms)}`;
  return h("span", { class: ["chip", r.model ? "chip-llm" : "chip-time", bad && "chip-bad"], title: tip, testid: "hop-handling" }, parts);
}

