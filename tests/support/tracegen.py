"""Small real traces for the browser tests, recorded with the compiler's recorder and graph_rewrite.

Run as a script (`python tests/support/tracegen.py live PATH`) it writes a trace slowly, one kernel at a time, so a
test can watch the page pick the new records up while the writer is still running.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _p in (ROOT, ROOT / "tests"):  # the compiler, and the helpers the server tests share
  if str(_p) not in sys.path:
    sys.path.insert(0, str(_p))

from support.proc_helpers import wait_at_gate  # noqa: E402
from support.server_helpers import noisy  # noqa: E402

from compiler.dtype import dtypes  # noqa: E402
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite, track_graph  # noqa: E402
from compiler.trace import recorder  # noqa: E402
from compiler.uop import AxisType, KernelInfo, Ops, UOp  # noqa: E402

# ---- rules (their source text is what the step panel shows)


def mul_one(x):
  return x


def add_zero(x):
  return x


def fold_add(a, b):
  return UOp.const(a.dtype, a.arg + b.arg)


simplify_pm = PatternMatcher([
  (UPat.var("x") * 1, mul_one),
  (UPat.var("x") + 0, add_zero),
  (UPat(Ops.ADD, src=(UPat(Ops.CONST, name="a"), UPat(Ops.CONST, name="b"))), fold_add),
], name="simplify")

nothing_pm = PatternMatcher([(UPat(Ops.SQRT, name="x"), lambda x: None)], name="nothing")

LLVM_IR = """define void @{name}(float* noalias %data0, float* noalias %data1) {{
entry:
  %v = load float, float* %data1
  %r = fadd float %v, 1.0
  store float %r, float* %data0
  ret void
}}"""
OPT_IR = "define void @{name}(float* noalias nocapture %data0) local_unnamed_addr #0 {{\n  ret void\n}}"
ASM = "{name}:\n  vmovss (%rsi), %xmm0\n  vaddss .LCPI0_0(%rip), %xmm0, %xmm0\n  vmovss %xmm0, (%rdi)\n  retq"


def kernel_ast(name: str, n: int, extra: int = 0) -> UOp:
  """SINK(STORE(INDEX(out, r), LOAD(INDEX(in, r)) * 1 + 0 + (2 + 3))) with a RANGE of n; `extra` adds more math."""
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), arg=0)
  inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), arg=1)
  r = UOp.range(n, 0, AxisType.LOOP)
  val = inp.index(r).load()
  val = val * 1 + 0
  val = val + (UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 3.0))
  for i in range(extra):
    val = (val * 1) + float(i + 1)
  return UOp.sink(out.index(r).store(val), arg=KernelInfo(name=name))


def record_kernel(name: str, n: int, *, colors=("blue", "yellow"), beam: bool = True, extra: int = 0,
                  sources: dict[str, str] | None = None, with_run: bool = True) -> None:
  """One kernel context: snapshot, simplify (with matches), a pass that changes nothing, opts, beam, sources, run."""
  with recorder.trace_context(name, kind="kernel"):
    ast = track_graph(kernel_ast(name, n, extra), "View Base AST")
    ast = graph_rewrite(ast, simplify_pm, name="simplify")
    graph_rewrite(ast, nothing_pm, name="no-op pass")
    recorder.record("opt", op="UPCAST", axis=0, arg=4, ok=True, reason=None, shape=[n // 4, 4], colors=list(colors),
                    kname=f"{name}_4")
    recorder.record("opt", op="LOCAL", axis=0, arg=3, ok=False, reason="axis 0 of size 4 is not divisible by 3",
                    shape=[n // 4, 4], colors=list(colors), kname=f"{name}_4")
    recorder.record("opt", op="UNROLL", axis=1, arg=2, ok=True, reason=None, shape=[n // 4, 2, 2],
                    colors=[colors[0], colors[1], "magenta"], kname=f"{name}_4_2")
    if beam:
      for i, (opts, t) in enumerate([([["UPCAST", 0, 4]], 3.0e-6), ([["UPCAST", 0, 8]], 2.0e-6),
                                     ([["LOCAL", 0, 16]], None), ([["UPCAST", 0, 4], ["UNROLL", 1, 2]], 1.5e-6)]):
        fields = {"time": t} if t is not None else {"error": "compile failed: too many registers"}
        recorder.record("beam", round=i // 2, opts=opts, chosen=i == 3, **fields)
    srcs = sources or {"llvm_ir": LLVM_IR.format(name=name), "opt_ir": OPT_IR.format(name=name),
                       "asm": ASM.format(name=name)}
    for kind, text in srcs.items():
      recorder.record("source", kind=kind, text=text, compile_s=0.0123)
    if with_run:
      times = [2.0e-6 * n / 16, 2.1e-6 * n / 16, 1.9e-6 * n / 16]
      med = sorted(times)[1]
      recorder.record("run", kname=name, times=times, min=min(times), median=med, flops=2.0 * n, bytes=8.0 * n,
                      gflops=2.0 * n / med / 1e9, gbs=8.0 * n / med / 1e9)


def schedule_graph() -> UOp:
  a = UOp(Ops.BUFFER, dtypes.float32, arg=0)
  b = UOp(Ops.BUFFER, dtypes.float32, arg=1)
  x = (a + b) * 1
  return UOp.sink(UOp(Ops.CONTIGUOUS, dtypes.float32, (x + 0,)))


def write_demo(path: str | Path) -> Path:
  """The trace most browser tests use: a schedule and two kernels with everything the panels show."""
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("schedule 1", kind="schedule"):
      graph_rewrite(schedule_graph(), simplify_pm, name="early simplify")
    recorder.RECORDER.writer.flush()  # one frame per part, so a test can damage the last one only
    record_kernel("r_16_4", 16)
    recorder.RECORDER.writer.flush()
    record_kernel("E_32", 32, colors=("cyan", "green"), beam=False, extra=2)
  finally:
    recorder.disable()
  return Path(path)


XSS = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>"


def write_evil(path: str | Path) -> Path:
  """Payloads everywhere a trace can put a string: node args, kernel/context/rewrite names, rule-free sources."""
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context(f"ctx {XSS}", kind="schedule"):
      v = UOp.variable(XSS, 0, 10)
      noop = UOp(Ops.NOOP, dtypes.int32, (v,), arg=XSS)
      graph_rewrite(UOp.sink(noop * 1), simplify_pm, name=f"pass {XSS}")
    name = f"k_{XSS}"
    record_kernel(name, 16, sources={"llvm_ir": f"; {XSS}\n{LLVM_IR.format(name=XSS)}", "asm": f"# {XSS}"})
  finally:
    recorder.disable()
  return Path(path)


def write_jumps(path: str | Path) -> Path:
  """One `symbolic` rewrite whose steps remove nodes that later steps build again (jumps between steps re-add them)."""
  from compiler.symbolic import symbolic
  rng = random.Random(5)
  leaves = [UOp.range(8, i) for i in range(3)]
  sink = UOp.sink(*[noisy(rng, 4, leaves) for _ in range(10)])
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("jumps", kind="schedule"):
      graph_rewrite(sink, symbolic, name="simplify")
  finally:
    recorder.disable()
  return Path(path)


def write_live(path: str | Path, n_kernels: int = 3, gated: bool = False) -> None:
  """Write kernels one by one, flushing after each, for the live tests. Gated, the writer stops after the first kernel
  until the test opens its gate (proc_helpers.open_gate: a byte on its stdin), so a test sees the trace live (and its
  first kernel) however slowly the page opens, then lets it grow and end."""
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("schedule live", kind="schedule"):
      graph_rewrite(schedule_graph(), simplify_pm, name="early simplify")
    recorder.RECORDER.writer.flush()
    for i in range(n_kernels):
      record_kernel(f"live_kernel_{i}", 16, beam=False)
      recorder.RECORDER.writer.flush()
      if i == 0 and gated:
        wait_at_gate()
  finally:
    recorder.disable()


if __name__ == "__main__":
  if len(sys.argv) >= 3 and sys.argv[1] == "live":  # live PATH [N_KERNELS [-]] ("-": gated on stdin)
    write_live(sys.argv[2], n_kernels=int(sys.argv[3]) if len(sys.argv) > 3 else 3,
               gated=len(sys.argv) > 4 and sys.argv[4] == "-")
  elif len(sys.argv) >= 3 and sys.argv[1] in ("demo", "evil", "jumps"):
    {"demo": write_demo, "evil": write_evil, "jumps": write_jumps}[sys.argv[1]](sys.argv[2])
  else:
    sys.exit("usage: tracegen.py demo|evil|jumps|live PATH [n_kernels [-]]")


def consts_graph(n: int = 6) -> UOp:
  """n parallel `load * C1 + C2` chains sharing two constants with long texts: their users sit side by side, so
  inlined constants widen boxes that the layout packed NODE_GAP apart. The `* 1` on every other load is a step."""
  r = UOp.range(8, 0, AxisType.LOOP)
  c1, c2 = UOp.const(dtypes.float32, 1 / 3), UOp.const(dtypes.float32, 2 / 7)
  outs = []
  for i in range(n):
    x = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), arg=i).index(r).load()
    outs.append((x * 1 if i % 2 else x) * c1 + c2)
  return UOp.sink(*outs)


def write_consts(path: str | Path) -> Path:
  """A rewrite whose graph has many users of constants with long texts (for collapsing constants)."""
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("consts", kind="schedule"):
      graph_rewrite(consts_graph(), simplify_pm, name="simplify")
  finally:
    recorder.disable()
  return Path(path)


def write_compiled(path: str | Path) -> Path:
  """A real workload compiled and run by the compiler while recording: relu(a @ b), one kernel with opts."""
  import numpy as np

  from compiler.tensor import Tensor
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((24, 24)).astype(np.float32) for _ in range(2))
  recorder.enable(path, announce=False)
  try:
    got = (Tensor(a) @ Tensor(b)).relu().numpy()
  finally:
    recorder.disable()
  assert np.allclose(got, np.maximum(a @ b, 0), atol=1e-4)
  return Path(path)


def write_wide(path: str | Path, n: int = 400) -> Path:
  """A graph far too wide to read whole (n independent `x_i + 0` under one SINK): each step simplifies one of them."""
  xs = [UOp.variable(f"x{i}", 0, 9) for i in range(n)]
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("wide", kind="schedule"):
      sink = graph_rewrite(UOp.sink(*[x * 3 + 0 for x in xs]), simplify_pm, name="simplify")
      # one step that rebuilds every expression at once (as codegen's group_stores does to a kernel's stores)
      times4 = PatternMatcher([(UPat(Ops.SINK, name="s"), lambda s: s.replace(src=tuple(x.src[0] * 4 for x in s.src))
                                if s.src[0].src[1].arg == 3 else None)], name="times4")
      graph_rewrite(sink, times4, name="all at once")
  finally:
    recorder.disable()
  return Path(path)
