"""One training step of the bench MLP (batch 64): forward + backward + SGD or Adam update, tinyviz vs numpy by hand.

Columns: kernels per step (forward, backward and the optimizer's update), the median time per step (building the
graph, the gradient rewrite, scheduling, compiled kernels) and its parts, numpy's time and time/numpy, where numpy is
a hand-written forward + backward + update of the same model (float32, same math) run in the same process, the two
alternating step by step. The first steps (compiling) are warm-up and not timed. `--jit` adds a row per optimizer
with the step a `TinyJit` (timed on the replays: no graph, gradient or schedule built; "schedule+run" is the replay).

Both sides run on `--threads` cores (ours: THREADS; numpy's BLAS: threadpoolctl), 1 by default, timed by CPU time
(process_time) so that other load on the machine does not skew the ratio; with more threads, by the clock. (With
its BLAS unlimited on the loaded 2-core machine, numpy's step took 90 ms instead of 1.5: its threads waited for
cores, and spun on ours.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.table import format_table  # noqa: E402
from bench.workloads import mlp  # noqa: E402
from compiler import Tensor, TinyJit, nn  # noqa: E402
from compiler.schedule.rangeify import create_schedule  # noqa: E402
from compiler.tensor import _realized  # noqa: E402

LR = 0.01
# A float32 loss mean(log(s) - z_y) is made of O(1) terms (s >= 1 the sum of exps, z_y <= 0), each resolved to about
# float32's epsilon: near a zero loss two correct float32 losses differ by that much, whatever their relative
# difference (at step 60 of Adam, loss 1.8e-6: ours and numpy's float32 losses are 1.0e-3 apart, each ~5e-9 from its
# float64 value, while the float64 losses of the two sides' weights agree to 1.1e-4)
LOSS_ATOL = float(np.finfo(np.float32).eps)


def _labels(n: int, seed: int = 1) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 10, n).astype(np.int32)


def numpy_grads(x: np.ndarray, y: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> tuple[float, list[np.ndarray]]:
  """Forward and backward of the mean cross-entropy of log_softmax(relu(x @ w1) @ w2): the loss and (dw1, dw2)."""
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
  return loss, [dw1, dw2]


def loss64(x: np.ndarray, y: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> float:
  """The loss of these weights in float64 (no float32 rounding in the comparison of two trainings' weights)."""
  return numpy_grads(x.astype(np.float64), y, w1.astype(np.float64), w2.astype(np.float64))[0]


class NumpySGD:
  """w -= lr * grad, in place."""

  def __init__(self, ws: list[np.ndarray]):
    self.ws = ws

  def update(self, grads: list[np.ndarray]) -> None:
    for w, g in zip(self.ws, grads):
      w -= LR * g


class NumpyAdam:
  """Adam (b1 0.9, b2 0.999, eps 1e-8) in float32, in place: the update tinyviz's nn.optim.Adam computes."""

  def __init__(self, ws: list[np.ndarray]):
    self.ws, self.t = ws, 0
    self.m, self.v = [np.zeros_like(w) for w in ws], [np.zeros_like(w) for w in ws]

  def update(self, grads: list[np.ndarray]) -> None:
    self.t += 1
    for w, g, m, v in zip(self.ws, grads, self.m, self.v):
      m *= 0.9
      m += 0.1 * g
      v *= 0.999
      v += 0.001 * g * g
      w -= LR * (m / (1 - 0.9 ** self.t)) / (np.sqrt(v / (1 - 0.999 ** self.t)) + 1e-8)


def tinyviz_step(x: Tensor, y: Tensor, w1: Tensor, w2: Tensor, opt: nn.optim.Optimizer) -> tuple[Tensor, list]:
  """Build the step's graph (forward, the gradient rewrite, the update); returns the loss and what to realize."""
  opt.zero_grad()
  loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
  loss.backward()
  return loss, [loss, *opt.schedule_step()]


def jitted_step(w1: Tensor, w2: Tensor, opt: nn.optim.Optimizer) -> TinyJit:
  """The step as a tinygrad user jits it: after two calls, a call replays the captured kernels."""
  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    loss, outs = tinyviz_step(x, y, w1, w2, opt)
    Tensor.realize(*outs)
    return loss
  return step


def measure(name: str, steps: int, warmup: int, clock=time.perf_counter,
            jit: bool = False) -> tuple[int, float, float, float]:
  """One optimizer's training run: kernels per step and the median seconds per step (all, graph+grad) and numpy's,
  by `clock`. jit: the step is a TinyJit (its first 2 calls, plain and capture, are warm-up: `warmup` >= 2)."""
  wl = mlp()
  x_np, w1_np, w2_np = wl.inputs
  y_np = _labels(len(x_np))
  x, y = Tensor(x_np), Tensor(y_np)
  w1, w2 = Tensor(w1_np.copy(), requires_grad=True), Tensor(w2_np.copy(), requires_grad=True)
  opt = nn.optim.SGD([w1, w2], lr=LR) if name == "SGD" else nn.optim.Adam([w1, w2], lr=LR)
  ref_ws = [w1_np.copy(), w2_np.copy()]
  ref_opt = NumpySGD(ref_ws) if name == "SGD" else NumpyAdam(ref_ws)
  times, builds, ref_times, kernels, losses, ref_losses = [], [], [], 0, [], []
  step = jitted_step(w1, w2, opt) if jit else None
  warmup = max(warmup, 2) if jit else warmup
  # the two steps alternate, so a machine's changing load reaches both alike
  for i in range(warmup + steps):
    t0 = clock()
    if step is not None:  # no graph or gradient built, after the capture
      loss = step(x, y)
      t1 = t0
    else:
      loss, outs = tinyviz_step(x, y, w1, w2, opt)
      t1 = clock()
      if i == 0:
        kernels = len(create_schedule([t.uop for t in outs], dict(_realized))[0])
      Tensor.realize(*outs)
    t2 = clock()
    losses.append(loss.item())
    t3 = clock()
    ref_loss, grads = numpy_grads(x_np, y_np, *ref_ws)
    ref_opt.update(grads)
    ref_losses.append(ref_loss)
    t4 = clock()
    if i >= warmup:
      times.append(t2 - t0)
      builds.append(t1 - t0)
      ref_times.append(t4 - t3)
  # the same model trained the same way: the losses agree step by step, and so do the weights they reach
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-3, atol=LOSS_ATOL)
  for w, ref in zip((w1, w2), ref_ws):
    np.testing.assert_allclose(w.numpy(), ref, rtol=0, atol=1e-3 * np.abs(ref).max())
  exact = [loss64(x_np, y_np, *ws) for ws in ([w1.numpy(), w2.numpy()], ref_ws)]
  np.testing.assert_allclose(exact[0], exact[1], rtol=1e-3)
  if step is not None:
    kernels = len(step.captured.calls)
  print(f"{name}{' jit' if jit else ''}: losses agree over {len(losses)} steps: {losses[0]:.4f} -> {losses[-1]:.3g}")
  return kernels, statistics.median(times), statistics.median(builds), statistics.median(ref_times)


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=15)
  ap.add_argument("--warmup", type=int, default=3)
  ap.add_argument("--opt", default="SGD,Adam", help="the optimizers to measure")
  ap.add_argument("--threads", type=int, default=1, help="cores for each side (1: timed by CPU time)")
  ap.add_argument("--jit", action="store_true", help="also a row per optimizer with the step a TinyJit")
  args = ap.parse_args(argv)
  from threadpoolctl import threadpool_limits
  os.environ["THREADS"] = str(args.threads)  # (read when a kernel is compiled: none is yet)
  threadpool_limits(args.threads)
  clock = time.process_time if args.threads == 1 else time.perf_counter
  print(f"{args.threads} thread{'s' if args.threads > 1 else ''} each, by {clock.__name__}")
  cols = [("step", "<27"), ("kernels", ">7"), ("ms/step", ">9.2f"), ("graph+grad ms", ">13.2f"),
          ("schedule+run ms", ">15.2f"), ("numpy ms", ">9.2f"), ("vs numpy", ">8.2f")]
  rows = []
  for name in args.opt.split(","):
    kernels, t, b, r = measure(name, args.steps, args.warmup, clock)
    rows.append((f"tinyviz MLP {name} batch 64", kernels, t * 1e3, b * 1e3, (t - b) * 1e3, r * 1e3, t / r))
    if args.jit:
      kernels, t, b, r = measure(name, args.steps, args.warmup, clock, jit=True)
      rows.append((f"  {name} TinyJit (replay)", kernels, t * 1e3, b * 1e3, (t - b) * 1e3, r * 1e3, t / r))
  print(format_table(cols, rows))


if __name__ == "__main__":
  main()
