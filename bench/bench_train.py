"""One training step of the bench MLP (batch 64): forward + backward + SGD update, tinyviz vs hand-written numpy.

Columns: kernels per step, the median time per step (building the graph, the gradient rewrite, scheduling, compiled
kernels) and its parts, and time/numpy, where numpy is a hand-written forward + backward + update of the same model
(float32, same math) run in the same process, the two alternating step by step. The first steps (compiling) are
warm-up and not timed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.table import format_table  # noqa: E402
from bench.workloads import mlp  # noqa: E402
from compiler import Tensor, nn  # noqa: E402
from compiler.schedule import create_schedule  # noqa: E402
from compiler.tensor import _realized  # noqa: E402

LR = 0.01


def _labels(n: int, seed: int = 1) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 10, n).astype(np.int32)


def numpy_step(x: np.ndarray, y: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> float:
  """Forward, backward of the mean cross-entropy of log_softmax(relu(x @ w1) @ w2), and w -= lr * grad, in place."""
  h = x @ w1
  a = np.maximum(h, 0)
  z = a @ w2
  z = z - z.max(-1, keepdims=True)
  e = np.exp(z)
  s = e.sum(-1, keepdims=True)
  n = len(x)
  loss = float(np.log(s).mean() - z[np.arange(n), y].mean())
  dz = e / s
  dz[np.arange(n), y] -= 1
  dz /= n
  dw2 = a.T @ dz
  da = dz @ w2.T
  da *= h > 0
  dw1 = x.T @ da
  w1 -= LR * dw1
  w2 -= LR * dw2
  return loss


def tinyviz_step(x: Tensor, y: Tensor, w1: Tensor, w2: Tensor, opt: nn.optim.SGD) -> tuple[Tensor, list]:
  """Build the step's graph (forward, the gradient rewrite, the update); returns the loss and what to realize."""
  opt.zero_grad()
  loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
  loss.backward()
  return loss, [loss, *opt.schedule_step()]


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=15)
  ap.add_argument("--warmup", type=int, default=3)
  args = ap.parse_args(argv)
  wl = mlp()
  x_np, w1_np, w2_np = wl.inputs
  y_np = _labels(len(x_np))
  x, y = Tensor(x_np), Tensor(y_np)
  w1, w2 = Tensor(w1_np.copy(), requires_grad=True), Tensor(w2_np.copy(), requires_grad=True)
  opt = nn.optim.SGD([w1, w2], lr=LR)
  ref_w1, ref_w2 = w1_np.copy(), w2_np.copy()
  times, builds, ref_times, kernels, losses, ref_losses = [], [], [], 0, [], []
  # the two steps alternate, so a machine's changing load reaches both alike
  for i in range(args.warmup + args.steps):
    t0 = time.perf_counter()
    loss, outs = tinyviz_step(x, y, w1, w2, opt)
    t1 = time.perf_counter()
    if i == 0:
      kernels = len(create_schedule([t.uop for t in outs], _realized)[0])
    Tensor.realize(*outs)
    t2 = time.perf_counter()
    losses.append(loss.item())
    t3 = time.perf_counter()
    ref_losses.append(numpy_step(x_np, y_np, ref_w1, ref_w2))
    t4 = time.perf_counter()
    if i >= args.warmup:
      times.append(t2 - t0)
      builds.append(t1 - t0)
      ref_times.append(t4 - t3)
  # the same model trained the same way: the losses agree step by step
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-3)
  t, b, r = statistics.median(times), statistics.median(builds), statistics.median(ref_times)
  cols = [("step", "<26"), ("kernels", ">7"), ("ms/step", ">9.2f"), ("graph+grad ms", ">13.2f"),
          ("schedule+run ms", ">15.2f"), ("vs numpy", ">8.2f")]
  rows = [("tinyviz MLP SGD batch 64", kernels, t * 1e3, b * 1e3, (t - b) * 1e3, t / r),
          ("numpy by hand", "-", r * 1e3, 0.0, r * 1e3, 1.0)]
  print(format_table(cols, rows))
  print(f"losses agree over {len(losses)} steps: {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
  main()
