"""`show FILE`: a trace read in the terminal (for SSH sessions, CI logs and tools), from the viewer's own API.

Without options it lists contexts with their rewrites and match counts, then how the program ended where it did not
end cleanly (the error, the user's line, the traceback); `--rewrite NAME|ID` prints every match of
those rewrites (the rule's file:line and source, and the unified diff of the graph text around it, as the Diff
panel prints it); `--kernels` each kernel's opts, colored shape, runtime and GFLOP/s; `--source KIND` kernels'
generated sources. `--json`: one JSON object per line (ASCII, so it is terminal-safe too)."""
from __future__ import annotations

import json
import sys
from typing import IO, Any, Iterator

from viz_server.offline import OfflineApi, OfflineError
from viz_server.term import Painter, safe, safe_block, use_color
from vztrace.debuglines import SOURCE_KIND, opts_line, plan_line, run_line, schedule_line
from vztrace.format import exit_traceback_lines

DIFF_COLORS = {"+": "green", "-": "red", "@": "cyan"}
# `--rewrite`'s bound (issue 31: each step's diff walks both graphs, so printing every step costs steps x graph size;
# a 51 KB trace took 77 s and printed 67 MB): past these, in all the rewrites printed, the rest is cut and says so
MAX_DIFF_NODES = 1_000_000  # graph nodes diffed (the graphs before and after each step printed), ~10 s
MAX_DIFF_CHARS = 16 << 20  # diff text printed


def depths(contexts: list[dict]) -> dict[int, int]:
  """Nesting depth per context id (a parent begins before its children)."""
  out: dict[int, int] = {}
  for c in contexts:
    out[c["id"]] = out.get(c["parent"], -1) + 1 if c["parent"] is not None else 0
  return out


def opt_text(o: dict) -> str:
  return f"{o['op']}({o['axis']}, {o['arg']})"


def seconds_text(s: Any) -> str:
  if not isinstance(s, (int, float)) or isinstance(s, bool):
    return "?"
  for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
    if s >= scale:
      return f"{s / scale:.2f} {unit}"
  return f"{s / 1e-9:.0f} ns"


def runs_text(st: dict) -> str:
  """A kernel's runs-per-kernel row (viz_server.summary.kernel_runs) as text: count, median, min, first (cold)."""
  if st["runs"] <= 1:
    return f"(1 run, cold: {seconds_text(st['first'])})"
  return (f"({st['runs']} runs: median {seconds_text(st['median'])}, min {seconds_text(st['min'])}, "
          f"first {seconds_text(st['first'])})")


def colored_name(shape: list[list] | None, name: str, paint: Painter) -> str:
  """A kernel's name, then its shape after the opts with each size colored by axis type (the API's shape_colors),
  each part made safe."""
  out = paint(safe(name), "bold")
  if shape:
    out += "  " + " ".join(paint(safe(text), color if isinstance(color, str) else None) for text, color in shape)
  return out


