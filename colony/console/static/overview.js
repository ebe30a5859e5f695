// Overview: the cells (GET /colony/registry) and the colony's pace (GET /colony/stats), kept
// current by the event stream: routing decisions and dead letters are counted as they happen,
// and the registry is read again when cells start or finish handling.

import { get, notServed } from "./api.js";
import {
  badge, card, clear, fmtInt, fmtRate, fmtUptime, h, isNum, note, s, throttle,
} from "./dom.js";

export const title = () => "Overview";
export const stream = () => ({ kind: "route,handle_start,handle_end,dead_letter" });

const BUCKET_S = 10;
const WINDOW_S = 600;
const STATE_KIND = { awake: "ok", asleep: "neutral", not_yet_spawned: "neutral", failed: "bad", stopped: "warn" };

export function mount(view, ctx) {
  const stats = { base: null, unavailable: false, error: null, live: new Map(), liveDecisions: 0, liveDead: 0 };
  const cells = { rows: null, unavailable: false, error: null, flash: new Map() };

  const statsHost = h("div", { class: "stat-row", testid: "stats" });
  const chartHost = h("div", { class: "chart-host", testid: "activity-chart" });
  const cellsHost = h("div", { testid: "cells" });
  view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Overview"),
      h("p", { class: "muted" }, "What this colony is doing now: its cells and the pace of its routing.")),
    statsHost,
    card("Decisions and dead letters, last 10 minutes", h("span", { class: "legend" },
      h("span", { class: "key key-decisions" }), "decisions",
      h("span", { class: "key key-dead" }), "dead letters"), chartHost),
    card("Cells", h("span", { class: "muted", testid: "cells-count" }), cellsHost),
  );

  const renderStats = () => {
    clear(statsHost, statCards(stats, cells));
    clear(chartHost, stats.unavailable
      ? note("Not available: this daemon does not serve GET /colony/stats.", "empty", "stats-unavailable")
      : chart(seriesOf(stats), chartHost.clientWidth));
  };
  const renderCells = () => {
    view.querySelector("[data-testid=cells-count]").textContent = cells.rows ? `${cells.rows.length} cells` : "";
    clear(cellsHost, cellsTable(cells));
  };

  async function loadStats() {
    try {
      const doc = await get("/colony/stats", {}, ctx.signal);
      stats.base = doc.stats || doc;
      stats.live.clear();
      stats.liveDecisions = stats.liveDead = 0;
      stats.error = null;
    } catch (err) {
      if (ctx.signal.aborted) return;
      if (notServed(err)) stats.unavailable = true;
      else stats.error = err.message;
    }
    renderStats();
  }

  async function loadCells() {
    try {
      const doc = await get("/colony/registry", { limit: 1000 }, ctx.signal);
      cells.rows = doc.registry.slice().sort((a, b) => a.path.localeCompare(b.path));
      cells.error = null;
    } catch (err) {
      if (ctx.signal.aborted) return;
      if (notServed(err)) cells.unavailable = true;
      else cells.error = err.message;
    }
    renderCells();
    renderStats();
  }

  const refreshCells = throttle(loadCells, 700);
  const redrawStats = throttle(renderStats, 500);
  const refreshStats = throttle(loadStats, 1500); // the daemon's exact counts, soon after
  ctx.onTeardown(() => { refreshCells.cancel(); redrawStats.cancel(); refreshStats.cancel(); });

  ctx.onEvent((kind, data) => {
    if (kind === "route" || kind === "dead_letter") {
      const at = Math.floor((isNum(data.at_ms) ? data.at_ms : Date.now()) / 1000 / BUCKET_S) * BUCKET_S;
      const bucket = stats.live.get(at) || { decisions: 0, dead_letters: 0 };
      if (kind === "route") { bucket.decisions += 1; stats.liveDecisions += 1; }
      else { bucket.dead_letters += 1; stats.liveDead += 1; }
      stats.live.set(at, bucket);
      redrawStats();
      refreshStats();
    }
    if (kind === "handle_start" || kind === "handle_end") {
      if (data.cell) flashRow(cellsHost, data.cell, kind === "handle_end" && data.outcome && data.outcome !== "ok");
      refreshCells();
    }
  });

  loadStats();
  loadCells();
  ctx.every(10_000, loadStats);
  ctx.every(3_000, () => { if (!document.hidden) loadCells(); });
  ctx.every(1_000, redrawStats); // the window slides even when nothing happens
}

