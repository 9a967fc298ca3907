"""What an export's page serves, collected: the API's answers by path (through the API itself,
viz_server/offline.py), each rewrite's graphs packed (graphs.py) and the trace's other nodes, redacted (redact.py)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping

from viz_server.export import ExportError, workers
from viz_server.export.graphs import EdgeStrip, GraphPacker, leave_out_derived_edges
from viz_server.export.pack import Packer
from viz_server.export.redact import Redactor
from viz_server.labels import label
from viz_server.offline import OfflineApi, OfflineError


def kept_contexts(contexts: list[dict], names: list[str] | None) -> tuple[set[int], set[int]]:
  """(contexts shown, contexts whose rewrites and kernel are included): the named ones with their descendants, and
  their ancestors for the tree."""
  if not names:
    ids = {c["id"] for c in contexts}
    return ids, ids
  unknown = set(names) - {c["name"] for c in contexts}
  if unknown:
    raise ExportError(f"no context named {', '.join(repr(n) for n in sorted(unknown))} in the trace")
  full: set[int] = set()
  for c in contexts:  # a parent begins before its children
    if c["name"] in names or c["parent"] in full:
      full.add(c["id"])
  by_id = {c["id"]: c for c in contexts}
  shown = set(full)
  for cid in full:
    p = by_id[cid]["parent"]
    while p is not None and p in by_id and p not in shown:
      shown.add(p)
      p = by_id[p]["parent"]
  return shown, full


class Work:
  """What an export did, counted (tests bound it by the trace's records; the progress lines print it)."""

  def __init__(self) -> None:
    self.rewrites = 0  # rewrites collected
    self.rewrites_total = 0  # the kept rewrites: what `rewrites` counts up to
    self.total = 0  # the steps the kept rewrites have: what `steps` counts up to (the progress lines say it)
    self.graphs = 0  # step-0 graphs laid out (a rewrite that matched nothing over a root laid out already shares it)
    self.shared = 0  # of those, the layouts renamed from an equal graph's (export/layouts.py), not computed
    self.steps = 0  # deltas packed
    self.nodes = 0  # nodes those deltas added (a rebuilt node counts: it is sent)
    self.edges = 0  # edges they listed (a compact delta lists those its rebuilt nodes' old nodes cannot give)
    self.writing = False  # every rewrite packed, the page being written (the command's last progress line says so)


# what gets a rewrite's graphs: (its id, its step-0 graph's index, the fixed fields of its replay-made ids, filled as
# its steps are read, its packed steps: to be read before the next rewrite, its step-0 graph's packed nodes: [] for
# one that shares its root's and has no steps)
Keep = Callable[[str, int, dict[int, list], Iterable[dict], list[list]], None]
PROGRESS_STEPS = 500  # a progress line every this many steps packed (about a second of work on the 2-core machine)
PROGRESS_REWRITES = 100  # or every this many rewrites (a training step's ~1,300 rewrites are mostly steps-free)


class _Teller:
  """Tells progress (the Work) once PROGRESS_STEPS steps or PROGRESS_REWRITES rewrites were done since it last told:
  counted, so the lines are at most one per PROGRESS_REWRITES rewrites plus one per PROGRESS_STEPS steps."""

  def __init__(self, work: Work, progress: Callable[[Work], None] | None) -> None:
    self.work, self.progress = work, progress
    self.told = (0, 0)  # (rewrites, steps) when it last told

  def __call__(self) -> None:
    w = self.work
    if self.progress is not None and (w.steps - self.told[1] >= PROGRESS_STEPS
                                      or w.rewrites - self.told[0] >= PROGRESS_REWRITES):
      self.told = (w.rewrites, w.steps)
      self.progress(w)


def _counted(steps: Iterable[dict], work: Work, tell: _Teller) -> Iterator[dict]:
  """A rewrite's deltas as they are packed, counted (and progress told)."""
  for d in steps:
    work.steps += 1
    work.nodes += len(d["nodes_added"])
    work.edges += len(d["edges_added"])
    tell()
    yield d


def _contexts(api: OfflineApi, names: list[str] | None, answers: dict) -> tuple[list[dict], set[int]]:
  """The contexts shown (their answer put in answers) and the ids of those whose rewrites and kernels are kept."""
  contexts = api.trace_get("contexts")
  shown, full = kept_contexts(contexts, names)
  contexts = [c if c["id"] in full else {**c, "rewrites": []} for c in contexts if c["id"] in shown]
  answers[f"/api/traces/{api.t}/contexts"] = contexts
  return contexts, full


def _rewrites(api: OfflineApi, contexts: list[dict], pack: GraphPacker, red: Redactor, answers: dict, work: Work,
              progress: Callable[[Work], None] | None, keep: Keep, jobs: int = 1) -> None:
  """Each kept rewrite's detail and patterns (into answers) and its graphs, packed by pack and handed to keep one
  rewrite at a time, its steps as they are made (the views are made in `jobs` worker processes, or here with 1:
  export/workers.py; either way the export holds one rewrite's replay and layouts per process)."""
  base = f"/api/traces/{api.t}"
  patterns: set[int] = set()
  rules: dict[int, dict] = {}
  rws = api.trace.rewrites
  work.total += sum(rws[e["id"]].matches for c in contexts for e in c["rewrites"] if e["id"] in rws)
  order: list[tuple[int, int, Any, bool]] = []  # (rewrite, its steps, its root, whether it shares its root's graph)
  viewed: set[int] = set()  # the roots of the rewrites viewed so far
  for c in contexts:
    for entry in c["rewrites"]:
      r = entry["id"]
      try:
        detail = api.trace_get(f"rewrites/{r}")
      except OfflineError:  # one the viewer cannot serve either (a negative id, say): the page says so as it would
        continue
      answers[f"{base}/rewrites/{r}"] = detail
      for p in {st["pattern"] for st in detail["steps"]} - patterns:
        patterns.add(p)
        try:
          pat = api.trace_get(f"patterns/{p}")
        except OfflineError:
          continue
        answers[f"{base}/patterns/{p}"] = red.pattern(pat)
        rules[p] = {"file": pat["file"], "line": pat["line"], "name": pat["name"]}
      n, root = len(detail["steps"]), detail["root"]
      # a rewrite that matched nothing over a graph already laid out: the step-0 graph is its root's subgraph, laid
      # out afresh, so it is that graph (a third of a training step's rewrites: passes that found nothing to do)
      shares = n == 0 and isinstance(root, int) and root in viewed
      order.append((r, n, root, shares))
      if not shares and isinstance(root, int):
        viewed.add(root)
  work.rewrites_total += len(order)
  todo = [(r, n) for r, n, _, shares in order if not shares]
  laid = workers.Laid()
  if jobs > 1 and todo:
    made = workers.forked(api, todo, jobs, laid, workers.plan([(root, n) for _, n, root, s in order if not s], jobs))
  else:
    made = workers.in_process(api, todo, laid)
  by_root: dict[int, int] = {}  # a rewrite's input root -> its step-0 graph's index in pack.graphs
  tell = _Teller(work, progress)
  try:
    for r, _, root, shares in order:
      if shares:
        keep(str(r), by_root[root], {}, (), [])
      else:
        _, g0, steps = next(made)
        work.graphs += 1
        index, fresh, packed = pack.stream(g0, _counted(steps, work, tell), rules)
        keep(str(r), index, fresh, packed, pack.last)
        work.shared = laid.shared
        if isinstance(root, int):
          by_root.setdefault(root, index)
      work.rewrites += 1
      workers.collect_cycles(work.rewrites)
      tell()
  finally:
    made.close()  # (the workers end with the export, however it ends)


def _other_answers(api: OfflineApi, full: set[int], red: Redactor, answers: dict) -> None:
  """The answers besides the rewrites': kernels, runs, summary, timeline, the trace's entry, metrics."""
  base = f"/api/traces/{api.t}"
  ks = [k for k in api.trace_get("kernels") if k["ctx"] in full]
  answers[f"{base}/kernels"] = red.kernels(ks)
  for k in ks:
    # (html=0: the export shows sources as plain text, so the API need not highlight them)
    answers[f"{base}/contexts/{k['ctx']}/kernel"] = red.kernel(api.trace_get(f"contexts/{k['ctx']}/kernel?html=0"))
  answers[f"{base}/runs"] = [r for r in api.trace_get("runs") if r["ctx"] in full]
  answers[f"{base}/runs/kernels"] = api.trace_get("runs/kernels")  # (the Runs and Summary panels': whole-trace sums)
  answers[f"{base}/summary"] = api.trace_get("summary")
  answers[f"{base}/timeline"] = kept_timeline(api.trace_get("timeline"), full)
  entry = api.get("/api/traces")[0]
  answers["/api/traces"] = [red.entry(entry)]
  answers["/api/metrics"] = api.get("/api/metrics")  # the page sizes collapsed boxes by them


def _other_nodes(api: OfflineApi, statics: dict[int, list]) -> dict[int, list]:
  """The trace's nodes that no graph holds (the others' fields are in statics), for /nodes/<n>."""
  nodes = {}
  get = api.trace.nodes.get
  for nid in api.trace.nodes.ids():
    if nid not in statics:
      op, dtype, arg, src = get(nid)  # type: ignore[misc]
      nodes[nid] = [op, dtype, arg, list(src), label(op, dtype, arg)]
  return nodes


def _node_sites(api: OfflineApi) -> dict:
  """The call sites of the trace's nodes that name one, for /nodes/<n>: the distinct sites ({file, line, function},
  redacted as any string of the export), and per such node its id (as the difference from the one before) and its
  site's index."""
  nodes, table, by, ids, codes = api.trace.nodes, [], {}, [], []
  for nid in nodes.ids():
    s = nodes.site(nid)
    if s is not None:
      c = by.get(s)
      if c is None:
        c = by[s] = len(table)
        table.append({"file": s[0], "line": s[1], "function": s[2]})
      ids.append(nid)
      codes.append(c)
  return {"table": table, "ids": [b - a for a, b in zip([0, *ids], ids)], "codes": codes}


def _head(api: OfflineApi, answers: dict, nodes: dict, red: Redactor, names: list[str] | None) -> dict:
  return {"format": 1, "trace": api.t, "answers": answers, "nodes": nodes, "sites": _node_sites(api),
          "redacted": sorted(red.what), "contexts_only": sorted(names) if names else None}


def collect(api: OfflineApi, names: list[str] | None = None, redact: Iterable[str] = (),
            derive_edges: bool = True, work: Work | None = None,
            progress: Callable[[Work], None] | None = None) -> dict:
  """Everything the shim serves: API answers by path, graphs as step 0 plus per-step deltas, and the node table, held
  whole (the tests' form; the export packs as it goes: collect_packed). derive_edges: leave out the edges the shim
  can make (leave_out_derived_edges); work: counts what was done; progress: called with it every PROGRESS_STEPS
  steps."""
  work = work if work is not None else Work()
  red = Redactor(redact, api.trace.meta)
  answers: dict[str, Any] = {}
  contexts, full = _contexts(api, names, answers)
  graphs: dict[str, Any] = {}
  pack = GraphPacker(api.trace.nodes.get)

  def keep(r: str, index: int, fresh: dict[int, list], steps: Iterable[dict], _: list[list]) -> None:
    graphs[r] = {"g0": index, "deltas": list(steps), "fresh": fresh}

  _rewrites(api, contexts, pack, red, answers, work, progress, keep)
  _other_answers(api, full, red, answers)
  data = {**_head(api, answers, _other_nodes(api, pack.statics), red, names), "graphs": graphs, "g0": pack.graphs,
          "statics": pack.statics}
  data = red.data(data)  # (last: every string the export holds, whatever field it is in)
  return leave_out_derived_edges(data) if derive_edges else data


def collect_packed(api: OfflineApi, names: list[str] | None = None, redact: Iterable[str] = (),
                   work: Work | None = None, progress: Callable[[Work], None] | None = None, jobs: int = 1) -> dict:
  """collect()'s data packed (pack.pack's form, equal once unpacked), made a rewrite at a time: each rewrite's graphs
  are redacted, their derivable edges left out and their steps packed into the columns as soon as they are made, so
  the export holds the columns and one rewrite's graphs, never every step's (issue 30). jobs: the processes that
  make the rewrites' views (export/workers.py; 1: this one)."""
  with workers.quiet_gc():  # (the trace is read: see quiet_gc)
    return _collect_packed(api, names, redact, work if work is not None else Work(), progress, jobs)


def _collect_packed(api: OfflineApi, names: list[str] | None, redact: Iterable[str], work: Work,
                    progress: Callable[[Work], None] | None, jobs: int) -> dict:
  red = Redactor(redact, api.trace.meta)
  answers: dict[str, Any] = {}
  contexts, full = _contexts(api, names, answers)
  pack = GraphPacker(api.trace.nodes.get)
  strip = EdgeStrip(pack.statics)
  statics = _redacted(pack.statics, red)
  packer = Packer(statics.get)

  def keep(r: str, index: int, fresh: dict[int, list], steps: Iterable[dict], nodes: list[list]) -> None:
    for i in range(len(packer.g0s), len(pack.graphs)):  # the step-0 graphs this rewrite laid out first
      g = red.answer(pack.graphs[i])
      strip.g0(g)
      packer.g0(g)
      # (packed: let go. A later rewrite over an equal graph brings its own nodes, so the export never holds every
      # step-0 graph's nodes: a training step has ~900 distinct ones)
      pack.graphs[i] = None
    g0 = {"nodes": nodes}  # (its places: redacting leaves numbers as they are)
    packer.rewrite(r, index, strip.steps((red.answer(d) for d in steps), fresh, g0), _redacted(fresh, red), g0)

  _rewrites(api, contexts, pack, red, answers, work, progress, keep, jobs)
  _other_answers(api, full, red, answers)
  head = red.data(_head(api, answers, _other_nodes(api, pack.statics), red, names))
  return packer.finish(head, {nid: statics[nid] for nid in pack.statics}, strip.routes)


class _Redacted(Mapping):
  """Fixed-field rows by id, each redacted when first read (the rows are filled as the export goes)."""

  def __init__(self, rows: dict[int, list], red: Redactor) -> None:
    self.rows, self.red, self.done = rows, red, {}

  def __getitem__(self, nid: int) -> list:
    got = self.done.get(nid)
    if got is None:
      got = self.done[nid] = self.red.answer(self.rows[nid])
    return got

  def __iter__(self) -> Iterator[int]:
    return iter(self.rows)

  def __len__(self) -> int:
    return len(self.rows)


def _redacted(rows: dict[int, list], red: Redactor) -> Mapping[int, list]:
  return _Redacted(rows, red) if red.what & {"paths", "host"} else rows


def kept_timeline(tl: dict, keep: set[int]) -> dict:
  """The timeline of the kept contexts only."""
  out = dict(tl)
  out["contexts"] = [c for c in tl["contexts"] if c["id"] in keep]
  out["compiles"] = [c for c in tl["compiles"] if c["ctx"] in keep]
  out["runs"] = [r for r in tl["runs"] if r["ctx"] in keep]
  rw = tl["rewrites"]
  idx = [i for i, c in enumerate(rw["ctx"]) if c in keep]
  out["rewrites"] = {k: (v if not isinstance(v, list) or k == "names" else [v[i] for i in idx]) for k, v in rw.items()}
  return out
