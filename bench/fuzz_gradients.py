"""Fuzz of the gradient rewrite: random chains of differentiable ops against a float64 finite-difference oracle.

  python bench/fuzz_gradients.py [--n N] [--seed S] [--backend interp|llvm] [--show K]

A chain is 1-2 random float64 inputs of small random shapes and 2-5 ops drawn from unary ops (each kept on its
domain: log of |x| + 0.5, ...), binary ops with broadcasting, reductions and scans along a random axis, and movement
ops. Its gradient (of the sum of the output times random weights) is checked against central differences along
random directions (tests/gradcheck.py's check_gradient). Values are ordinary (normal draws): a kink (relu, max) lies
within the step of a point with probability ~1e-6, so every mismatch is a wrong derivative. Prints a table of
counts per op (chains, failures) and a reproducer for each of the first K failures.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from gradcheck import check_gradient  # noqa: E402

from bench.table import format_table  # noqa: E402
from compiler import Tensor  # noqa: E402

SHAPES = [(3,), (2, 3), (3, 1), (1, 4), (2, 2, 2), (4,), ()]

# each op: a name and the code applied to `x` (unary) or `x, y` (binary): eval'd, so a failure prints as code
UNARY = {
  "neg": "-x", "exp": "(x * 0.5).exp()", "log": "(x.abs() + 0.5).log()", "sqrt": "(x * x + 0.3).sqrt()",
  "rsqrt": "(x * x + 0.3).rsqrt()", "reciprocal": "(x * x + 0.5).reciprocal()", "square": "x.square()",
  "sin": "x.sin()", "cos": "x.cos()", "tanh": "x.tanh()", "sigmoid": "x.sigmoid()", "relu": "x.relu()",
  "leaky_relu": "x.leaky_relu(0.2)", "elu": "x.elu()", "celu": "x.celu(1.5)", "selu": "x.selu()",
  "softplus": "x.softplus()", "logsigmoid": "x.logsigmoid()", "silu": "x.silu()", "gelu": "x.gelu()",
  "gelu_erf": "x.gelu('none')", "quick_gelu": "x.quick_gelu()", "mish": "x.mish()", "softsign": "x.softsign()",
  "hardswish": "x.hardswish()", "hardtanh": "x.hardtanh(-1.5, 1.5)", "relu6": "(x * 4).relu6()", "abs": "x.abs()",
  "clip": "x.clip(-0.8, 0.9)", "pow_2.5": "(x.abs() + 0.2) ** 2.5", "pow_3": "x ** 3", "pow_-2": "(x * x + 0.5) ** -2",
  "rpow": "1.7 ** x", "asin": "(x * 0.3).tanh().asin()", "acos": "(x * 0.3).tanh().acos()", "atan": "x.atan()",
  "sinh": "x.sinh()", "cosh": "x.cosh()", "asinh": "x.asinh()", "acosh": "(x * x + 1.2).acosh()",
  "atanh": "(x * 0.3).tanh().atanh()", "erf": "x.erf()", "erf_small": "(x * 0.1).erf()",
}
BINARY = {
  "add": "x + Y", "sub": "x - Y", "mul": "x * Y", "div": "x / (Y * Y + 0.5)", "maximum": "x.maximum(Y)",
  "minimum": "x.minimum(Y)", "pow": "(x.abs() + 0.3) ** Y", "where": "(x > Y).where(x * 2, Y)",
  "lerp": "x.lerp(Y, 0.3)", "copysign": "x.copysign(Y)",
}
# along axis `a` (a valid axis of x, or None for all)
REDUCE = {
  "sum": "x.sum(a)", "mean": "x.mean(a)", "max": "x.max(a)", "min": "x.min(a)", "prod": "x.prod(a)",
  "logsumexp": "x.logsumexp(a)", "var": "x.var(a)", "std": "(x * x + 0.2).std(a)", "softmax": "x.softmax(a)",
  "log_softmax": "x.log_softmax(a)", "cumsum": "x.cumsum(a)", "logcumsumexp": "x.logcumsumexp(a)",
  "cumprod": "x.cumprod(a)", "layernorm": "x.layernorm(a)",
}
MOVEMENT = {
  "flatten": "x.flatten()", "flip": "x.flip(a)", "transpose": "x.transpose(a, -1)", "pad": "x.pad(((1, 2),) + "
  "((0, 0),) * (x.ndim - 1), value=0.37)", "shrink": "x.shrink(((0, x.shape[0] - 1),) + (None,) * (x.ndim - 1))",
  "expand": "x.unsqueeze(0).expand(2, *x.shape)", "repeat": "x.repeat(2, *([1] * (x.ndim - 1)))",
  "contiguous": "(x * 1.5).contiguous()",
}
KINDS = {"unary": UNARY, "binary": BINARY, "reduce": REDUCE, "movement": MOVEMENT}


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


def random_chain(rng: np.random.Generator) -> tuple[list[str], list[np.ndarray]]:
  """The steps (code lines over x, y, a) and inputs of one chain; every step keeps x a float tensor with >= 1 dim
  where a step needs one."""
  shape = SHAPES[rng.integers(len(SHAPES))]
  x = np.asarray(rng.standard_normal(shape))
  inputs = [x]
  steps: list[str] = []
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
    code = KINDS[kind][name]
    a = int(rng.integers(nd)) if nd else None
    if kind == "binary":
      # y broadcasts: the same shape, a size-1 dim, fewer leading dims, or 0-d; a second input or a constant
      yshape = [tuple(dims), tuple(1 if i == a else d for i, d in enumerate(dims)), tuple(dims[1:]), ()][
        rng.integers(4)]
      inputs.append(np.asarray(rng.standard_normal(yshape)))
      code = code.replace("Y", f"inputs[{len(inputs) - 1}]")
    elif kind == "reduce":
      if copies and name in ("max", "min"):  # equal copies tie: max is not differentiable there
        name, code = "logsumexp", REDUCE["logsumexp"]
      if name in ("sum", "mean", "max", "min", "prod", "logsumexp", "var", "std") and rng.integers(3) == 0:
        a = None
      if name in ("var", "std") and (dims[a] if a is not None else int(np.prod(dims))) < 2:
        name, code = "sum", REDUCE["sum"]
    copies = copies or name in ("expand", "repeat")
    steps.append(f"{name}: " + code.replace("(a)", f"({a})").replace("(a,", f"({a},"))
    probe = np.zeros(dims)  # the output shape, from numpy's rules for the few shape-changing steps
    if kind == "reduce" and name not in ("softmax", "log_softmax", "cumsum", "logcumsumexp", "cumprod", "layernorm"):
      probe = probe.sum(a)
    elif kind == "movement":
      probe = _moved(name, probe, a)
    dims, nd = list(probe.shape), probe.ndim
    if 0 in dims:
      break
  return steps, inputs


def chain_fn(steps: list[str], n_inputs: int) -> Callable[..., Any]:
  def fn(*ts: Any) -> Any:
    x, inputs = ts[0], ts
    for s in steps:
      x = eval(s.split(": ", 1)[1], {"inputs": inputs}, {"x": x})
    return x
  assert n_inputs >= 1
  return fn


def run_fuzz(n: int, seed: int, budget_s: float = float("inf"), directions: int = 2) -> dict:
  """Check n random chains (fewer if budget_s runs out), each along `directions` random directions; the counts, per
  op, and the failures' reports."""
  rng = np.random.default_rng(seed)
  counts: dict = {"chains": 0, "checks": 0, "failures": 0, "skipped": 0, "reports": []}
  per_op: Counter = Counter()
  failed_op: Counter = Counter()
  start = time.perf_counter()
  while counts["chains"] < n and time.perf_counter() - start < budget_s:
    steps, inputs = random_chain(rng)
    fn = chain_fn(steps, len(inputs))
    names = [s.split(":")[0] for s in steps]
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
