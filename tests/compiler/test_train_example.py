"""examples/train.py on generated data (no scikit-learn): it trains, and its trace shows the gradient rewrite and the
training step's kernels with their runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]


def test_train_example_records_gradient_and_step_kernels(tmp_path):
  trace = tmp_path / "train.vztrace"
  env = {**os.environ, "VIZ": "-1", "VIZ_TRACE": str(trace), "PYTHONPATH": str(ROOT)}
  env.pop("BACKEND", None)
  out = subprocess.run([sys.executable, str(ROOT / "examples" / "train.py"), "--data", "synthetic", "--model", "mlp",
                        "--steps", "3"], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "epoch 1: loss" in out.stdout and "test accuracy" in out.stdout
  losses = [float(m) for m in re.findall(r"\d+/15 loss ([0-9.]+)", out.stdout)]
  assert len(losses) == 3 and losses[-1] < losses[0]  # it learns
  recs = list(TraceReader(trace))
  ctxs = {r["id"]: r for r in recs if r["t"] == "ctx_begin"}
  grad_ctxs = [c for c in ctxs.values() if c["kind"] == "gradient"]
  assert len(grad_ctxs) == 3  # one backward per step
  grad_rws = [r for r in recs if r["t"] == "rw_begin" and r["name"] == "gradient"]
  assert [ctxs[r["ctx"]]["kind"] for r in grad_rws] == ["gradient"] * 3
  ends = {r["id"]: r for r in recs if r["t"] == "rw_end"}
  assert all(ends[r["id"]]["matches"] > 10 for r in grad_rws)
  # the step after the first backward: one schedule of forward + backward + Adam update kernels, each run
  first = grad_ctxs[0]["id"]
  sched = next(c for c in ctxs.values() if c["kind"] == "schedule" and c["id"] > first)
  kernels = [c for c in ctxs.values() if c["kind"] == "kernel" and sched["id"] < c["id"] < grad_ctxs[1]["id"]]
  ran = {r["ctx"] for r in recs if r["t"] == "run"}
  step_kernels = [k for k in kernels if k["id"] in ran]
  # forward (2 matmuls, loss) + backward (weight and input grads) + one update per parameter tensor (4) at least
  assert len(step_kernels) >= 10, [k["name"] for k in kernels]
