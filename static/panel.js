// The base of every panel (static/panels.js creates only Panels): the order of its answers and its loading, error and
// empty states. A panel asks the server again whenever what it shows changes (a step, a context, a live trace's
// growth), and answers come back in any order on a loaded machine: each request gets the next number of the panel's
// generation, and an answer counts only while no newer request (or state) has replaced it, so an older answer arriving
// last never overwrites a newer one. The states are one markup and one class set for every panel, their text always a
// text node (it may come from a stranger's trace).
import {h, put} from "./dom.js";

const STATE_CLASS = {
  loading: "panel-state loading muted small",
  error: "panel-state error-text",
  empty: "panel-state empty-panel muted",
};

export class Panel {
  /** el: the panel's element, where its content and states go (a state may go to a part of it: a `slot`). */
  constructor(el) {
    this.el = el;
    this.gen = 0;  // the number of the latest request (or state shown): answers to older ones are dropped
  }

  /** Start a request: answers to the panel's earlier ones stop counting. Its number, for fresh(). */
  begin() {
    return ++this.gen;
  }

  /** Whether the answer to request `gen` still counts: no newer request or state replaced it. */
  fresh(gen) {
    return gen === this.gen;
  }

  /** fetcher()'s answer, or undefined when it no longer counts: a newer request started meanwhile, or it failed (the
   * error then shown in `slot`, after `what: `, while it still counts). gen: a request already begun (several
   * answers of one request), else a new one. */
  async load(fetcher, {gen = this.begin(), slot = this.el, what = ""} = {}) {
    let answer;
    try {
      answer = await fetcher();
    } catch (e) {
      if (this.fresh(gen)) this.error(what ? `${what}: ${e.message}` : e.message, slot);
      return undefined;
    }
    return this.fresh(gen) ? answer : undefined;
  }

  /** Show that an answer is on its way. */
  loading(text, slot = this.el) {
    this._state("loading", text, slot);
  }

  /** Show an error message. */
  error(text, slot = this.el) {
    this._state("error", text, slot);
  }

  /** Show that there is nothing to show (`more`: what the user may pick instead, under the text). */
  empty(text, {slot = this.el, more = []} = {}) {
    this._state("empty", text, slot, more);
  }

  /** Called when a state replaced the panel's whole content: a panel holding on to parts of it lets them go here. */
  cleared() {}

  _state(kind, text, slot, more = []) {
    if (slot === this.el) {
      // what is on screen now is the state: an answer still on its way must not replace it
      this.begin();
      this.cleared();
    }
    const role = kind === "error" ? "alert" : "status";
    put(slot, h("div", {class: STATE_CLASS[kind], dataset: {state: kind}, role}, String(text ?? "")), ...more);
  }
}
