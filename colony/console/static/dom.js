// Small helpers shared by the pages: building elements, formatting numbers and times.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    else if (key === "style") Object.assign(el.style, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "testid") el.setAttribute("data-testid", value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** An HTML element: h("a", {href: "#/", class: "x", testid: "y"}, "text", child). */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, same arguments as h(). */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Calls fn at most once per `ms`, on the trailing edge. */
export function debounce(fn, ms) {
  let timer = null;
  const run = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  run.cancel = () => clearTimeout(timer);
  return run;
}

/** Like debounce, but a steady stream of calls still runs fn every `ms`. */
export function throttle(fn, ms) {
  let timer = null;
  let wanted = false;
  const run = () => {
    if (timer) { wanted = true; return; }
    fn();
    timer = setTimeout(() => { timer = null; if (wanted) { wanted = false; run(); } }, ms);
  };
  run.cancel = () => { clearTimeout(timer); timer = null; wanted = false; };
  return run;
}

export function isNum(v) {
  return typeof v === "number" && Number.isFinite(v);
}

const grouping = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });

export function fmtInt(v) {
  return isNum(v) ? grouping.format(v) : "—";
}

export function fmtMs(ms) {
  if (!isNum(ms)) return "—";
  if (ms < 1) return "<1 ms";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const m = Math.floor(ms / 60_000);
  const sec = Math.round((ms % 60_000) / 1000);
  return m < 60 ? `${m} m ${sec} s` : `${Math.floor(m / 60)} h ${m % 60} m`;
}

export function fmtRate(perSecond) {
  if (!isNum(perSecond)) return "—";
  return perSecond >= 10 ? perSecond.toFixed(0) : perSecond.toFixed(perSecond >= 1 ? 1 : 2);
}

export function fmtClock(ms) {
  if (!isNum(ms)) return "—";
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function fmtWhen(ms) {
  if (!isNum(ms)) return "—";
  const d = new Date(ms);
  const today = new Date();
  const time = d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.toLocaleDateString(undefined, { month: "short", day: "numeric" })} ${time}`;
}

export function fmtAgo(ms) {
  if (!isNum(ms)) return "—";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function fmtUptime(seconds) {
  return isNum(seconds) ? fmtMs(seconds * 1000) : "—";
}

/** Seconds (the API's created_at) or milliseconds to milliseconds. */
export function toMs(t) {
  if (!isNum(t)) return null;
  return t < 1e11 ? t * 1000 : t;
}

/** The tail of a UUIDv7 (its head is the clock, alike for ids made close together). */
export function shortId(id) {
  return typeof id === "string" && id.length > 10 ? `…${id.slice(-8)}` : String(id ?? "—");
}

/** The last segment of a path, the whole path for the root. */
export function leaf(path) {
  if (!path || path === "/") return "/";
  return path.slice(path.lastIndexOf("/") + 1) || path;
}

/** JSON, indented and coloured by token kind (CSS classes j-key, j-str, j-num, j-lit). */
export function jsonBlock(value, testid) {
  const text = JSON.stringify(value, null, 2) ?? "null";
  const pre = h("pre", { class: "json", testid });
  const token = /("(?:\\.|[^"\\])*")(\s*:)?|\b(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\b|\b(true|false|null)\b/g;
  let last = 0;
  for (const m of text.matchAll(token)) {
    if (m.index > last) pre.append(text.slice(last, m.index));
    if (m[1]) {
      pre.append(h("span", { class: m[2] ? "j-key" : "j-str" }, m[1]));
      if (m[2]) pre.append(m[2]);
    } else if (m[3]) pre.append(h("span", { class: "j-num" }, m[3]));
    else pre.append(h("span", { class: "j-lit" }, m[4]));
    last = m.index + m[0].length;
  }
  pre.append(text.slice(last));
  return pre;
}

/** A status word as a coloured pill. */
export function badge(text, kind, testid) {
  return h("span", { class: ["badge", kind && `badge-${kind}`], testid }, text);
}

const OUTCOME_KIND = {
  answered: "ok",
  ok: "ok",
  dead_lettered: "bad",
  error: "bad",
  crashed: "bad",
  timed_out: "bad",
  refused: "warn",
  in_flight: "live",
};

export function outcomeBadge(outcome, testid) {
  const text = outcome ? String(outcome).replaceAll("_", " ") : "unknown";
  return badge(text, OUTCOME_KIND[outcome] || "neutral", testid);
}

/** A card with a title row (title, optional right-hand side) and its content. */
export function card(title, aside, ...content) {
  return h("section", { class: "card" },
    title || aside ? h("div", { class: "card-head" }, h("h2", {}, title), aside) : null,
    ...content);
}

/** A note in place of content: "not available", "nothing yet", an error. */
export function note(text, kind = "empty", testid = "note") {
  return h("div", { class: ["note", `note-${kind}`], testid }, text);
}
