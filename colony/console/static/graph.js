// Graph: the colony's topology (GET /colony/graph) drawn as SVG: hives as boxes around their
// cells, edges as arrows (their conditions on hover, never as labels), and each cell warmed
// by its live activity (route and handle events).

import { get, notServed } from "./api.js";
import { clear, fmtInt, h, leaf, note, s } from "./dom.js";
import { layout } from "./layout.js";

export const title = () => "Graph";
export const stream = () => ({ kind: "route,handle_start,handle_end,dead_letter" });

const HEAT_STEPS = [0.05, 0.6, 1.6, 3.2, 6];
const COOLING = 0.86; // per 250 ms: about 2.5 s from hot to cold
const PALETTE = 8;

export function mount(view, ctx) {
  const host = h("div", { class: "graph-host", testid: "graph" });
  const aside = h("aside", { class: "graph-info card", testid: "graph-info" });
  const live = { heat: new Map(), busy: new Map(), drawn: null };
  const zoom = h("div", { class: "zoom" },
    h("button", { type: "button", class: "ghost", title: "zoom in", onclick: () => live.drawn?.controls.zoomBy(1 / 1.25) }, "+"),
    h("button", { type: "button", class: "ghost", title: "zoom out", onclick: () => live.drawn?.controls.zoomBy(1.25) }, "−"),
    h("button", { type: "button", class: "ghost", title: "fit the whole graph", testid: "graph-fit", onclick: () => live.drawn?.controls.fit() }, "fit"));
  const counts = h("span", { class: "muted", testid: "graph-counts" });
  view.append(
    h("div", { class: "page-head" }, h("h1", {}, "Graph"),
      h("p", { class: "muted" }, "The topology as the daemon runs it. Hover an arrow for its condition; cells glow while they work.")),
    h("div", { class: "card graph-card" },
      h("div", { class: "filters" }, counts, h("span", { class: "spacer" }),
        h("span", { class: "legend" }, h("span", { class: "key key-cold" }), "idle", h("span", { class: "key key-hot" }), "active"), zoom),
      host),
    aside);
  clear(aside, h("p", { class: "muted" }, "Click a cell or a hive to see its edges."));

  async function load() {
    try {
      const doc = await get("/colony/graph", {}, ctx.signal);
      const g = doc.graph;
      const cellCount = g.nodes.filter((n) => n.cell_type !== "hive").length;
      const hiveCount = g.nodes.length - cellCount;
      counts.textContent = `${fmtInt(cellCount)} cells · ${fmtInt(hiveCount)} hives · ${fmtInt(g.edges.length)} edges`;
      live.drawn = draw(host, g, aside, await entriesOf(ctx));
    } catch (err) {
      if (ctx.signal.aborted) return;
      clear(host, notServed(err)
        ? note("Not available: this daemon does not serve GET /colony/graph.", "empty", "graph-unavailable")
        : note(`The graph could not be read: ${err.message}`, "error", "graph-error"));
    }
  }

  const warm = (path, amount) => {
    if (!path) return;
    live.heat.set(path, (live.heat.get(path) || 0) + amount);
  };
  ctx.onEvent((kind, data) => {
    const d = live.drawn;
    if (!d) return;
    if (kind === "handle_start") {
      live.busy.set(data.cell, (live.busy.get(data.cell) || 0) + 1);
      warm(data.cell, 1);
    } else if (kind === "handle_end") {
      live.busy.set(data.cell, Math.max(0, (live.busy.get(data.cell) || 0) - 1));
      warm(data.cell, 0.5);
      if (data.outcome && data.outcome !== "ok") d.flash(data.cell, "flash-bad");
    } else if (kind === "route") {
      warm(data.to, 0.4);
      d.fire(data.edges || [], data.from, data.to);
    } else if (kind === "dead_letter") {
      d.flash(data.target, "flash-bad");
    }
    d.paint(live);
  });
  ctx.every(250, () => {
    for (const [path, v] of live.heat) {
      const next = v * COOLING;
      if (next < 0.02) live.heat.delete(path);
      else live.heat.set(path, next);
    }
    live.drawn?.paint(live);
  });
  load();
}

/** Where recent runs entered the colony (GET /colony/runs, or the message log's hops from
 * outside): the layout starts from them. */
