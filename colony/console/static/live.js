// The daemon's event stream (GET /colony/events, Server-Sent Events) read with fetch().
//
// EventSource cannot send an Authorization header, so the stream is read as a plain
// response body and parsed here (the SSE field rules: event, data, id, comments). A lost
// connection resumes with Last-Event-ID; a `dropped` event (this client fell behind) does the
// same from the id it names. Events resent on resume are told apart by kind and message id.

import { askForToken, authHeaders } from "./api.js";

const SEEN_MAX = 4000;

/** Parses SSE text fed in chunks; calls onMessage({event, data, id}) per message. */
export class SseParser {
  constructor(onMessage) {
    this.onMessage = onMessage;
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.event = "";
    this.data = [];
    this.id = null;
  }

  feed(text) {
    this.buffer += text;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    // a trailing "\r" may be half of "\r\n": keep it (and any partial line) for the next chunk
    this.buffer = lines.pop();
    for (const line of lines) this.line(line);
  }

  line(line) {
    if (line === "") {
      if (this.data.length) this.onMessage({ event: this.event || "message", data: this.data.join("\n"), id: this.id });
      this.reset();
      return;
    }
    if (line.startsWith(":")) return; // a comment (the keep-alive ping)
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }
}

/**
 * One subscription. `params` are the query filters (trace_id, cell, kind); `onEvent(kind,
 * data)` gets each event; `onState(state)` hears "connecting", "live", "reconnecting",
 * "unavailable" (the daemon has no event stream) or "stopped".
 */
export class LiveStream {
  constructor({ params = {}, onEvent, onState }) {
    this.params = params;
    this.onEvent = onEvent;
    this.onState = onState || (() => {});
    this.lastId = null;
    this.seen = new Set();
    this.stopped = false;
    this.controller = null;
    this.state = "connecting";
  }

  setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.onState(state);
  }

  start() {
    this.loop();
    return this;
  }

  stop() {
    this.stopped = true;
    this.controller?.abort();
    this.setState("stopped");
  }

  async loop() {
    let backoff = 500;
    while (!this.stopped) {
      const outcome = await this.connect().catch(() => "error");
      if (this.stopped) return;
      let wait = 0;
      if (outcome === "unavailable") {
        this.setState("unavailable");
        wait = 30_000; // an older daemon: ask again now and then; the pages poll meanwhile
      } else if (outcome === "ended") {
        this.setState("reconnecting");
        wait = backoff = 500;
      } else if (outcome !== "resume") {
        this.setState("reconnecting");
        wait = backoff;
        backoff = Math.min(backoff * 2, 10_000);
      }
      if (wait) await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  async connect() {
    const url = new URL("/colony/events", window.location.origin);
    for (const [key, value] of Object.entries(this.params)) {
      if (value !== null && value !== undefined && value !== "") url.searchParams.set(key, value);
    }
    this.controller = new AbortController();
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (this.lastId) headers["Last-Event-ID"] = this.lastId;
    const response = await fetch(url, { headers, cache: "no-store", signal: this.controller.signal });
    if (response.status === 401) {
      await askForToken();
      return "resume";
    }
    if (response.status === 404 || response.status === 405 || response.status === 501) return "unavailable";
    if (!response.ok || !response.body) return "error";
    this.setState("live");
    let resume = false;
    const parser = new SseParser((message) => {
      if (message.id) this.lastId = message.id;
      let data;
      try {
        data = JSON.parse(message.data);
      } catch {
        return;
      }
      const kind = message.event !== "message" ? message.event : data.kind;
      if (kind === "dropped") {
        // No resume_from: those events are lost for good (further behind than the daemon
        // reads back); reconnecting would get the same answer again, so read on.
        if (!data.resume_from) return;
        this.lastId = String(data.resume_from);
        resume = true;
        this.controller.abort();
        return;
      }
      if (this.isRepeat(kind, data)) return;
      try {
        this.onEvent(kind, data);
      } catch (err) {
        console.error("a console page failed on an event", kind, err);
      }
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.feed(value);
      }
    } catch (err) {
      if (!resume) throw err;
    }
    return resume ? "resume" : "ended";
  }

  /** An event resent after a resume (same kind, message and cell) is passed on once. */
  isRepeat(kind, data) {
    if (!data || !data.message_id) return false;
    // started_ms tells a cell's second handling of a message (after a crash) from a repeat.
    const key = `${kind}|${data.message_id}|${data.cell || ""}|${data.started_ms || ""}`;
    if (this.seen.has(key)) return true;
    this.seen.add(key);
    if (this.seen.size > SEEN_MAX) {
      const oldest = this.seen.values().next().value;
      this.seen.delete(oldest);
    }
    return false;
  }
}
