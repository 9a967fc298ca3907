"""The kernels backward passes produce (issue 29), each timed alone under the heuristics, NOOPT and BEAM.

Each case is a real tensor program at issue 29's shapes whose backward gives the kernel(s) measured:
- mnist_wgrad: beautiful_mnist's conv2 (32 -> 32, 5x5 on 24x24, batch 512): the weight gradient;
- resnet_wgrad / resnet_igrad: a residual block's conv (64 -> 64, 3x3, pad 1, on 32x32, batch 16): weight and
  input gradients;
- attn_bwd: GPT attention (d=256, 4 heads, seq 128, batch 4): the backward matmuls (A^T B: dv, dk; A B^T: dp);
- qkv_bwd: the qkv projection (512 tokens x 256 -> 768): dW = x^T dY (A^T B), dx = dY W^T (A B^T).
A case's measured kernels are its schedule's reduce kernels doing at least 1/8 of the largest one's work; the other
kernels run with the heuristics to fill their inputs. Every variant's whole schedule is checked against a float64
numpy reference of the case's outputs. Times: the min of `--reps` runs of the kernel alone (CompiledKernel.time),
the variants of a kernel timed in turns; GFLOP/s from the kernel's multiply-adds (2 flops each), and the fraction of
this core's FMA peak, measured by a loop of independent vector FMAs (registers only) at the host's vector width, per
thread used.
Each thread count runs in a child process (THREADS=n: the heuristics split kernels for n cores).
--real mnist,resnet,gpt_step measures the real programs' own kernels instead (bench/real_models.py, issue 29's
shapes; a conv's weight gradient there has BatchNorm's backward fused in): the slowest big reduce kernels of one step,
their share of those kernels' time, each variant checked against the unoptimized kernel on the step's own inputs.

  .venv/bin/python bench/bench_backward.py [--scale 1.0] [--reps 5] [--only mnist_wgrad,...] [--threads 1,2]
      [--real mnist,resnet,gpt_step [--top 4]] [--variants heuristic,noopt,beam]
      [--beam 2] (BEAM's width; results cached as BEAM's are) [--beam-rounds 4]
      [--baseline OLD/heuristic.py --variants baseline,heuristic] (an earlier version's heuristics, side by side)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from table import format_table  # noqa: E402

Case = Callable[[float], tuple[list[Any], Callable[[], list[np.ndarray]]]]


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


def _dim(n: int, scale: float) -> int:
  return max(1, int(round(n * scale)))


def _windows(x: np.ndarray, kh: int, kw: int) -> np.ndarray:
  """(n, c, oh, ow, kh, kw) sliding windows of x (n, c, h, w)."""
  return np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))


def _conv_case(n: int, c: int, hw: int, ks: int, pad: int, which: str, scale: float):
  """A conv's weight (which="w") or input ("x") gradient of sum(conv(x, w) * g)."""
  from compiler import Tensor
  rng = np.random.default_rng(0)
  n = _dim(n, scale)
  x, w = _rand(rng, n, c, hw, hw), _rand(rng, c, c, ks, ks)
  o = hw + 2 * pad - ks + 1
  g = _rand(rng, n, c, o, o)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  (tx.conv2d(tw, padding=pad) * Tensor(g)).sum().backward()

  def ref() -> list[np.ndarray]:
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
    if which == "w":
      return [np.einsum("nchwij,nohw->ocij", _windows(np.pad(x64, ((0, 0), (0, 0), (pad, pad), (pad, pad))), ks, ks),
                        g64, optimize=True)]
    # dx: g padded by ks-1-pad, correlated with the flipped, transposed weights
    gp = np.pad(g64, ((0, 0), (0, 0), (ks - 1 - pad,) * 2, (ks - 1 - pad,) * 2))
    return [np.einsum("nohwij,ocij->nchw", _windows(gp, ks, ks), w64[:, :, ::-1, ::-1], optimize=True)]
  return [(tw if which == "w" else tx).grad], ref