async function entriesOf(ctx) {
  try {
    const doc = await get("/colony/runs", { limit: 200 }, ctx.signal);
    return new Set(doc.runs.map((r) => r.entry).filter(Boolean));
  } catch {
    try {
      const doc = await get("/colony/messages", { limit: 500 }, ctx.signal);
      return new Set(doc.messages.filter((m) => m.from_path === "@external").map((m) => m.to_path));
    } catch {
      return new Set();
    }
  }
}

/** Draws the laid-out graph into host; returns {paint, fire, flash, controls}. */
function draw(host, graph, aside, entries) {
  const { width, height, items } = layout(graph, entries);
  const margin = 24;
  const svg = s("svg", {
    class: "graph",
    testid: "graph-svg",
    viewBox: `${-margin} ${-margin} ${width + 2 * margin} ${height + 2 * margin}`,
    role: "img",
    "aria-label": "the colony's topology",
  });
  svg.append(s("defs", {},
    marker("arrow", "arrow-head"), marker("arrow-hot", "arrow-head arrow-head-hot"), marker("arrow-fired", "arrow-head arrow-head-fired")));
  const hivesLayer = s("g", { class: "hives" });
  const edgesLayer = s("g", { class: "edges" });
  const nodesLayer = s("g", { class: "nodes" });
  svg.append(hivesLayer, edgesLayer, nodesLayer);

  const nodeEls = new Map();
  const hiveEls = new Map();
  const edgeEls = new Map();
  const edgesAt = new Map(); // path -> edge ids touching it
  const types = [...new Set(graph.nodes.map((n) => n.cell_type))].filter((t) => t !== "hive").sort();
  const tone = (t) => `tone-${types.indexOf(t) % PALETTE}`;

  // hives, outermost first so inner boxes sit on top
  const hives = [...items.values()].filter((i) => i.kind === "hive").sort((a, b) => a.path.length - b.path.length);
  for (const hv of hives) {
    const g = s("g", { class: "hive", testid: "graph-hive", "data-path": hv.path },
      s("rect", { class: "hive-box", x: hv.x, y: hv.y, width: hv.w, height: hv.h, rx: 12 }),
      s("text", { x: hv.x + 14, y: hv.y + 20 },
        s("tspan", { class: "hive-label" }, hv.path === "/" ? "colony /" : leaf(hv.path)),
        s("tspan", { class: "hive-sub", dx: 8 }, hv.path === "/" ? "root hive" : `hive ${hv.path}`)),
      s("title", {}, `hive ${hv.path}`));
    g.addEventListener("click", () => showInfo(aside, hv, graph));
    hiveEls.set(hv.path, g);
    hivesLayer.append(g);
  }

  for (const item of items.values()) {
    if (item.kind === "port") {
      nodesLayer.append(s("g", { class: "port" },
        s("circle", { cx: item.x + item.w / 2, cy: item.y + item.h / 2, r: item.w / 2 }),
        s("title", {}, `messages sent to ${item.hive} enter here`)));
    }
    if (item.kind !== "cell" && item.kind !== "external") continue;
    const external = item.kind === "external";
    const g = s("g", {
      class: ["node", external ? "node-external" : tone(item.cell_type), "heat-0"],
      testid: external ? "graph-external" : "graph-node",
      "data-path": item.path,
      "data-cell-type": item.cell_type,
      transform: `translate(${item.x},${item.y})`,
    },
    s("rect", { class: "node-box", width: item.w, height: item.h, rx: 9 }),
    external ? null : s("rect", { class: "node-stripe", width: 5, height: item.h - 12, x: 6, y: 6, rx: 2.5 }),
    s("text", { class: "node-name", x: 18, y: 20 }, clip(external ? item.path : leaf(item.path), 17)),
    s("text", { class: "node-type", x: 18, y: 36 }, item.cell_type),
    s("circle", { class: "node-busy", cx: item.w - 12, cy: 12, r: 4 }),
    s("title", {}, `${item.path} (${item.cell_type})`));
    g.addEventListener("click", () => showInfo(aside, item, graph));
    nodeEls.set(item.path, g);
    nodesLayer.append(g);
  }

  // edges: the same pair of ends fans out so every arrow stays hoverable
  const obstacles = [...items.values()].filter((i) => i.kind === "cell" || i.kind === "external");
  const pairs = new Map();
  for (const e of graph.edges) {
    const key = `${e.from}|${e.to}`;
    const n = pairs.get(key) || 0;
    pairs.set(key, n + 1);
    const from = e.from === e.to ? items.get(e.from) : endpointOf(e.from, e.to, items);
    const to = items.get(e.to);
    if (!from || !to) continue;
    const d = route(from, to, n, obstacles);
    const tip = `${e.from} → ${e.to}\n${e.condition ? `when ${e.condition}` : "always"}${e.restore_ttl ? "\nrestores the TTL" : ""}`;
    const g = s("g", { class: ["edge", e.condition && "edge-conditional"], testid: "graph-edge", "data-edge-id": e.id, "data-edge-ref": e.ref, "data-from": e.from, "data-to": e.to },
      s("path", { class: "edge-hit", d }),
      s("path", { class: "edge-line", d, "marker-end": "url(#arrow)" }),
      s("title", {}, tip));
    edgeEls.set(e.id, g);
    if (e.ref) edgeEls.set(e.ref, g); // route events name the edges that fired by ref
    for (const p of [e.from, e.to]) edgesAt.set(p, [...(edgesAt.get(p) || []), e.id]);
    edgesLayer.append(g);
  }

  for (const [path, el] of nodeEls) {
    el.addEventListener("mouseenter", () => (edgesAt.get(path) || []).forEach((id) => edgeEls.get(id)?.classList.add("near")));
    el.addEventListener("mouseleave", () => (edgesAt.get(path) || []).forEach((id) => edgeEls.get(id)?.classList.remove("near")));
  }

  svg.addEventListener("mouseleave", () => edgeEls.forEach((g) => g.classList.remove("near")));
  clear(host, svg);
  const fitHeight = () => {
    const wanted = (host.clientWidth * (height + 2 * margin)) / (width + 2 * margin);
    host.style.height = `${Math.round(Math.min(window.innerHeight * 0.74, Math.max(320, wanted)))}px`;
  };
  fitHeight();
  const controls = panZoom(svg, { x: -margin, y: -margin, w: width + 2 * margin, h: height + 2 * margin });

  const flash = (path, cls) => {
    const el = nodeEls.get(path) || hiveEls.get(path);
    if (!el) return;
    el.classList.remove(cls);
    requestAnimationFrame(() => el.classList.add(cls)); // a frame apart: the animation restarts
    setTimeout(() => el.classList.remove(cls), 1200);
  };
  const fire = (ids, from, to) => {
    let fired = [...new Set(ids.map((id) => edgeEls.get(id)).filter(Boolean))];
    if (!fired.length && from && to) fired = [...new Set(edgeEls.values())].filter((g) => g.dataset.from === from && g.dataset.to === to);
    for (const g of fired) {
      g.classList.add("fired");
      clearTimeout(g.firedTimer);
      g.firedTimer = setTimeout(() => g.classList.remove("fired"), 900);
    }
    if (hiveEls.has(to)) flash(to, "flash");
  };
  const paint = (live) => {
    for (const [path, el] of nodeEls) {
      const v = live.heat.get(path) || 0;
      let level = 0;
      while (level < HEAT_STEPS.length && v >= HEAT_STEPS[level]) level += 1;
      const cls = `heat-${level}`;
      if (!el.classList.contains(cls)) {
        el.classList.remove("heat-0", "heat-1", "heat-2", "heat-3", "heat-4", "heat-5");
        el.classList.add(cls);
      }
      el.classList.toggle("busy", (live.busy.get(path) || 0) > 0);
    }
  };
  return { paint, fire, flash, controls };
}

