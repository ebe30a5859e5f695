// A layered, left-to-right layout of a colony's topology, with hives as nested boxes.
//
// Each hive is laid out on its own: its direct children (cells, and sub-hives as blocks whose
// size is their own layout) go into columns by their distance in hops from where messages
// enter (the hive's port, cells nothing sends to, the entries of recent runs), so a cyclic
// graph stays as short as its shortest paths; within a column they are ordered by the mean
// position of their neighbours (a few sweeps of the barycentre heuristic). An edge into or
// out of a sub-hive counts for the sub-hive. A hive whose own edges start at "." gets a port,
// the point its messages enter by.

export const NODE_W = 156;
export const NODE_H = 46;
const PORT = 14;
const GAP_X = 64;
const GAP_Y = 20;
const PAD = 18;
const HEAD = 30;
const SWEEPS = 6;

function parentPath(path) {
  if (path === "/") return null;
  const cut = path.lastIndexOf("/");
  return cut <= 0 ? "/" : path.slice(0, cut);
}

/** Where a path sits: the nearest enclosing hive. */
function containerOf(path, hives) {
  for (let p = parentPath(path); p !== null; p = parentPath(p)) if (hives.has(p)) return p;
  return "/";
}

function inside(scope, path) {
  return scope === "/" ? path.startsWith("/") : path === scope || path.startsWith(`${scope}/`);
}

/**
 * Lays out {nodes, edges} as /colony/graph gives them. Returns {width, height, items} where
 * items maps a path to {path, kind: "cell" | "hive" | "external" | "port", cell_type, x, y, w, h}
 * (ports are keyed "<hive>#port").
 */
export function layout(graph, entries = new Set()) {
  const hives = new Set(graph.nodes.filter((n) => n.cell_type === "hive").map((n) => n.path));
  hives.add("/");
  const items = new Map();
  for (const n of graph.nodes) {
    items.set(n.path, { path: n.path, kind: n.cell_type === "hive" ? "hive" : "cell", cell_type: n.cell_type });
  }
  // endpoints that are no node (a /colony/* read, a path with no cell): drawn as dashed boxes
  for (const e of graph.edges) {
    for (const p of [e.from, e.to]) {
      if (!items.has(p)) items.set(p, { path: p, kind: "external", cell_type: "not a cell" });
    }
  }
  const children = new Map([...hives].map((hv) => [hv, []]));
  for (const item of items.values()) {
    if (item.path === "/") continue;
    children.get(containerOf(item.path, hives)).push(item);
  }
  for (const list of children.values()) list.sort((a, b) => a.path.localeCompare(b.path));

  const root = items.get("/") || { path: "/", kind: "hive", cell_type: "hive" };
  items.set("/", root);
  place(root, children, graph.edges, items, entries);
  root.x = 0;
  root.y = 0;
  absolute(root, children, items);
  return { width: root.w, height: root.h, items };
}