def _attn_case(scale: float):
  """Attention's backward matmuls: q, k, v of (batch, heads, seq, head dim)."""
  from compiler import Tensor
  rng = np.random.default_rng(0)
  b, h, t, d = _dim(4, scale), 4, 128, 64
  q, k, v, g = (_rand(rng, b, h, t, d) for _ in range(4))
  tq, tk, tv = (Tensor(a, requires_grad=True) for a in (q, k, v))
  p = (tq @ tk.transpose(-2, -1) / math.sqrt(d)).softmax(-1)
  ((p @ tv) * Tensor(g)).sum().backward()

  def ref() -> list[np.ndarray]:
    q64, k64, v64, g64 = (a.astype(np.float64) for a in (q, k, v, g))
    s = q64 @ k64.swapaxes(-2, -1) / math.sqrt(d)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    dp = g64 @ v64.swapaxes(-2, -1)
    ds = pr * (dp - (dp * pr).sum(-1, keepdims=True)) / math.sqrt(d)
    return [ds @ k64, ds.swapaxes(-2, -1) @ q64, pr.swapaxes(-2, -1) @ g64]
  return [tq.grad, tk.grad, tv.grad], ref


def _linear_case(scale: float):
  """The qkv projection's backward: x (tokens, d) @ W (d, 3d)."""
  from compiler import Tensor
  rng = np.random.default_rng(0)
  m, d = _dim(512, scale), 256
  x, w, g = _rand(rng, m, d), _rand(rng, d, 3 * d), _rand(rng, m, 3 * d)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  ((tx @ tw) * Tensor(g)).sum().backward()
  return [tw.grad, tx.grad], lambda: [x.astype(np.float64).T @ g, g.astype(np.float64) @ w.T.astype(np.float64)]


CASES: dict[str, Case] = {
  "mnist_wgrad": lambda s: _conv_case(512, 32, 24, 5, 0, "w", s),
  "resnet_wgrad": lambda s: _conv_case(16, 64, 32, 3, 1, "w", s),
  "resnet_igrad": lambda s: _conv_case(16, 64, 32, 3, 1, "x", s),
  "attn_bwd": _attn_case,
  "qkv_bwd": _linear_case,
}


# ---- this core's FMA peak

def fma_peak_gflops(vec: int, reps: int = 50) -> float:
  """GFLOP/s of one thread running independent <vec x float> FMA chains (registers only): the machine's limit."""
  import ctypes

  from compiler.runtime.llvm import get_jit
  chains, n = 12, 1 << 16  # short runs, the best of many: a loaded machine preempts a long one
  vt = f"<{vec} x float>"
  phis = "\n".join(f"  %a{i} = phi {vt} [ zeroinitializer, %entry ], [ %b{i}, %loop ]" for i in range(chains))
  fmas = "\n".join(f"  %b{i} = call {vt} @llvm.fma.v{vec}f32({vt} %a{i}, {vt} %x, {vt} %y)" for i in range(chains))
  sums = "\n".join(f"  %s{i} = fadd {vt} %s{i - 1}, %b{i}" for i in range(1, chains))
  ir = f"""
declare {vt} @llvm.fma.v{vec}f32({vt}, {vt}, {vt})
define void @fma_peak(ptr %out, i64 %n) {{
entry:
  %x = insertelement {vt} zeroinitializer, float 0.5, i32 0
  %y = insertelement {vt} zeroinitializer, float 1.0, i32 0
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
{phis}
{fmas}
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %done
done:
  %s0 = fadd {vt} %b0, zeroinitializer
{sums}
  store {vt} %s{chains - 1}, ptr %out, align 4
  ret void
}}"""
  jf, _ = get_jit().compile(ir, "fma_peak", want_text=False)
  fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(jf.address)
  out = np.zeros(vec, np.float32)
  best = math.inf
  for _ in range(reps):
    t0 = time.perf_counter()
    fn(out.ctypes.data, n)
    best = min(best, time.perf_counter() - t0)
  return chains * vec * 2 * n / best / 1e9