function flashRow(host, path, bad) {
  const row = host.querySelector(`tr[data-path="${CSS.escape(path)}"]`);
  if (!row) return;
  row.classList.remove("flash", "flash-bad");
  void row.offsetWidth; // restart the animation
  row.classList.add(bad ? "flash-bad" : "flash");
}

/** The 10-second buckets of the last ten minutes: the server's series plus live counts. */
function seriesOf(stats) {
  const now = Math.floor(Date.now() / 1000 / BUCKET_S) * BUCKET_S;
  const byStart = new Map();
  for (const b of stats.base?.series || []) byStart.set(b.at_s, { decisions: b.decisions, dead_letters: b.dead_letters });
  for (const [at, b] of stats.live) {
    const into = byStart.get(at) || { decisions: 0, dead_letters: 0 };
    byStart.set(at, { decisions: into.decisions + b.decisions, dead_letters: into.dead_letters + b.dead_letters });
  }
  const out = [];
  for (let at = now - WINDOW_S + BUCKET_S; at <= now; at += BUCKET_S) {
    out.push({ at_s: at, ...(byStart.get(at) || { decisions: 0, dead_letters: 0 }) });
  }
  return out;
}

function statCards(stats, cells) {
  const base = stats.base;
  const series = seriesOf(stats);
  const lastMinute = series.slice(-6);
  const perSecond = lastMinute.reduce((n, b) => n + b.decisions, 0) / 60;
  const deadRecent = series.reduce((n, b) => n + b.dead_letters, 0);
  const rows = cells.rows || [];
  const busy = rows.reduce((n, r) => n + (isNum(r.busy) ? r.busy : 0), 0);
  const failed = rows.filter((r) => r.lifecycle_status === "failed").length;
  const decisions = base ? base.decisions + stats.liveDecisions : null;
  const dead = base ? base.dead_letters + stats.liveDead : null;
  return [
    stat("Decisions / s", fmtRate(base ? perSecond : null), "over the last minute", "stat-rate"),
    stat("Decisions", fmtInt(decisions), base ? `since the daemon started, ${fmtUptime(base.uptime_s)} ago` : unavailableText(stats), "stat-decisions"),
    stat("Dead letters", fmtInt(dead), base ? `${fmtInt(deadRecent)} in the last 10 min` : "", "stat-dead-letters", dead > 0 ? "bad" : null),
    stat("Cells", fmtInt(cells.rows ? rows.length : null), cells.rows ? `${fmtInt(busy)} busy · ${fmtInt(failed)} failed` : "", "stat-cells", failed ? "bad" : null),
  ];
}

function unavailableText(stats) {
  if (stats.unavailable) return "not available";
  return stats.error ? `unreadable: ${stats.error}` : "loading…";
}

function stat(label, value, sub, testid, kind) {
  return h("div", { class: ["card", "stat", kind && `stat-${kind}`], testid },
    h("div", { class: "stat-label" }, label),
    h("div", { class: "stat-value", testid: `${testid}-value` }, value),
    h("div", { class: "stat-sub" }, sub));
}