class Show:
  """Prints API answers of one trace as text lines or JSON lines."""

  def __init__(self, api: OfflineApi, out: IO[str], as_json: bool, color: bool) -> None:
    self.api, self.out, self.as_json, self.paint = api, out, as_json, Painter(color and not as_json)
    self._patterns: dict[int, dict | None] = {}
    self.diffed = self.printed = 0  # graph nodes diffed and diff chars printed so far (MAX_DIFF_NODES, _CHARS)

  def emit(self, obj: dict, text: str | None = None) -> None:
    if self.as_json:
      self.out.write(json.dumps(obj, ensure_ascii=True) + "\n")
    elif text is not None:
      self.out.write(text + "\n")

  def pattern(self, pid: Any) -> dict | None:
    if not isinstance(pid, int):
      return None
    if pid not in self._patterns:
      try:
        got = self.api.trace_get(f"patterns/{pid}")
        got.pop("html", None)
        self._patterns[pid] = got
      except OfflineError:
        self._patterns[pid] = None
    return self._patterns[pid]

  # ---- listings
  def contexts(self) -> None:
    p = self.paint
    contexts = self.api.trace_get("contexts")
    depth = depths(contexts)
    entry = next((e for e in self.api.get("/api/traces") if e["id"] == self.api.t), None)
    if entry is not None and not self.as_json:  # the counts every surface shows (vztrace.counts; --json: the API's)
      c = entry["counts"]
      self.out.write(p(f"{c['contexts']} contexts, {c['kernels']} kernels, {c['runs']} runs", "dim") + "\n")
    if entry is not None and isinstance(off := (entry.get("meta") or {}).get("off"), dict):
      self.switched(off)
    for c in contexts:
      ind = "  " * depth[c["id"]]
      err = p(f"  error: {safe(c['error'])}", "red") if c.get("error") else ""
      self.emit({"type": "context", **{k: c[k] for k in ("id", "parent", "name", "kind", "error")},
                 "rewrites": len(c["rewrites"])},
                f"{ind}{p('[%d]' % c['id'], 'dim')} {p(safe(c['kind']), 'yellow')} "
                f"{colored_name(c['shape_colors'], c['name'], p)}{err}")
      for rw in c["rewrites"]:
        n = rw["matches"]
        count = p(f"{n:>6} matches", "green" if rw["changed"] else "dim")
        where = p(f"{safe(rw['file'])}:{rw['line']}", "dim") if rw["file"] else ""
        self.emit({"type": "rewrite", "ctx": c["id"], **{k: rw[k] for k in ("id", "name", "matches", "changed",
                                                                            "file", "line", "dt", "error")}},
                  f"{ind}  rw {rw['id']:<5} {count}  {safe(rw['name'])}  {where}")

  def switched(self, off: dict) -> None:
    """What the run turned off (the meta's `off`: SKIP_RULES, SKIP_MATCHES, SKIP_OPTS), as `info` says it."""
    def names(v: Any) -> str:
      return ", ".join(str(x) for x in v) if isinstance(v, list) and v else "-"
    rules, opts, matches = names(off.get("rules")), names(off.get("opts")), off.get("matches")
    matches = matches if isinstance(matches, str) and matches else "-"
    self.emit({"type": "off", "off": off}, self.paint(safe(f"off: rules {rules}; matches {matches}; opts {opts} "
                                                            "(switches: not a plain run)"), "yellow"))

  def ending(self) -> None:
    """How the program ended, where not cleanly (after its contexts, as it came): what ended it and its traceback."""
    entry = next((e for e in self.api.get("/api/traces") if e["id"] == self.api.t), None)
    ex = entry.get("exit") if entry else None
    if ex is None:
      return
    self.emit({"type": "exit", "exit": ex}, "\n".join([self.paint(safe(f"the program {ex['text']}"), "red"),
                                                 *(safe(line) for line in exit_traceback_lines(ex))]))

  def rewrites(self, which: str) -> int:
    contexts = self.api.trace_get("contexts")
    ids = [rw["id"] for c in contexts for rw in c["rewrites"]
           if (which.isascii() and which.isdigit() and rw["id"] == int(which)) or rw["name"] == which]
    if not ids:
      print(f"no rewrite with id or name {safe(which)!r}", file=sys.stderr)
      return 1
    for r in ids:
      self.matches(r)
    return 0

  def matches(self, r: int) -> None:
    p = self.paint
    rw = self.api.trace_get(f"rewrites/{r}")
    n = len(rw["steps"])
    rules = self.rule_counts(rw["steps"])
    head = p(f"rewrite {rw['id']} {safe(rw['name'])} (context {rw['ctx']}): {n} matches", "bold")
    self.emit({"type": "rewrite", **{k: rw[k] for k in ("id", "ctx", "name", "file", "line", "dt", "error")},
               "matches": n, "rules": rules}, "\n".join([head, *map(self._count_line, rules)]))
    for st in rw["steps"]:
      k = st["k"]
      if self.diffed > MAX_DIFF_NODES or self.printed > MAX_DIFF_CHARS:
        self._cut(r, k, n)
        return
      pat = self.pattern(st["pattern"])
      d = self.api.get(f"/api/diff?a={self.api.t}:{r}:{k - 1}&b={self.api.t}:{r}:{k}")
      rp = self.api.views.get(self.api.trace, self.api.trace.rewrites[r]).replay
      rp.ensure(k)  # (done by the diff, unless its view was let go since)
      self.diffed += rp.sizes[k - 1] + rp.sizes[k]
      self.printed += sum(len(line["text"]) for line in d["lines"])
      rule = {key: pat.get(key) for key in ("file", "line", "name", "src", "pat")} if pat else None
      self.emit({"type": "match", "rewrite": r, "step": k, "before": st["before"], "after": st["after"],
                 "dt": st["dt"], "error": st["error"], "rule": rule, "diff": d["lines"]})
      if self.as_json:
        continue
      self.out.write("\n".join(self._match_lines(k, n, st, pat, d["lines"])) + "\n")

  def rule_counts(self, steps: list[dict]) -> list[dict]:
    """Matches per rule (by the rule's name, file and line), most first: what a rewrite spent its steps on."""
    counts: dict[Any, int] = {}
    for st in steps:
      counts[st["pattern"]] = counts.get(st["pattern"], 0) + 1
    by_rule: dict[tuple, int] = {}
    for pid, n in counts.items():
      pat = self.pattern(pid) or {}
      key = (pat.get("name") or f"rule {pid}", pat.get("file"), pat.get("line"))
      by_rule[key] = by_rule.get(key, 0) + n
    return [{"name": name, "file": file, "line": line, "matches": n}
            for (name, file, line), n in sorted(by_rule.items(), key=lambda kv: -kv[1])]

  def _count_line(self, c: dict) -> str:
    p = self.paint
    where = p(f"{safe(c['file'])}:{c['line']}", "dim") if c["file"] else ""
    return f"  {c['matches']:>6}x {p(safe(c['name']), 'yellow')}  {where}"

  def _cut(self, r: int, k: int, n: int) -> None:
    why = (f"show --rewrite prints at most {MAX_DIFF_NODES} graph nodes diffed and {MAX_DIFF_CHARS >> 20} MiB of "
           "diffs in all")
    self.emit({"type": "cut", "rewrite": r, "from_step": k, "steps": n, "reason": why},
              self.paint(f"... cut: steps {k}-{n} of rewrite {r} not printed ({why}; the viewer shows every step)",
                         "yellow"))

  def _match_lines(self, k: int, n: int, st: dict, pat: dict | None, lines: list[dict]) -> Iterator[str]:
    p = self.paint
    name = safe(pat["name"]) if pat and pat.get("name") else f"rule {st['pattern']}"
    where = f"{safe(pat['file'])}:{pat['line']}" if pat and pat.get("file") else "?"
    dt = seconds_text(st["dt"] / 1e9) if isinstance(st["dt"], (int, float)) else "?"
    yield ""
    yield f"{p('step %d/%d' % (k, n), 'bold')}  {p(name, 'yellow')}  {p(where, 'cyan')}  ({dt})"
    if st.get("error"):
      yield p(f"  raised: {safe(st['error'])}", "red")
    if pat and pat.get("pat"):
      yield "  " + p(safe(pat["pat"]), "dim")
    if pat and pat.get("src"):
      yield from ("  | " + line for line in safe_block(pat["src"]).splitlines())
    for line in lines:
      kind = line["kind"]
      text = safe(line["text"]) if kind == "@" else f"{kind}{safe(line['text'])}"
      yield "  " + p(text, DIFF_COLORS.get(kind))

  def kernels(self, only: str | None = None) -> None:
    p = self.paint
    first: dict[str, int] = {}  # kernel name -> the context that compiled it
    for k in self._kernels(only):
      run = k["run"]
      again = first.get(k["name"]) if not k["sources"] else None  # a schedule cache hit ran it again
      if k["sources"]:
        first.setdefault(k["name"], k["ctx"])
      opts = [o for o in k["opts"] if o["ok"]]
      refused = len(k["opts"]) - len(opts)
      self.emit({"type": "kernel", **k}, None)
      if self.as_json:
        continue
      runtime = (f"{seconds_text(run['min'])}  {run['gflops'] or 0:.2f} GFLOP/s  {run['gbs'] or 0:.2f} GB/s"
                 if run else p("not run", "dim"))
      if k.get("stats"):  # the kernel's runs in every context (the Runs panel's row, viz_server.summary)
        runtime += p("  " + runs_text(k["stats"]), "dim")
      opt_s = " ".join(safe(opt_text(o)) for o in opts) or p(
        f"as [{again}] (the same kernel, compiled there)" if again is not None else "no opts", "dim")
      more = p(f" (+{refused} refused)", "dim") if refused else ""
      beam = p(f"  beam {k['n_beam']}", "dim") if k["n_beam"] else ""
      shape = k["shape_colors"] or []  # (the colors' escapes take no room on screen)
      pad = " " * max(0, 20 - len(safe(k["name"])) - sum(len(safe(t)) + 1 for t, _ in shape) - (1 if shape else 0))
      self.out.write(f"{p('[%d]' % k['ctx'], 'dim')} {colored_name(k['shape_colors'], k['name'], p)}{pad}  "
                     f"{runtime}  opts: {opt_s}{more}{beam}\n")
      sites = k.get("callsites") or []  # (a trace before minor version 3 has none)
      if sites:
        rest = p(f" (+{k['callsites_more']} more)", "dim") if k.get("callsites_more") else ""
        self.out.write(f"    {p('called from', 'dim')} " + ", ".join(
          p(f"{safe(c['file'])}:{c['line']}", "cyan") + f" in {safe(c['function'])}" for c in sites) + rest + "\n")

  def _kernels(self, only: str | None) -> list[dict]:
    ks = self.api.trace_get("kernels")
    if only is None:
      return ks
    return [k for k in ks if k["name"] == only or (only.isascii() and only.isdigit() and k["ctx"] == int(only))]

  def sources(self, kind: str, only: str | None = None) -> int:
    p = self.paint
    found = 0
    for k in self._kernels(only):
      if kind not in k["sources"]:
        continue
      body = self.api.trace_get(f"contexts/{k['ctx']}/kernel")
      for s in body["sources"]:
        if s["kind"] != kind:
          continue
        found += 1
        # each line with the trace node ids it came from (empty where the trace has no line map: before 2.4)
        nodes = s.get("nodes") or []
        lines = [{"line": i + 1, "text": t, "nodes": nodes[i] if i < len(nodes) else []}
                 for i, t in enumerate(s["text"].split("\n"))]
        self.emit({"type": "source", "ctx": k["ctx"], "name": k["name"], "kind": kind, "text": s["text"],
                   "compile_s": s["compile_s"], "lines": lines},
                  f"{p('; kernel %s (context %d), %s' % (safe(k['name']), k['ctx'], safe(kind)), 'bold')}\n"
                  f"{safe_block(s['text'])}")
    if not found:
      print(f"no {safe(kind)!r} source in this trace" + (f" for kernel {safe(only)!r}" if only else ""),
            file=sys.stderr)
      return 1
    return 0