# ---- one thread count, in a child process

def _macs(k) -> int:
  """Multiply-adds of a kernel: outputs x reduce length (the unoptimized kernel's axes)."""
  return math.prod(s for s in k.full_shape if isinstance(s, int))


BASELINE: Any = None  # --baseline: another version's heuristics module, its opts timed as the variant "baseline"


def _load_baseline(path: str) -> Any:
  """A heuristic.py of another version (e.g. `git show HEAD:compiler/opt/heuristic.py`) as a module of its own, on
  this version's Kernel, with its own version of what it imports from kernel.py where that differs (masked_axes)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location("baseline_heuristic", path)
  assert spec is not None and spec.loader is not None
  mod = sys.modules["baseline_heuristic"] = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  kernel_py = Path(path).with_name("kernel.py")
  if kernel_py.exists():
    kspec = importlib.util.spec_from_file_location("baseline_kernel", kernel_py)
    assert kspec is not None and kspec.loader is not None
    kmod = sys.modules["baseline_kernel"] = importlib.util.module_from_spec(kspec)  # (its dataclasses look it up)
    kspec.loader.exec_module(kmod)
    mod.masked_axes = lambda k: kmod.masked_axes(k)  # (its function reads only the Kernel's fields)
  return mod


def _variants(ast, bufs, which: list[str], beam: int, rounds: int) -> dict[str, Any]:
  """{variant: the optimized Kernel} of one kernel AST, for the variants named in `which`."""
  from compiler.engine import timed_beam_search
  from compiler.opt import Kernel, hand_coded_optimizations
  make = {"heuristic": lambda: hand_coded_optimizations(Kernel(ast)), "noopt": lambda: Kernel(ast),
          "beam": lambda: timed_beam_search(Kernel(ast), bufs, beam, max_rounds=rounds, progress=False),
          "baseline": lambda: BASELINE.hand_coded_optimizations(Kernel(ast))}
  return {v: make[v]() for v in which if (v != "beam" or beam) and (v != "baseline" or BASELINE is not None)}


def _interleaved(runs: dict[str, tuple[Any, list[Any]]], reps: int, rounds: int = 3) -> dict[str, float]:
  """{variant: min seconds} of compiled kernels on their buffers, timed in turns (`rounds` of `reps` runs each), so
  that a change in the machine's load does not favour one."""
  best = dict.fromkeys(runs, math.inf)
  for _ in range(rounds):
    for v, (ck, bufs) in runs.items():
      best[v] = min(best[v], ck.time(bufs, reps=reps, warmup=1, record=False).min)
  return best


def _run_case(name: str, scale: float, reps: int, which: list[str], beam: int, rounds: int) -> list[dict]:
  from compiler.opt import Kernel
  from compiler.realize import get_runner
  from compiler.runtime.compiled import compile_kernel
  from compiler.schedule.rangeify import create_schedule
  outs, ref = CASES[name](scale)
  sched, bufmap = create_schedule([t.uop for t in outs])
  for si in sched:
    for b in si.bufs:
      b.ensure_allocated()
  runners = [get_runner(si.ast) for si in sched]
  work = [_macs(Kernel(si.ast)) if any(u.op.name == "REDUCE" for u in si.ast.toposort()) else 0 for si in sched]
  targets = [i for i, w in enumerate(work) if w * 8 >= max(work)]
  want = ref()
  rows = []
  for i in targets:
    si = sched[i]
    made = _variants(si.ast, si.bufs, which, beam, rounds)
    runs, oks = {}, {}
    for variant, k in made.items():
      ck = compile_kernel(k.get_optimized_ast())
      for j, si2 in enumerate(sched):  # the whole schedule, this kernel as the variant: its outputs checked
        (ck if j == i else runners[j])(si2.bufs)
      got = [_read(bufmap[t.uop], t.shape) for t in outs]
      oks[variant] = all(np.allclose(g, w, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(w).max())))
                         for g, w in zip(got, want))
      runs[variant] = (ck, si.bufs)
    for variant, t in _interleaved(runs, reps).items():
      rows.append({"case": name, "kernel": si.name, "variant": variant, "opts": " ".join(o.short() for o in
                   made[variant].applied_opts), "ok": oks[variant], "s": t, "gflops": 2 * work[i] / t / 1e9})
  return rows