/** Bars per 10-second bucket, drawn at the width it is shown at (its text stays its size). */
function chart(series, width) {
  const W = Math.max(480, width || 960);
  const H = 170;
  const pad = { l: 34, r: 8, t: 10, b: 22 };
  const max = Math.max(4, ...series.map((b) => b.decisions), ...series.map((b) => b.dead_letters));
  const top = niceCeil(max);
  const bw = (W - pad.l - pad.r) / series.length;
  const y = (v) => pad.t + (H - pad.t - pad.b) * (1 - v / top);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "decisions and dead letters per 10 seconds" });
  for (const v of [0, top / 2, top]) {
    svg.append(s("line", { x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: pad.l - 6, y: y(v) + 4, class: "axis", "text-anchor": "end" }, fmtInt(v)));
  }
  series.forEach((b, i) => {
    const x = pad.l + i * bw;
    const when = new Date(b.at_s * 1000).toLocaleTimeString();
    const g = s("g", {}, s("title", {}, `${when}: ${b.decisions} decisions, ${b.dead_letters} dead letters`));
    g.append(s("rect", { x: x + 1, width: Math.max(1, bw - 2), y: pad.t, height: H - pad.t - pad.b, class: "hover" }));
    if (b.decisions) g.append(s("rect", { x: x + 1, width: Math.max(1, bw - 2), y: y(b.decisions), height: y(0) - y(b.decisions), class: "bar", rx: 1.5 }));
    if (b.dead_letters) g.append(s("rect", { x: x + bw * 0.25, width: Math.max(1, bw * 0.5), y: y(b.dead_letters), height: y(0) - y(b.dead_letters), class: "bar-dead", rx: 1.5 }));
    svg.append(g);
  });
  for (const [i, label] of [[0, "10 min ago"], [series.length / 2, "5 min"], [series.length - 1, "now"]]) {
    svg.append(s("text", { x: pad.l + i * bw + (i ? bw / 2 : 0), y: H - 6, class: "axis", "text-anchor": i ? (i === series.length - 1 ? "end" : "middle") : "start" }, label));
  }
  return svg;
}

function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function cellsTable(cells) {
  if (cells.unavailable) return note("Not available: this daemon does not serve GET /colony/registry.", "empty", "cells-unavailable");
  if (cells.error && !cells.rows) return note(`The registry could not be read: ${cells.error}`, "error", "cells-error");
  if (!cells.rows) return note("Loading…", "empty", "cells-loading");
  if (!cells.rows.length) return note("This colony has no cells.", "empty", "cells-empty");
  const num = (v) => h("td", { class: "num" }, fmtInt(v));
  return h("table", { class: "table", testid: "cells-table" },
    h("thead", {}, h("tr", {},
      h("th", {}, "Cell"), h("th", {}, "Type"), h("th", {}, "State"),
      h("th", { class: "num", title: "messages waiting in the cell's mailbox" }, "Mailbox"),
      h("th", { class: "num", title: "messages being handled now" }, "Busy"),
      h("th", { class: "num", title: "messages handled since this daemon started" }, "Handled"),
      h("th", { class: "num", title: "handlings that ended in an error, a crash, a timeout or a refusal" }, "Failed"))),
    h("tbody", {}, cells.rows.map((r) => h("tr", { testid: "cell-row", "data-path": r.path },
      h("td", { class: "path", testid: "cell-path" }, pathLabel(r.path)),
      h("td", {}, h("span", { class: "type" }, r.cell_type)),
      h("td", {}, badge((r.lifecycle_status || "unknown").replaceAll("_", " "), STATE_KIND[r.lifecycle_status] || "neutral", "cell-state")),
      num(r.mailbox_depth),
      h("td", { class: ["num", r.busy > 0 && "busy"] }, fmtInt(r.busy)),
      num(r.handled),
      h("td", { class: ["num", r.failures > 0 && "bad-text"] }, fmtInt(r.failures)),
    ))));
}

/** "/hive/cell" with the hive part dimmed. */
export function pathLabel(path) {
  const cut = path.lastIndexOf("/");
  if (cut <= 0) return h("span", {}, path);
  return h("span", {}, h("span", { class: "dim" }, path.slice(0, cut + 1)), path.slice(cut + 1));
}