function place(hive, children, edges, items, entries) {
  const kids = children.get(hive.path) || [];
  for (const kid of kids) {
    if (kid.kind === "hive") place(kid, children, edges, items, entries);
    else { kid.w = NODE_W; kid.h = NODE_H; }
  }
  const portKey = `${hive.path}#port`;
  const own = edges.filter((e) => e.from === hive.path && e.to !== hive.path && inside(hive.path, e.to));
  const members = [...kids];
  if (own.length) {
    const port = { path: portKey, kind: "port", hive: hive.path, w: PORT, h: PORT };
    items.set(portKey, port);
    members.unshift(port);
  }
  // the edges between members: each end lifted to the member holding it
  const index = new Map(members.map((m, i) => [m.path, i]));
  const lift = (p) => {
    if (p === hive.path) return own.length ? index.get(portKey) : undefined;
    for (const m of kids) if (m.path === p || (m.kind === "hive" && p.startsWith(`${m.path}/`))) return index.get(m.path);
    return undefined;
  };
  const out = members.map(() => new Set());
  for (const e of edges) {
    const a = lift(e.from);
    const b = lift(e.to);
    if (a !== undefined && b !== undefined && a !== b) out[a].add(b);
  }
  const starts = new Set();
  if (own.length) starts.add(index.get(portKey));
  for (const p of entries) {
    const at = lift(p);
    if (at !== undefined) starts.add(at);
  }
  const ranks = rank(members.length, out, starts);
  const columns = order(members.length, out, ranks);

  const widths = columns.map((col) => Math.max(0, ...col.map((i) => members[i].w)));
  const heights = columns.map((col) => col.reduce((n, i) => n + members[i].h, 0) + GAP_Y * Math.max(0, col.length - 1));
  const contentH = Math.max(NODE_H, ...heights);
  let x = PAD;
  columns.forEach((col, r) => {
    let y = HEAD + (contentH - heights[r]) / 2;
    for (const i of col) {
      const m = members[i];
      m.rx = x + (widths[r] - m.w) / 2;
      m.ry = y;
      y += m.h + GAP_Y;
    }
    x += widths[r] + GAP_X;
  });
  hive.w = Math.max(NODE_W + 2 * PAD, x - GAP_X + PAD);
  hive.h = HEAD + contentH + PAD;
  hive.members = members;
}

function absolute(hive, children, items) {
  for (const m of hive.members) {
    m.x = hive.x + m.rx;
    m.y = hive.y + m.ry;
    if (m.kind === "hive") absolute(m, children, items);
  }
}

/** Columns by hops from the starts (breadth first); what they do not reach starts anew from
 * the member fewest send to (then the one sending to most). */
function rank(n, out, starts) {
  const incoming = new Array(n).fill(0);
  out.forEach((set) => set.forEach((b) => { incoming[b] += 1; }));
  const ranks = new Array(n).fill(-1);
  let frontier = [...new Set([...starts, ...[...Array(n).keys()].filter((v) => incoming[v] === 0 && out[v].size)])];
  for (const v of frontier) ranks[v] = 0;
  for (;;) {
    while (frontier.length) {
      const next = [];
      for (const v of frontier) {
        for (const w of out[v]) {
          if (ranks[w] < 0) { ranks[w] = ranks[v] + 1; next.push(w); }
        }
      }
      frontier = next;
    }
    const left = [...Array(n).keys()].filter((v) => ranks[v] < 0);
    if (!left.length) return ranks;
    left.sort((a, b) => incoming[a] - incoming[b] || out[b].size - out[a].size || a - b);
    // a new start sits in the first column unless something ranked already sends to it
    const v = left[0];
    const from = [...Array(n).keys()].filter((u) => ranks[u] >= 0 && out[u].has(v));
    ranks[v] = from.length ? Math.min(...from.map((u) => ranks[u])) + 1 : 0;
    frontier = [v];
  }
}

/** Members per rank, ordered to cross fewer edges (barycentre sweeps). */
function order(n, out, ranks) {
  const depth = Math.max(0, ...ranks);
  const columns = Array.from({ length: depth + 1 }, () => []);
  for (let v = 0; v < n; v += 1) columns[ranks[v]].push(v);
  const near = Array.from({ length: n }, () => new Set());
  out.forEach((set, a) => set.forEach((b) => { near[a].add(b); near[b].add(a); }));
  const pos = new Array(n).fill(0);
  const remember = () => columns.forEach((col) => col.forEach((v, i) => { pos[v] = i - (col.length - 1) / 2; }));
  remember();
  for (let sweep = 0; sweep < SWEEPS; sweep += 1) {
    const down = sweep % 2 === 0;
    const seq = down ? columns.keys() : [...columns.keys()].reverse();
    for (const r of seq) {
      const side = (w) => (down ? ranks[w] < r : ranks[w] > r);
      const centre = new Map(columns[r].map((v) => {
        const ns = [...near[v]].filter(side);
        return [v, ns.length ? ns.reduce((t, w) => t + pos[w], 0) / ns.length : pos[v]];
      }));
      columns[r].sort((a, b) => centre.get(a) - centre.get(b));
      remember();
    }
  }
  return columns;
}