REAL_MIN_MACS = 1 << 24  # a real program's kernel is measured when it does at least this many multiply-adds


def _capture(program: str) -> list[tuple[Any, list[np.ndarray]]]:
  """The reduce kernels of one step of bench/real_models.py's `program` (issue 29's shapes) that do at least
  REAL_MIN_MACS multiply-adds: (AST, copies of its buffers as they were when it ran), each AST once."""
  from real_models import SIZES, build, tinyviz

  import compiler.realize as realize
  from compiler.opt import Kernel
  prog = build(program, tinyviz(), SIZES["full"])
  seen: dict[Any, list[np.ndarray]] = {}
  plain = realize.get_runner

  def spy(ast, backend=None):
    run = plain(ast, backend)
    if ast in seen or not any(u.op.name == "REDUCE" for u in ast.toposort()) or _macs(Kernel(ast)) < REAL_MIN_MACS:
      return run

    def snapshot_and_run(bufs, *a, **kw):
      seen.setdefault(ast, [np.array(b.np, copy=True) for b in bufs])
      return run(bufs, *a, **kw)
    return snapshot_and_run
  realize.get_runner = spy
  ahead = os.environ.get("COMPILE_AHEAD")
  os.environ["COMPILE_AHEAD"] = "0"  # (kernels compiled ahead of their turn never pass through get_runner)
  try:
    prog()
  finally:
    realize.get_runner = plain
    if ahead is None:
      os.environ.pop("COMPILE_AHEAD")
    else:
      os.environ["COMPILE_AHEAD"] = ahead
  return list(seen.items())


def _run_real(program: str, reps: int, which: list[str], beam: int, rounds: int, top: int) -> list[dict]:
  """The `top` slowest (under the heuristics) big reduce kernels of a real program's step, each variant checked
  against the unoptimized kernel's outputs on the same inputs; `share`: of those kernels' total heuristic time."""
  from compiler.opt import Kernel, hand_coded_optimizations
  from compiler.runtime.compiled import compile_kernel
  kernels = _capture(program)
  timed = []
  for ast, arrs in kernels:
    ck = compile_kernel(hand_coded_optimizations(Kernel(ast)).get_optimized_ast())
    timed.append((ck.time([a.copy() for a in arrs], reps=1, warmup=1, record=False).min, ast, arrs))
  total = sum(t for t, _, _ in timed)
  rows = []
  for t_heur, ast, arrs in sorted(timed, key=lambda x: -x[0])[:top]:
    want = [a.copy() for a in arrs]
    compile_kernel(ast)(want)  # the reference: the kernel with no opts
    made = _variants(ast, [a.copy() for a in arrs], which, beam, rounds)
    runs, oks = {}, {}
    for variant, k in made.items():
      ck = compile_kernel(k.get_optimized_ast())
      got = [a.copy() for a in arrs]
      ck(got)
      oks[variant] = all(np.allclose(g, w, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(w).max(initial=0))),
                                     equal_nan=True) for g, w in zip(got, want))
      runs[variant] = (ck, got)
    for variant, t in _interleaved(runs, reps).items():
      rows.append({"case": program, "kernel": Kernel(ast).name, "variant": variant, "share": t_heur / total,
                   "opts": " ".join(o.short() for o in made[variant].applied_opts), "ok": oks[variant], "s": t,
                   "gflops": 2 * _macs(Kernel(ast)) / t / 1e9})
  return rows


