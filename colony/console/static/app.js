// The console's shell: hash routes to pages, the live indicator, one event stream per page.
//
// A page module exports mount(view, ctx) and, when it listens to the daemon, stream(where)
// returning the event filters it wants. Leaving a page aborts its requests, stops its stream
// and clears its timers (ctx.teardown).

import { LiveStream } from "./live.js";
import { h, note } from "./dom.js";
import * as overview from "./overview.js";
import * as runs from "./runs.js";
import * as trace from "./trace.js";
import * as deadLetters from "./deadletters.js";
import * as graph from "./graph.js";

const PAGES = { overview, runs, trace, "dead-letters": deadLetters, graph };
const NAV_OF = { trace: "runs" };
const STATE_LABEL = {
  connecting: "connecting",
  live: "live",
  reconnecting: "reconnecting",
  unavailable: "polling",
  stopped: "paused",
  off: "",
};
const STATE_TITLE = {
  connecting: "connecting to the event stream",
  live: "updating live from the daemon's event stream",
  reconnecting: "the event stream was lost; reconnecting",
  unavailable: "this daemon serves no event stream (GET /colony/events); the page polls instead",
};

/** Where the hash points: #/, #/runs, #/trace/<id>, #/dead-letters, #/graph (?query). */
export function parseHash(hash) {
  const text = hash.replace(/^#\/?/, "");
  const [path, query] = text.split("?", 2);
  const parts = path.split("/").filter(Boolean).map((p) => decodeURIComponent(p));
  const params = new URLSearchParams(query || "");
  if (!parts.length) return { page: "overview", params };
  if (parts[0] === "trace" && parts[1]) return { page: "trace", id: parts[1], params };
  if (parts[0] in PAGES && parts[0] !== "trace") return { page: parts[0], params };
  return { page: "missing", params, path };
}

function showLiveState(state) {
  const el = document.querySelector("[data-testid=live-status]");
  el.dataset.state = state;
  el.title = STATE_TITLE[state] || "";
  el.querySelector(".label").textContent = STATE_LABEL[state] ?? state;
}

function context(where) {
  const controller = new AbortController();
  const cleanups = [];
  const listeners = new Set();
  const stateListeners = new Set();
  const page = PAGES[where.page];
  let stream = null;
  const ctx = {
    where,
    signal: controller.signal,
    get liveState() {
      return stream ? stream.state : "off";
    },
    /** fn(kind, data) for each event of this page's stream. */
    onEvent(fn) {
      listeners.add(fn);
    },
    /** fn(state) when the stream connects, drops or turns out unavailable. */
    onLiveState(fn) {
      stateListeners.add(fn);
    },
    every(ms, fn) {
      const timer = setInterval(fn, ms);
      cleanups.push(() => clearInterval(timer));
    },
    /** Every `ms` while the event stream is not live (an older daemon, a lost connection). */
    pollWhileOffline(ms, fn) {
      ctx.every(ms, () => {
        if (ctx.liveState !== "live" && !document.hidden) fn();
      });
    },
    onTeardown(fn) {
      cleanups.push(fn);
    },
    startStream() {
      if (!page || !page.stream) {
        showLiveState("off");
        return;
      }
      stream = new LiveStream({
        params: page.stream(where),
        onEvent: (kind, data) => listeners.forEach((fn) => fn(kind, data)),
        onState: (state) => {
          showLiveState(state);
          stateListeners.forEach((fn) => fn(state));
        },
      });
      showLiveState("connecting");
      stream.start();
    },
    teardown() {
      controller.abort();
      stream?.stop();
      cleanups.forEach((fn) => fn());
    },
  };
  return ctx;
}

let current = null;

function route() {
  current?.teardown();
  const where = parseHash(window.location.hash);
  const view = document.getElementById("view");
  view.replaceChildren();
  view.dataset.page = where.page;
  const active = NAV_OF[where.page] || where.page;
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.dataset.page === active);
  }
  current = context(where);
  const page = PAGES[where.page];
  if (!page) {
    view.append(note(`No page here (#/${where.path}).`, "error", "missing-page"),
      h("p", {}, h("a", { href: "#/" }, "Back to the overview")));
    showLiveState("off");
    return;
  }
  document.title = `${page.title(where)} · colony`;
  try {
    page.mount(view, current);
  } catch (err) {
    console.error(err);
    view.append(note(`This page failed: ${err.message}`, "error", "page-error"));
  }
  current.startStream();
}

window.addEventListener("hashchange", route);
route();
