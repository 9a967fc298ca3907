"""Replay alone on a trace's rewrite with the most steps (issue 30: a GPT step's `add bufferize`, ~900 steps of ~3,000
nodes, each rebuilding ~2,000 of them), in process, no layouts:
- the first run over all its steps: CPU ms a step, and the process's RSS growth and the replay's own estimate after;
- then questions about steps in random order (its StepInfo, members, each member's node and birth, what a graph
  answer asks), CPU ms each and the steps replayed again for them (`Replay.replays`, where the replay counts them).
Run it on two trees alternately for a before/after (CPU times compare best on a loaded machine).

  PYTHONPATH=. python bench/bench_replay.py TRACE [--steps N] [--asks 40]
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viz_server.replay import Replay  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402


def rss_mb() -> float:
  got = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
  return int(got["VmRSS"].split()[0]) / 1024


def ask(rp: Replay, k: int) -> None:
  """What a graph answer of step k asks the replay."""
  rp.step(k)
  for n in rp.members(k):
    rp.node(n)
    rp.created(n, k)


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("trace", type=Path)
  ap.add_argument("--steps", type=int, default=None, help="steps of the first run (default: all)")
  ap.add_argument("--asks", type=int, default=40)
  args = ap.parse_args()
  (tr,) = TraceStore().add_path(args.trace)
  rw = max(tr.rewrites.values(), key=lambda r: r.matches)
  n = min(args.steps or rw.matches, rw.matches)
  gc.collect()
  r0 = rss_mb()
  rp = Replay(tr, rw)
  t = time.process_time()
  rp.ensure(n)
  first = (time.process_time() - t) / max(n, 1) * 1e3
  gc.collect()
  print(f"rewrite {rw.id} `{rw.name}`: {n} of {rw.matches} steps; first run {first:.1f} ms CPU a step; "
        f"RSS +{rss_mb() - r0:.0f} MB, estimate {rp.est_bytes() / 2**20:.0f} MB")
  rng, times, again = random.Random(0), [], []
  for _ in range(args.asks):
    k = rng.randrange(n + 1)
    before = getattr(rp, "replays", 0)
    t = time.process_time()
    ask(rp, k)
    times.append((time.process_time() - t) * 1e3)
    again.append(getattr(rp, "replays", 0) - before)
  print(f"{args.asks} questions at random steps: CPU median {statistics.median(times):.0f} ms, max {max(times):.0f} ms;"
        f" steps replayed again: max {max(again)}, total {sum(again)}; RSS now +{rss_mb() - r0:.0f} MB")


if __name__ == "__main__":
  main()