def _read(view, shape: tuple[int, ...]) -> np.ndarray:
  """The values of a scheduled output (the buffer under its reshapes)."""
  from compiler.runtime.buffer import buffer_of
  while view.op.name == "RESHAPE":
    view = view.src[0]
  return buffer_of(view).numpy().reshape(shape).copy()


def _child(args: argparse.Namespace, threads: int) -> dict:
  from compiler.opt.target import host_target
  global BASELINE
  BASELINE = _load_baseline(args.baseline) if args.baseline else None
  rows = []
  which = args.variants.split(",")
  for name in filter(None, args.real.split(",")):
    rows += _run_real(name, args.reps, which, args.beam, args.beam_rounds, args.top)
  for name in CASES:
    if not args.real and (not args.only or name in args.only.split(",")):
      rows += _run_case(name, args.scale, args.reps, which, args.beam, args.beam_rounds)
  peak = max(fma_peak_gflops(host_target().vector_floats) for _ in range(3))
  return {"threads": threads, "rows": rows, "peak": peak}


def _run_child(args: argparse.Namespace, threads: int) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "NOOPT", "BEAM")}
  env.update(THREADS=str(threads), PYTHONPATH=str(ROOT))
  cmd = [sys.executable, __file__, "--child", str(threads), "--scale", str(args.scale), "--reps", str(args.reps),
         "--only", args.only, "--beam", str(args.beam), "--beam-rounds", str(args.beam_rounds), "--variants",
         args.variants, "--real", args.real, "--top", str(args.top), "--baseline", args.baseline]
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
  if p.returncode != 0:
    raise SystemExit(f"the {threads}-thread run failed:\n{p.stderr}")
  return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--scale", type=float, default=1.0, help="batch sizes scaled by this")
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--only", default="", help=f"cases, comma-separated, of {', '.join(CASES)}")
  ap.add_argument("--threads", default="1,2")
  ap.add_argument("--variants", default="heuristic,noopt,beam", help="which of heuristic, noopt, beam to time")
  ap.add_argument("--beam", type=int, default=2, help="BEAM's width (0: no BEAM)")
  ap.add_argument("--beam-rounds", type=int, default=4, help="at most this many BEAM rounds")
  ap.add_argument("--real", default="", help="instead of the cases: the slowest big reduce kernels of these programs "
                  "of bench/real_models.py (mnist, resnet, gpt_step), captured from one step")
  ap.add_argument("--top", type=int, default=4, help="with --real: this many kernels a program")
  ap.add_argument("--baseline", default="", help="a heuristic.py of another version: its opts timed too, as the "
                  "variant 'baseline' (add it to --variants), in turns with this version's")
  ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child is not None:
    print(json.dumps(_child(args, args.child)))
    return
  for t in args.threads.split(","):
    res = _run_child(args, int(t))
    peak = res["peak"] * res["threads"]
    print(f"\n{res['threads']} thread(s); FMA peak {peak:.0f} GFLOP/s ({res['peak']:.0f} a thread, measured); "
          f"scale {args.scale}, min of {args.reps}")
    cols = [("case", "<13"), ("kernel", "<28"), ("share", ">6.0%"), ("variant", "<10"), ("ok", "<4"),
            ("ms", ">9.3f"), ("GFLOP/s", ">8.1f"), ("of peak", ">8.1%"), ("opts", "<")]
    print(format_table(cols, [[r["case"], r["kernel"][:28], r.get("share", float("nan")), r["variant"],
                               "yes" if r["ok"] else "NO", r["s"] * 1e3, r["gflops"], r["gflops"] / peak, r["opts"]]
                              for r in res["rows"]]))


if __name__ == "__main__":
  main()
