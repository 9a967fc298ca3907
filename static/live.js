// Live updates: socket.io when its client is served at /vendor/, else polling /api/traces. The server marks the page
// (<html data-socketio="yes|no">) so that a missing client is never requested (its 404 would be a console error).
import {api} from "./api.js";

const SOCKET_IO = "/vendor/socket.io.esm.min.js";
const POLL_MS = 1000;
// with socket.io, the trace list is still asked this often while the shown trace is live: an event can be lost (a
// websocket that hangs without closing goes unnoticed until its ping times out, ~45 s), and a live view must not
// stop growing for that long; a trace whose counts moved without an event is then asked for as when polling
const CATCH_UP_MS = 5000;

/**
 * Calls onTraces(list) with the trace list whenever it may have changed, and onEvent({type, trace, ...}) for records
 * of a trace (type: context/rewrite/kernel/run, or "counts" when polling sees a trace's counts change).
 * isLive() says whether the trace on screen is live (the catch-up poll runs only then).
 */
export async function startLive({onTraces, onEvent, onMode, isLive = () => false, forcePoll = false}) {
  let io = null;
  if (!forcePoll && document.documentElement.dataset.socketio !== "no") {
    try {
      io = (await import(SOCKET_IO)).io;
    } catch {
      io = null;
    }
  }
  const poller = new Poller(onTraces, onEvent);
  if (!io) {
    onMode("polling");
    poller.start();
    return;
  }
  const sock = io({transports: ["websocket", "polling"], reconnectionDelayMax: 3000});
  sock.on("connect", () => {
    onMode("socket.io");
    poller.stop();
    poller.start(CATCH_UP_MS, isLive);
    sock.emit("subscribe", {trace: null});
    // anything may have happened while we were away
    api.traces().then((list) => { poller.remember(list); onTraces(list); }).catch(() => {});
  });
  sock.on("disconnect", () => { onMode("polling (socket.io reconnecting)"); poller.stop(); poller.start(); });
  sock.on("trace", (entry) => {
    poller.remember([entry]);  // (the catch-up poll asks again only for what no event told)
    onEvent({type: "trace", trace: entry.id, entry});
  });
  for (const type of ["context", "rewrite", "kernel", "run"]) {
    sock.on(type, (msg) => onEvent({type, trace: msg && msg.trace, msg}));
  }
}

class Poller {
  constructor(onTraces, onEvent) {
    this.onTraces = onTraces;
    this.onEvent = onEvent;
    this.timer = null;
    this.run = 0;  // which start() the pending tick belongs to: a tick of a stopped run (awaiting its answer) ends
    this.last = new Map();
  }

  remember(list) {
    for (const t of list) this.last.set(t.id, JSON.stringify([t.status, t.counts]));
  }

  /** Ask the trace list every `ms`, on the ticks where when() holds. */
  start(ms = POLL_MS, when = () => true) {
    if (this.timer) return;
    const run = ++this.run;
    const tick = async () => {
      if (when()) await this.poll();
      if (run === this.run) this.timer = setTimeout(tick, ms);
    };
    this.timer = setTimeout(tick, ms);
  }

  async poll() {
    try {
      const list = await api.traces();
      const changed = [];
      for (const t of list) {
        const sig = JSON.stringify([t.status, t.counts]);
        // a trace not seen before counts as changed: what it got between the page's first load and this tick
        // (e.g. a writer that then pauses) would otherwise never be asked for
        if (this.last.get(t.id) !== sig) changed.push(t.id);
        this.last.set(t.id, sig);
      }
      this.onTraces(list);
      for (const id of changed) this.onEvent({type: "counts", trace: id});
    } catch {
      // the server may be restarting; try again next tick
    }
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    this.run++;
  }
}
