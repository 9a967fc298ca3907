"""Before/after of stepping through a trace's rewrite with the most steps (issue 30: a GPT step's `add bufferize`,
~900 steps of ~3,000 nodes), two viewer trees in one process, in turns: `--before` another checkout's root (its
viz_server and vztrace are loaded under their own names), after: this tree. Per round and tree, on a fresh view:
- CPU ms of opening (step 0's compact graph), of each arrow step 1..N as a cold request makes it (the step's replay,
  its derived layout and the compact delta, `compact=2`) and of a far jump (the delta from step N to step J: every
  step between replayed and laid out);
- CPU ms per step of each part, replay, derive and delta, over steps A+1..A+M (A reached first, not counted);
- the arrow steps' answers' bytes (largest, p95, median), and of the steps back N..1 after them (asked with `held`,
  as the page asks them: static/graphghosts.js, StepMemo), with the counts over 10 KB (issue 30).
Prints the medians over the rounds side by side, and checks every answer of both trees is byte-identical (a
difference is an error: the two trees must serve the same bytes). CPU times compare best on a loaded machine.
- with --shuffle N: N graph and delta answers between random steps up to --shuffle-top on a fresh view whose replay
  reached every step in order first (fresh ids numbered alike), asked in a seeded random order (once per tree),
  checked like the others.

  PYTHONPATH=. python bench/bench_steps_ab.py TRACE --before /work/main [--rounds 3] [--steps 20] [--jump 200]
  [--shuffle 100] [--encoding-changed]
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import inspect
import random
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("viz_server", "vztrace")
GC_THRESHOLDS = (50_000, 20, 10)  # viz_server.__main__.GC_THRESHOLDS (not imported: it would bring Flask in)


def load_tree(root: Path) -> dict[str, ModuleType]:
  """The modules the bench uses, imported from checkout `root` (then dropped from sys.modules, so that the next tree
  imports its own; what was imported keeps its own globals)."""
  for name in [m for m in sys.modules if m.split(".")[0] in PACKAGES]:
    del sys.modules[name]
  sys.path.insert(0, str(root))
  try:
    mods = {m: importlib.import_module(f"viz_server.{m}") for m in ("replay", "stepgraphs", "store")}
  finally:
    sys.path.remove(str(root))
  for name in [m for m in sys.modules if m.split(".")[0] in PACKAGES]:
    del sys.modules[name]
  return mods


def one_round(mods: dict[str, ModuleType], trace: Path, steps: int, jump: int, at: int, span: int
              ) -> tuple[dict[str, float], list[str]]:
  """CPU ms of each measure on a fresh view, and the hashes of the answers made."""
  cpu, dumps = time.process_time, mods["stepgraphs"].dumps
  (tr,) = mods["store"].TraceStore().add_path(trace)
  rw = max(tr.rewrites.values(), key=lambda r: r.matches)
  view = mods["stepgraphs"].StepGraphs(tr, rw, mods["replay"].Replay(tr, rw))
  answers, out = [], {}

  sizes: list[int] = []

  def timed(make) -> float:
    t = cpu()
    b = make()
    ms = (cpu() - t) * 1e3
    answers.append(hashlib.sha1(b).hexdigest())
    sizes.append(len(b))
    return ms

  out["open (step 0 graph)"] = timed(lambda: view.graph_json(0, compact=True))
  sizes.clear()
  arrows = [timed(lambda k=k: dumps(view.delta(k - 1, k, compact=True, rebuilt=True))) for k in range(1, steps + 1)]
  out[f"arrow step 1..{steps}, median"] = statistics.median(arrows)
  out[f"arrow step 1..{steps}, p95"] = sorted(arrows)[round(0.95 * (len(arrows) - 1))]
  s = sorted(sizes)  # (bytes, not ms: the same every round)
  out["  arrow answer KB, largest"], out["  arrow answer KB, p95"] = s[-1] / 1e3, s[round(0.95 * (len(s) - 1))] / 1e3
  out["  arrow answer KB, median"] = statistics.median(s) / 1e3
  arrow_sizes = list(s)
  # then back N..1, as the page asks after stepping on: `held` (the in-edges it keeps of each step it left; a tree
  # whose delta has no such argument sends them)
  held = {"held": True} if "held" in inspect.signature(view.delta).parameters else {}
  sizes.clear()
  backs = [timed(lambda k=k: dumps(view.delta(k, k - 1, compact=True, rebuilt=True, **held)))
           for k in range(steps, 0, -1)]
  out[f"back step {steps}..1, median"] = statistics.median(backs)
  s = sorted(sizes)
  out["  back answer KB, largest"], out["  back answer KB, p95"] = s[-1] / 1e3, s[round(0.95 * (len(s) - 1))] / 1e3
  out["  back answer KB, median"] = statistics.median(s) / 1e3
  out["  back answers over 10 KB (count)"] = sum(b > 10_000 for b in s)
  out["  arrow answers over 10 KB (count)"] = sum(b > 10_000 for b in arrow_sizes)
  out[f"far jump {steps} -> {jump}"] = timed(lambda: dumps(view.delta(steps, jump, compact=True, rebuilt=True)))
  view.replay.ensure(at)
  view.layout(at)
  t = cpu()
  view.replay.ensure(at + span)
  out[f"  replay per step {at + 1}..{at + span}"] = (cpu() - t) * 1e3 / span
  t = cpu()
  for k in range(at + 1, at + span + 1):
    view.layout(k)
  out["  derive per step"] = (cpu() - t) * 1e3 / span
  out["  delta per step"] = statistics.mean(
    timed(lambda k=k: dumps(view.delta(k - 1, k, compact=True, rebuilt=True))) for k in range(at + 1, at + span + 1))
  out["  graph answer (not cached)"] = timed(lambda: dumps(view.graph(at + span, compact=True)))
  return out, answers


def shuffled(mods: dict[str, ModuleType], trace: Path, count: int, top: int, seed: int) -> tuple[float, list[str]]:
  """CPU ms of `count` answers asked in a seeded random order on a fresh view (graphs and deltas between random steps
  up to `top`, as slider clicks and jumps ask them), and their hashes: a layout must not depend on the order asked."""
  rng, dumps = random.Random(seed), mods["stepgraphs"].dumps
  (tr,) = mods["store"].TraceStore().add_path(trace)
  rw = max(tr.rewrites.values(), key=lambda r: r.matches)
  view = mods["stepgraphs"].StepGraphs(tr, rw, mods["replay"].Replay(tr, rw))
  top, answers, cpu = min(top, rw.matches), [], time.process_time
  t = cpu()
  # (replay numbers the nodes it makes in the order it reaches steps, far jumps reaching a step directly: both trees
  # reach them in order first, so the layouts' order of asking is what is compared; not timed)
  view.replay.ensure(top)
  t = cpu()
  for _ in range(count):
    j, k = rng.randint(0, top), rng.randint(0, top)
    graph = rng.random() < 0.3
    b = dumps(view.graph(k, compact=True) if graph else view.delta(j, k, compact=True, rebuilt=True))
    answers.append(hashlib.sha1(b).hexdigest())
  return (cpu() - t) * 1e3, answers


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("trace", type=Path)
  ap.add_argument("--before", type=Path, required=True, help="the other checkout's root (its viz_server is 'before')")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--steps", type=int, default=20, help="arrow steps from step 0")
  ap.add_argument("--jump", type=int, default=200, help="the far jump's target step")
  ap.add_argument("--at", type=int, default=300, help="the part costs are measured after this step")
  ap.add_argument("--span", type=int, default=20)
  ap.add_argument("--shuffle", type=int, default=0, help="then this many answers in a random order on a fresh view")
  ap.add_argument("--shuffle-top", type=int, default=150, help="the highest step the random order asks")
  ap.add_argument("--encoding-changed", action="store_true", help="the answers' encoding changed by design: report "
                  "whether they differ, do not fail (compare the page's model instead: profile_arrow.py --apply)")
  args = ap.parse_args()
  trees = {"before": load_tree(args.before), "after": load_tree(ROOT)}
  gc.collect()
  gc.freeze()
  gc.set_threshold(*GC_THRESHOLDS)  # as the viewer runs (viz_server/__main__.py): else full collections every few
  # steps walk the millions of nodes a long replay made, in either tree's measures
  got: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
  hashes: dict[str, list[str]] = {}
  for _ in range(args.rounds):
    for name, mods in trees.items():
      res, answers = one_round(mods, args.trace, args.steps, args.jump, args.at, args.span)
      for k, v in res.items():
        got[name].setdefault(k, []).append(v)
      if hashes.setdefault(name, answers) != answers:
        raise SystemExit(f"{name}: answers differ between rounds")
      gc.collect()
  for name, mods in (trees.items() if args.shuffle else ()):
    ms, answers = shuffled(mods, args.trace, args.shuffle, args.shuffle_top, seed=1)
    got[name][f"random order, {args.shuffle} answers"] = [ms]
    hashes[name] = hashes[name] + answers
    gc.collect()
  same = hashes["before"] == hashes["after"]
  print(f"{'CPU ms (median of ' + str(args.rounds) + ')':42} {'before':>9} {'after':>9} {'after/before':>12}")
  for k, vs in got["before"].items():
    b, a = statistics.median(vs), statistics.median(got["after"][k])
    print(f"{k:42} {b:9.1f} {a:9.1f} {a / b if b else float('nan'):12.2f}")
  print(f"answers: {len(hashes['after'])} per tree, {'byte-identical' if same else 'DIFFERENT'}")
  if not same and not args.encoding_changed:
    raise SystemExit(1)


if __name__ == "__main__":
  main()