/** Where an edge starts: a hive's port when the hive routes into itself, else the box. */
function endpointOf(from, to, items) {
  const port = items.get(`${from}#port`);
  if (port && to.startsWith(from === "/" ? "/" : `${from}/`)) return port;
  return items.get(from);
}

function marker(id, cls) {
  // sized in the drawing's units: a thicker (hovered, fired) line keeps the same arrowhead
  return s("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" },
    s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: cls }));
}

/** A curve from a's right side to b's left side, or under both when b is not to the right. */
function route(a, b, nth, boxes) {
  const spread = nth * 8;
  if (a === b) {
    const x = a.x + a.w - 18;
    const y = a.y;
    return `M ${x} ${y} C ${x} ${y - 34 - spread}, ${x + 40 + spread} ${y - 20}, ${a.x + a.w} ${y + 14}`;
  }
  const sx = a.x + a.w;
  const sy = a.y + a.h / 2;
  const tx = b.x;
  const ty = b.y + b.h / 2;
  if (tx >= sx + 8) { // forward: right side to left side
    const k = Math.max(28, (tx - sx) * 0.5);
    return `M ${sx} ${sy + spread / 2} C ${sx + k} ${sy + spread}, ${tx - k} ${ty + spread}, ${tx} ${ty + spread / 2}`;
  }
  if (b.x < a.x + a.w && a.x < b.x + b.w) { // one column: out of the right side and back in
    const k = 26 + Math.min(90, Math.abs(ty - sy) * 0.25) + spread;
    const right = Math.max(sx, b.x + b.w);
    return `M ${sx} ${sy} C ${right + k} ${sy}, ${right + k} ${ty}, ${b.x + b.w} ${ty}`;
  }
  // backwards (a cycle): over the top or under the bottom of what lies between
  const ax = a.x + a.w / 2 + spread;
  const bx = b.x + b.w / 2 - spread;
  const lo = Math.min(ax, bx);
  const hi = Math.max(ax, bx);
  const between = boxes.filter((o) => o.x < hi && o.x + o.w > lo);
  const top = Math.min(a.y, b.y, ...between.map((o) => o.y));
  const bottom = Math.max(a.y + a.h, b.y + b.h, ...between.map((o) => o.y + o.h));
  const above = (a.y + b.y) / 2 - top < bottom - (a.y + a.h + b.y + b.h) / 2;
  if (above) {
    const y = top - 22 - spread;
    return `M ${ax} ${a.y} C ${ax} ${y}, ${bx} ${y}, ${bx} ${b.y}`;
  }
  const y = bottom + 22 + spread;
  return `M ${ax} ${a.y + a.h} C ${ax} ${y}, ${bx} ${y}, ${bx} ${b.y + b.h}`;
}

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

