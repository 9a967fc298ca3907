"""Fuzz of the gradient rewrite: random chains of differentiable ops against a float64 finite-difference oracle.

  python bench/fuzz_gradients.py [--n N] [--seed S] [--backend interp|llvm] [--show K]

A chain is 1-2 random float64 inputs of small random shapes and 2-5 ops drawn from unary ops (each kept on its
domain: log of |x| + 0.5, ...), binary ops with broadcasting, reductions and scans along a random axis, and movement
ops. Its gradient (of the sum of the output times random weights) is checked against central differences along
random directions (tests/support/gradcheck.py's check_gradient). Values are ordinary (normal draws): a kink (relu,
max) lies within the step of a point with probability ~1e-6, so every mismatch is a wrong derivative. Prints a table of
counts per op (chains, failures) and a reproducer for each of the first K failures.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from typing import Any, Callable, NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from support.gradcheck import check_gradient  # noqa: E402

from bench.table import format_table  # noqa: E402
from compiler import Tensor  # noqa: E402

SHAPES = [(3,), (2, 3), (3, 1), (1, 4), (2, 2, 2), (4,), ()]

# each op: a name and the function applied to x (unary), x and the second input y (binary), or x along axis a
UNARY_FN: dict[str, Callable[..., Any]] = {
  "neg": lambda x: -x,
  "exp": lambda x: (x * 0.5).exp(),
  "log": lambda x: (x.abs() + 0.5).log(),
  "sqrt": lambda x: (x * x + 0.3).sqrt(),
  "rsqrt": lambda x: (x * x + 0.3).rsqrt(),
  "reciprocal": lambda x: (x * x + 0.5).reciprocal(),
  "square": lambda x: x.square(),
  "sin": lambda x: x.sin(),
  "cos": lambda x: x.cos(),
  "tanh": lambda x: x.tanh(),
  "sigmoid": lambda x: x.sigmoid(),
  "relu": lambda x: x.relu(),
  "leaky_relu": lambda x: x.leaky_relu(0.2),
  "elu": lambda x: x.elu(),
  "celu": lambda x: x.celu(1.5),
  "selu": lambda x: x.selu(),
  "softplus": lambda x: x.softplus(),
  "logsigmoid": lambda x: x.logsigmoid(),
  "silu": lambda x: x.silu(),
  "gelu": lambda x: x.gelu(),
  "gelu_erf": lambda x: x.gelu('none'),
  "quick_gelu": lambda x: x.quick_gelu(),
  "mish": lambda x: x.mish(),
  "softsign": lambda x: x.softsign(),
  "hardswish": lambda x: x.hardswish(),
  "hardtanh": lambda x: x.hardtanh(-1.5, 1.5),
  "relu6": lambda x: (x * 4).relu6(),
  "abs": lambda x: x.abs(),
  "clip": lambda x: x.clip(-0.8, 0.9),
  "pow_2.5": lambda x: (x.abs() + 0.2) ** 2.5,
  "pow_3": lambda x: x ** 3,
  "pow_-2": lambda x: (x * x + 0.5) ** -2,
  "rpow": lambda x: 1.7 ** x,
  "asin": lambda x: (x * 0.3).tanh().asin(),
  "acos": lambda x: (x * 0.3).tanh().acos(),
  "atan": lambda x: x.atan(),
  "sinh": lambda x: x.sinh(),
  "cosh": lambda x: x.cosh(),
  "asinh": lambda x: x.asinh(),
  "acosh": lambda x: (x * x + 1.2).acosh(),
  "atanh": lambda x: (x * 0.3).tanh().atanh(),
  "erf": lambda x: x.erf(),
  "erf_small": lambda x: (x * 0.1).erf(),
}
BINARY_FN: dict[str, Callable[..., Any]] = {
  "add": lambda x, y: x + y,
  "sub": lambda x, y: x - y,
  "mul": lambda x, y: x * y,
  "div": lambda x, y: x / (y * y + 0.5),
  "maximum": lambda x, y: x.maximum(y),
  "minimum": lambda x, y: x.minimum(y),
  "pow": lambda x, y: (x.abs() + 0.3) ** y,
  "where": lambda x, y: (x > y).where(x * 2, y),
  "lerp": lambda x, y: x.lerp(y, 0.3),
  "copysign": lambda x, y: x.copysign(y),
}
REDUCE_FN: dict[str, Callable[..., Any]] = {
  "sum": lambda x, a: x.sum(a),
  "mean": lambda x, a: x.mean(a),
  "max": lambda x, a: x.max(a),
  "min": lambda x, a: x.min(a),
  "prod": lambda x, a: x.prod(a),
  "logsumexp": lambda x, a: x.logsumexp(a),
  "var": lambda x, a: x.var(a),
  "std": lambda x, a: (x * x + 0.2).std(a),
  "softmax": lambda x, a: x.softmax(a),
  "log_softmax": lambda x, a: x.log_softmax(a),
  "cumsum": lambda x, a: x.cumsum(a),
  "logcumsumexp": lambda x, a: x.logcumsumexp(a),
  "cumprod": lambda x, a: x.cumprod(a),
  "layernorm": lambda x, a: x.layernorm(a),
}
MOVEMENT_FN: dict[str, Callable[..., Any]] = {
  "flatten": lambda x, a: x.flatten(),
  "flip": lambda x, a: x.flip(a),
  "transpose": lambda x, a: x.transpose(a, -1),
  "pad": lambda x, a: x.pad(((1, 2),) + ((0, 0),) * (x.ndim - 1), value=0.37),
  "shrink": lambda x, a: x.shrink(((0, x.shape[0] - 1),) + (None,) * (x.ndim - 1)),
  "expand": lambda x, a: x.unsqueeze(0).expand(2, *x.shape),
  "repeat": lambda x, a: x.repeat(2, *([1] * (x.ndim - 1))),
  "contiguous": lambda x, a: (x * 1.5).contiguous(),
}
KINDS = {"unary": UNARY_FN, "binary": BINARY_FN, "reduce": REDUCE_FN, "movement": MOVEMENT_FN}


class Step(NamedTuple):
  """One op of a chain: its kind and name, the index of its second input (binary) and its axis (reduce, movement)."""
  kind: str
  name: str
  y: int | None
  a: int | None

  def __repr__(self) -> str:
    return f"{self.name}(" + ", ".join(f"{k}={v}" for k, v in (("y", self.y), ("a", self.a)) if v is not None) + ")"


def _moved(name: str, p: np.ndarray, a: int) -> np.ndarray:
  """A movement step's output, of numpy's zeros (for its shape)."""
  if name == "flatten":
    return p.reshape(-1)
  if name == "transpose":
    return np.swapaxes(p, a, -1)
  if name == "pad":
    return np.pad(p, ((1, 2),) + ((0, 0),) * (p.ndim - 1))
  if name == "shrink":
    return p[:-1]
  if name == "expand":
    return np.broadcast_to(p, (2, *p.shape))
  return np.tile(p, (2,) + (1,) * (p.ndim - 1)) if name == "repeat" else p


def random_chain(rng: np.random.Generator) -> tuple[list[Step], list[np.ndarray]]:
  """The steps and inputs of one chain; every step keeps x a float tensor with >= 1 dim
  where a step needs one."""
  shape = SHAPES[rng.integers(len(SHAPES))]
  x = np.asarray(rng.standard_normal(shape))
  inputs = [x]
  steps: list[Step] = []
  nd = len(shape)
  dims = list(shape)
  copies = False
  for _ in range(int(rng.integers(2, 6))):
    kind = ["unary", "unary", "binary", "reduce", "movement"][rng.integers(5)]
    if kind in ("reduce", "movement") and nd == 0:
      kind = "unary"
    if kind == "movement" and dims[0] < 2:
      kind = "unary"
    name = list(KINDS[kind])[rng.integers(len(KINDS[kind]))]
    a = int(rng.integers(nd)) if nd else None
    y = None
    if kind == "binary":
      # y broadcasts: the same shape, a size-1 dim, fewer leading dims, or 0-d; a second input or a constant
      yshape = [tuple(dims), tuple(1 if i == a else d for i, d in enumerate(dims)), tuple(dims[1:]), ()][
        rng.integers(4)]
      inputs.append(np.asarray(rng.standard_normal(yshape)))
      y = len(inputs) - 1
    elif kind == "reduce":
      if copies and name in ("max", "min"):  # equal copies tie: max is not differentiable there
        name = "logsumexp"
      if name in ("sum", "mean", "max", "min", "prod", "logsumexp", "var", "std") and rng.integers(3) == 0:
        a = None
      if name in ("var", "std") and (dims[a] if a is not None else int(np.prod(dims))) < 2:
        name = "sum"
    copies = copies or name in ("expand", "repeat")
    steps.append(Step(kind, name, y, a if kind in ("reduce", "movement") else None))
    probe = np.zeros(dims)  # the output shape, from numpy's rules for the few shape-changing steps
    if kind == "reduce" and name not in ("softmax", "log_softmax", "cumsum", "logcumsumexp", "cumprod", "layernorm"):
      probe = probe.sum(a)
    elif kind == "movement":
      probe = _moved(name, probe, a)
    dims, nd = list(probe.shape), probe.ndim
    if 0 in dims:
      break
  return steps, inputs


def apply_step(step: Step, x: Any, inputs: tuple) -> Any:
  f = KINDS[step.kind][step.name]
  if step.kind == "unary":
    return f(x)
  return f(x, inputs[step.y]) if step.kind == "binary" else f(x, step.a)


def chain_fn(steps: list[Step], n_inputs: int) -> Callable[..., Any]:
  def fn(*ts: Any) -> Any:
    x = ts[0]
    for step in steps:
      x = apply_step(step, x, ts)
    return x
  assert n_inputs >= 1
  return fn


def run_fuzz(n: int, seed: int, directions: int = 2) -> dict:
  """Check n random chains, each along `directions` random directions; the counts, per
  op, and the failures' reports."""
  rng = np.random.default_rng(seed)
  counts: dict = {"chains": 0, "checks": 0, "failures": 0, "skipped": 0, "reports": []}
  per_op: Counter = Counter()
  failed_op: Counter = Counter()
  start = time.perf_counter()
  while counts["chains"] < n:
    steps, inputs = random_chain(rng)
    fn = chain_fn(steps, len(inputs))
    names = [step.name for step in steps]
    try:
      check_gradient(fn, *inputs, rng=rng, directions=directions, rtol=1e-5, atol=1e-7)
    except Exception as e:  # noqa: BLE001 - an error is a failure too, reported with its chain
      with np.errstate(all="ignore"):
        out = fn(*(Tensor(a) for a in inputs)).numpy()
      if out.size == 0 or not np.isfinite(out).all() or np.abs(out).max() > 1e6:
        counts["skipped"] += 1  # (an overflowing chain has no finite differences to compare with)
        continue
      counts["chains"] += 1
      counts["checks"] += directions
      per_op.update(names)
      counts["failures"] += 1
      failed_op.update(names)
      counts["reports"].append(f"inputs {[a.shape for a in inputs]} steps {steps}: {type(e).__name__}: "
                               f"{str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}")
      continue
    counts["chains"] += 1
    counts["checks"] += directions
    per_op.update(names)
  counts["per_op"] = {k: (per_op[k], failed_op[k]) for k in sorted(per_op)}
  counts["seconds"] = time.perf_counter() - start
  return counts


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--n", type=int, default=300, help="chains to check")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--backend", default="interp", choices=["interp", "llvm"])
  p.add_argument("--directions", type=int, default=2, help="random directions checked per chain")
  p.add_argument("--show", type=int, default=5, help="failures to print")
  args = p.parse_args()
  os.environ["BACKEND"] = args.backend
  c = run_fuzz(args.n, args.seed, directions=args.directions)
  print(format_table([("op", "<14"), ("chains", ">7d"), ("failures", ">9d")],
                     [(k, v[0], v[1]) for k, v in c["per_op"].items()]))
  print()
  print(format_table([("chains", ">7d"), ("checks", ">7d"), ("failures", ">9d"), ("skipped", ">8d"),
                      ("seconds", ">8.1f")], [(c["chains"], c["checks"], c["failures"], c["skipped"], c["seconds"])]))
  for r in c["reports"][:args.show]:
    print("FAIL", r)


if __name__ == "__main__":
  main()
