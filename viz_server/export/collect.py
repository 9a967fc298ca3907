"""What an export's page serves, collected: the API's answers by path (through the API itself,
viz_server/offline.py), each rewrite's graphs packed (graphs.py) and the trace's other nodes, redacted (redact.py)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping

from viz_server import caches
from viz_server.export import ExportError
from viz_server.export.graphs import EdgeStrip, GraphPacker, leave_out_derived_edges
from viz_server.export.layouts import SharedLayouts
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
    self.total = 0  # the steps the kept rewrites have: what `steps` counts up to (the progress lines say it)
    self.graphs = 0  # step-0 graphs laid out (a rewrite that matched nothing over a root laid out already shares it)
    self.shared = 0  # of those, the layouts renamed from an equal graph's (export/layouts.py), not computed
    self.steps = 0  # deltas packed
    self.nodes = 0  # nodes those deltas added (a rebuilt node counts: it is sent)
    self.edges = 0  # edges they listed (a compact delta lists those its rebuilt nodes' old nodes cannot give)


# what gets a rewrite's graphs: (its id, its step-0 graph's index, the fixed fields of its replay-made ids, filled as
# its steps are read, its packed steps: to be read before the next rewrite)
Keep = Callable[[str, int, dict[int, list], Iterable[dict]], None]
PROGRESS_STEPS = 500  # a progress line every this many steps packed (about a second of work on the 2-core machine)


def _deltas(view: Any, n: int, work: Work, progress: Callable[[Work], None] | None) -> Iterator[dict]:
  """Steps 1..n of a rewrite as compact deltas, each from the step before (the viewer's own answers, without its
  JSON round trip: the page gets them packed anyway)."""
  for k in range(1, n + 1):
    d = view.delta(k - 1, k, compact=True)
    for key in ((k - 1,), ("cut", k - 1)):  # (step k-1's layout: no later step is derived from it; the view's
      caches.LAYOUTS.drop(view.key + key)   # block layouts stay, so the export holds a rewrite's 1/32 of them)
    work.steps += 1
    work.nodes += len(d["nodes_added"])
    work.edges += len(d["edges_added"])
    if progress is not None and work.steps % PROGRESS_STEPS == 0:
      progress(work)
    yield d


def _contexts(api: OfflineApi, names: list[str] | None, answers: dict) -> tuple[list[dict], set[int]]:
  """The contexts shown (their answer put in answers) and the ids of those whose rewrites and kernels are kept."""
  contexts = api.trace_get("contexts")
  shown, full = kept_contexts(contexts, names)
  contexts = [c if c["id"] in full else {**c, "rewrites": []} for c in contexts if c["id"] in shown]
  answers[f"/api/traces/{api.t}/contexts"] = contexts
  return contexts, full


def _rewrites(api: OfflineApi, contexts: list[dict], pack: GraphPacker, red: Redactor, answers: dict, work: Work,
              progress: Callable[[Work], None] | None, keep: Keep) -> None:
  """Each kept rewrite's detail and patterns (into answers) and its graphs, packed by pack and handed to keep one
  rewrite at a time, its steps as they are made (its view is let go before the next: the export holds one rewrite's
  replay and layouts)."""
  base = f"/api/traces/{api.t}"
  patterns: set[int] = set()
  rules: dict[int, dict] = {}
  by_root: dict[int, int] = {}  # a rewrite's input root -> its step-0 graph's index in pack.graphs
  shared = SharedLayouts()
  rws = api.trace.rewrites
  work.total += sum(rws[e["id"]].matches for c in contexts for e in c["rewrites"] if e["id"] in rws)
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
      work.rewrites += 1
      n, root = len(detail["steps"]), detail["root"]
      if n == 0 and isinstance(root, int) and root in by_root:
        # a rewrite that matched nothing over a graph already laid out: the step-0 graph is its root's subgraph, laid
        # out afresh, so it is that graph (a third of a training step's rewrites: passes that found nothing to do)
        keep(str(r), by_root[root], {}, ())
        continue
      view = api.view(r)
      view.lay_out = shared
      work.graphs += 1
      index, fresh, steps = pack.stream(view.graph(0), _deltas(view, n, work, progress), rules)
      work.shared = shared.shared
      keep(str(r), index, fresh, steps)
      api.forget(r)  # (its replay and layouts: the export holds one rewrite's at a time)
      if isinstance(root, int):
        by_root.setdefault(root, index)


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


def _head(api: OfflineApi, answers: dict, nodes: dict, red: Redactor, names: list[str] | None) -> dict:
  return {"format": 1, "trace": api.t, "answers": answers, "nodes": nodes, "redacted": sorted(red.what),
          "contexts_only": sorted(names) if names else None}


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

  def keep(r: str, index: int, fresh: dict[int, list], steps: Iterable[dict]) -> None:
    graphs[r] = {"g0": index, "deltas": list(steps), "fresh": fresh}

  _rewrites(api, contexts, pack, red, answers, work, progress, keep)
  _other_answers(api, full, red, answers)
  data = {**_head(api, answers, _other_nodes(api, pack.statics), red, names), "graphs": graphs, "g0": pack.graphs,
          "statics": pack.statics}
  data = red.data(data)  # (last: every string the export holds, whatever field it is in)
  return leave_out_derived_edges(data) if derive_edges else data


def collect_packed(api: OfflineApi, names: list[str] | None = None, redact: Iterable[str] = (),
                   work: Work | None = None, progress: Callable[[Work], None] | None = None) -> dict:
  """collect()'s data packed (pack.pack's form, equal once unpacked), made a rewrite at a time: each rewrite's graphs
  are redacted, their derivable edges left out and their steps packed into the columns as soon as they are made, so
  the export holds the columns and one rewrite's graphs, never every step's (issue 30)."""
  work = work if work is not None else Work()
  red = Redactor(redact, api.trace.meta)
  answers: dict[str, Any] = {}
  contexts, full = _contexts(api, names, answers)
  pack = GraphPacker(api.trace.nodes.get)
  strip = EdgeStrip(pack.statics)
  statics = _redacted(pack.statics, red)
  packer = Packer(statics.get)

  def keep(r: str, index: int, fresh: dict[int, list], steps: Iterable[dict]) -> None:
    for i in range(len(packer.g0s), len(pack.graphs)):  # the step-0 graphs this rewrite laid out first
      g = red.answer(pack.graphs[i])
      strip.g0(g)
      packer.g0(g)
      pack.graphs[i] = {"nodes": g["nodes"]}  # (what later rewrites over it need: its places)
    g0 = pack.graphs[index]
    packer.rewrite(r, index, strip.steps((red.answer(d) for d in steps), fresh, g0), _redacted(fresh, red), g0)

  _rewrites(api, contexts, pack, red, answers, work, progress, keep)
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