function showInfo(aside, item, graph) {
  const outs = graph.edges.filter((e) => e.from === item.path);
  const ins = graph.edges.filter((e) => e.to === item.path);
  const edgeList = (list, end) => list.length
    ? h("ul", { class: "edge-list" }, list.map((e) => h("li", {},
      h("span", { class: "path" }, e[end]),
      e.condition ? h("code", { class: "cond" }, e.condition) : h("span", { class: "muted" }, " always"),
      e.restore_ttl ? h("span", { class: "chip" }, "restores TTL") : null)))
    : h("p", { class: "muted" }, "none");
  clear(aside,
    h("h2", {}, h("span", { class: "path" }, item.path), " ", h("span", { class: "type" }, item.kind === "hive" ? "hive" : item.cell_type)),
    h("h3", {}, `Edges out (${outs.length})`), edgeList(outs, "to"),
    h("h3", {}, `Edges in (${ins.length})`), edgeList(ins, "from"));
}

/** Wheel to zoom at the pointer, drag to pan, and fit; all by changing the viewBox. */
function panZoom(svg, full) {
  let box = { ...full };
  const apply = () => svg.setAttribute("viewBox", `${box.x} ${box.y} ${box.w} ${box.h}`);
  const toSvg = (event) => {
    const r = svg.getBoundingClientRect();
    const scale = Math.max(box.w / r.width, box.h / r.height);
    const ox = (r.width * scale - box.w) / 2;
    const oy = (r.height * scale - box.h) / 2;
    return { x: box.x - ox + (event.clientX - r.left) * scale, y: box.y - oy + (event.clientY - r.top) * scale, scale };
  };
  const zoomAt = (factor, at) => {
    const w = Math.min(full.w * 4, Math.max(full.w / 12, box.w * factor));
    const f = w / box.w;
    box = { x: at.x - (at.x - box.x) * f, y: at.y - (at.y - box.y) * f, w: box.w * f, h: box.h * f };
    apply();
  };
  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    zoomAt(event.deltaY > 0 ? 1.15 : 1 / 1.15, toSvg(event));
  }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    drag = { x: event.clientX, y: event.clientY, box: { ...box }, scale: toSvg(event).scale, moved: false };
  });
  svg.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (!drag.moved && Math.hypot(dx, dy) < 4) return;
    if (!drag.moved) { svg.setPointerCapture(event.pointerId); svg.classList.add("dragging"); }
    drag.moved = true;
    box = { ...drag.box, x: drag.box.x - dx * drag.scale, y: drag.box.y - dy * drag.scale };
    apply();
  });
  const end = () => { drag = null; svg.classList.remove("dragging"); };
  svg.addEventListener("pointerup", end);
  svg.addEventListener("pointercancel", end);
  return {
    fit: () => { box = { ...full }; apply(); },
    zoomBy: (factor) => zoomAt(factor, { x: box.x + box.w / 2, y: box.y + box.h / 2 }),
  };
}