def debug_lines(api: OfflineApi, level: int) -> Iterator[str]:
  """What `DEBUG=level` printed while the traced program ran, rebuilt from the trace: the kernel contexts after each
  schedule context are the kernels run_schedule ran (times are the trace's, from the same run); where they name
  their schedule (minor version 6), a run of those naming another one is another run_schedule (one run later)."""
  groups: list[list[dict]] = []
  made_by = None  # the schedule context of the last group
  for c in api.trace_get("contexts"):
    if c["kind"] == "schedule":
      groups.append([])
      made_by = c["id"]
    elif c["kind"] in ("kernel", "memory"):
      if (link := c.get("schedule")) is not None and link != made_by:
        groups.append([])
        made_by = link
      if groups:
        groups[-1].append(c)
  for group in groups:
    kernels = sum(c["kind"] == "kernel" for c in group)
    if kernels and level >= 1:
      yield schedule_line(kernels)
    if level < 2:
      continue
    for c in group:
      if c["kind"] == "memory":  # the schedule's memory plan, printed before its kernels ran
        yield safe(plan_line(c["name"]))
        continue
      k = api.trace_get(f"contexts/{c['id']}/kernel")
      r = k["runs"][-1] if k["runs"] else {}
      yield run_line(safe(c["name"]), r.get("min"), r.get("flops"), r.get("bytes"))
      if level >= 3:
        yield safe(opts_line((o["op"], o["axis"], o["arg"]) for o in k["opts"] if o["ok"]))
      if level >= 4:
        yield from (safe_block(s["text"]) for s in k["sources"] if s["kind"] == SOURCE_KIND)


def run(args: Any, out: IO[str] | None = None) -> int:
  """The `show` command for parsed args (file, rewrite, kernels, source, kernel, json)."""
  out = out or sys.stdout
  with OfflineApi(args.file) as api:
    sh = Show(api, out, args.json, use_color(out))
    if getattr(args, "debug", None):
      out.write("".join(line + "\n" for line in debug_lines(api, args.debug)))
      return 0
    if args.rewrite is not None:
      return sh.rewrites(args.rewrite)
    if args.source is not None:
      return sh.sources(args.source, args.kernel)
    if args.kernels:
      sh.kernels(args.kernel)
      return 0
    sh.contexts()
    sh.ending()
  return 0
