"""Half means the same on every x86, with native half instructions (AVX512-FP16), F16C conversions or neither
(compiler/codegen/llvmir.py's module doc): each half op is rounded to half once, as if computed exactly. On an Intel
CPU with AVX512-FP16, LLVM lowered `fptosi.sat.i16.f16` without its NaN check (NaN -> -32768, 0 everywhere else).

Few hosts have AVX512-FP16, so the kernels are compiled for TARGET_ISA=avx512fp16 on every host (COMPILE_ONLY=1:
their IR and assembly, nothing run) and their lowering checked; where the host has it they also run. Every preset
this host can run must give the same bits, and the exact ops numpy's (the interpreter's) bits."""
from __future__ import annotations

import functools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.codegen_helpers import G, buf, run, sink

from compiler import Tensor
from compiler.dtype import dtypes
from compiler.host import ISA_PRESETS, cannot_run
from compiler.runtime.interpreter import interpret
from compiler.uop import Ops, UOp

ROOT = Path(__file__).resolve().parents[2]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]

# the half kernels of the compile and run checks, as Tensor expressions of two half tensors (casts to every int
# type, the ops native half instructions compute, a sum of half products), and a hand-built kernel reducing half
# products in a half accumulator (the front end sums halves in float32), whose products LLVM fused into half fmas
KERNELS = r"""
import numpy as np
from compiler.dtype import dtypes
from support.codegen_helpers import matmul
EXPRS = {**{f"cast_{n}": (lambda n: lambda a, b: a.cast(getattr(dtypes, n)))(n) for n in INTS},
         "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "sub": lambda a, b: a - b,
         "sqrt": lambda a, b: a.sqrt(), "max": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b,
         "exp2": lambda a, b: a.exp2(), "sum": lambda a, b: (a * b).sum()}
HALF_ACC = lambda: matmul(8, 32, 64, dtypes.float16)  # noqa: E731
with np.errstate(over="ignore"):
  special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 65504, -65504, 32767.5, -32768, -32769, 255.5,
                      -128.5, 4e9, 6e-8, -6e-8, 2.5, -2.5, 1.5, 0.5], np.float16)
rng = np.random.default_rng(0)
A = np.concatenate([special, (rng.standard_normal(1024 - len(special)) * 300).astype(np.float16)])
B = np.concatenate([special[::-1], (rng.standard_normal(1024 - len(special)) * 3).astype(np.float16)])
MA = (rng.integers(-4, 5, 8 * 64) * 0.25).astype(np.float16)
MB = (rng.integers(-8, 9, 64 * 32) * 0.125).astype(np.float16)
"""

# compiles (COMPILE_ONLY=1) or runs (RUN=1) the kernels for the preset TARGET_ISA names, printing their texts or
# results as JSON
CHILD = r"""
import json, os, sys
from compiler import Tensor
from compiler.codegen import get_program
from compiler.engine import optimize
from compiler.runtime.llvm import get_jit
INTS = json.loads(sys.argv[1])
""" + KERNELS + r"""
jit = get_jit()
out = {"cpu": [jit.cpu, jit.features], "texts": {}, "results": {}}
if os.environ.get("RUN"):
  from support.codegen_helpers import run
  for name, fn in EXPRS.items():
    got = fn(Tensor(A), Tensor(B)).numpy()
    out["results"][name] = [str(got.dtype), got.tobytes().hex()]
  got = run(HALF_ACC(), np.zeros(8 * 32, np.float16), MA, MB)[0]
  out["results"]["half_acc"] = [str(got.dtype), got.tobytes().hex()]
else:
  def texts(ast):
    prg = get_program(optimize(ast))
    return jit.texts(prg.src, prg.fname)
  for name, fn in EXPRS.items():
    sched = fn(Tensor(A), Tensor(B)).schedule()
    got = [texts(si.ast) for si in sched]
    out["texts"][name] = ["\n".join(t[0] for t in got), "\n".join(t[1] for t in got)]
  out["texts"]["half_acc"] = list(texts(HALF_ACC()))
  try:  # nothing compiled for a CPU this may not be runs
    jit.compile(get_program(optimize(HALF_ACC())).src, "r_matmul")
  except RuntimeError as e:
    out["refused"] = str(e)
print(json.dumps(out))
"""


def child(script: str, isa: str, *args: str, **env: str) -> dict:
  """Run a script in a process of its own compiling for TARGET_ISA=isa (the JIT is made once, for one CPU)."""
  env = {**os.environ, "TARGET_ISA": isa, "THREADS": "1", "PYTHONPATH": str(ROOT / "tests"), "BACKEND": "llvm",
         "COMPILE_ONLY": "", "RUN": "", **env}
  proc = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.splitlines()[-1])


@functools.lru_cache(None)
def fp16_texts() -> dict:
  return child(CHILD, "avx512fp16", json.dumps(INTS), COMPILE_ONLY="1")


def _instructions(asm: str) -> set[str]:
  return set(re.findall(r"^\s+(v?[a-z][a-z0-9]*)\b", asm, re.M))


def test_avx512fp16_kernels_compile_on_every_host_and_never_run_under_compile_only():
  got = fp16_texts()
  assert got["cpu"] == list(ISA_PRESETS["avx512fp16"])
  assert "COMPILE_ONLY=1" in got["refused"] and "sapphirerapids" in got["refused"]
  # the preset has native half arithmetic (else the lowering checks below would pass for want of it)
  assert {"vaddph", "vmulph", "vdivph", "vsubph"} <= set().union(*(_instructions(got["texts"][k][1])
                                                                     for k in ("add", "mul", "div", "sub")))


@pytest.mark.parametrize("dst", INTS)
def test_half_to_int_casts_go_through_float32(dst):
  # vcvttph2w / vcvttsh2si (half -> int) are a lowering of their own: LLVM's for i16 lost the NaN check
  ir, asm = fp16_texts()["texts"][f"cast_{dst}"]
  ins = _instructions(asm)
  assert not {i for i in ins if re.fullmatch(r"vcvtt[ps]h2\w+", i)}, sorted(ins)
  assert ins & {"vcvtph2psx", "vcvtph2ps", "vcvtsh2ss"}, sorted(ins)
  assert re.search(r"@llvm\.fpto[su]i\.sat\.\w+\.(v\d+)?f32\(", ir) and ".f16(" not in ir


@pytest.mark.parametrize("name", ["half_acc", "sum"])
def test_half_products_are_never_fused(name):
  # a half fma rounds once where a CPU without one rounds twice: no `contract` on half, no vfmadd*ph/sh
  ir, asm = fp16_texts()["texts"][name]
  assert not [ln for ln in ir.splitlines() if "contract" in ln and "half" in ln]
  assert not {i for i in _instructions(asm) if re.fullmatch(r"vf(n)?m(add|sub)\w*[ps]h", i)}
  assert "vmulph" in _instructions(asm)  # the products are native half (each rounded once, as promoted code does)


def _want(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """numpy's result of a kernel of KERNELS (halves computed in float32 and rounded: the interpreter's)."""
  if name.startswith("cast_"):
    return _saturate(a, getattr(dtypes, name[5:]).np)
  with np.errstate(all="ignore"):
    return {"add": np.add, "mul": np.multiply, "div": np.divide, "sub": np.subtract, "max": np.maximum,
            "lt": np.less, "sqrt": lambda a, b: np.sqrt(a), "exp2": lambda a, b: np.exp2(a),
            "sum": lambda a, b: np.float16((a.astype(np.float32) * b).astype(np.float16).sum(dtype=np.float64))}[
      name](a, b)


def _saturate(x: np.ndarray, dst) -> np.ndarray:
  """The float -> int cast both backends define: truncated, clamped to the type, NaN -> 0."""
  info = np.iinfo(dst)
  with np.errstate(invalid="ignore"):  # (signaling NaNs)
    w = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0, posinf=math.inf, neginf=-math.inf)
  out = np.where(w >= info.max, info.max, np.where(w <= info.min, info.min, 0)).astype(dst)
  inside = (w > info.min) & (w < info.max)
  out[inside] = w[inside].astype(dst)
  return out


def _same(got: np.ndarray, want: np.ndarray) -> bool:
  """Equal values, -0.0 apart from 0.0 and a NaN for a NaN (payloads aside)."""
  if got.dtype.kind != "f":
    return bool(np.array_equal(got, want))
  return bool(np.array_equal(np.isnan(got), np.isnan(want)) and
              np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)])) and
              np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)]))


@pytest.mark.parametrize("isa", ["avx2", "avx512fp16"])
def test_half_kernels_run_right(isa):
  # AVX512-FP16 where the host has it; AVX2 (F16C, promoted half arithmetic) on any host, for the same checks
  why = cannot_run(isa)
  if why is not None:  # (the compile checks above ran on this host all the same)
    pytest.skip(f"run part only: {why}")
  got = child(CHILD, isa, json.dumps(INTS), RUN="1")
  ns: dict = {"INTS": INTS}
  exec(KERNELS, ns)
  a, b = ns["A"], ns["B"]
  for name, (dt, hexbytes) in got["results"].items():
    res = np.frombuffer(bytes.fromhex(hexbytes), np.dtype(dt))
    if name == "half_acc":
      want = (ns["MA"].reshape(8, 64).astype(np.float64) @ ns["MB"].reshape(64, 32)).ravel()
      np.testing.assert_array_equal(res, want.astype(np.float16))  # (multiples of 1/32, small: every sum exact)
    elif name == "sum":
      np.testing.assert_allclose(res.astype(np.float64), _want(name, a, b).astype(np.float64), rtol=2e-3)
    elif name == "max":  # (llvm.maximum orders -0.0 below 0.0, numpy returns the first of equals)
      want = _want(name, a, b)
      assert np.array_equal(np.isnan(res), np.isnan(want)) and np.array_equal(res[~np.isnan(res)],
                                                                                want[~np.isnan(want)]), name
    elif name == "exp2":
      np.testing.assert_allclose(res, _want(name, a, b), rtol=1e-3, atol=0)
    else:
      assert _same(res, _want(name, a, b).reshape(res.shape)), name


# every half (unary ops) and every half against two shuffles of them (binary ops), computed by the preset the child
# compiles for; prints a digest of each result (NaNs made one) and whether numpy's exact ops agree bit for bit
SWEEP = r"""
import hashlib, json, sys
import numpy as np
from compiler import Tensor
from compiler.dtype import dtypes
INTS = json.loads(sys.argv[1])
h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
rng = np.random.default_rng(1)
x, y = np.concatenate([h, h]), np.concatenate([rng.permutation(h), rng.permutation(h)])
f32 = np.concatenate([h.astype(np.float32), rng.integers(0, 1 << 32, 1 << 17, dtype=np.uint64).astype(np.uint32)
                      .view(np.float32)])
i64 = np.concatenate([np.arange(-70000, 70000), rng.integers(-(1 << 63), 1 << 63, 1 << 14, dtype=np.int64)])
u = lambda t: Tensor(t)  # noqa: E731
OPS = {**{f"cast_{n}": (h, (lambda n: lambda a: a.cast(getattr(dtypes, n)))(n)) for n in INTS},
       "to_f32": (h, lambda a: a.float()), "to_f64": (h, lambda a: a.cast(dtypes.float64)),
       "from_f32": (f32, lambda a: a.half()), "from_f64": (f32.astype(np.float64) * 1.0000001, lambda a: a.half()),
       "from_i64": (i64, lambda a: a.half()), "from_u64": (i64.view(np.uint64), lambda a: a.half()),
       "from_i32": (i64.astype(np.int32), lambda a: a.half()), "to_bool": (h, lambda a: a.cast(dtypes.bool)),
       "neg": (h, lambda a: -a), "sqrt": (h, lambda a: a.sqrt()), "recip": (h, lambda a: a.reciprocal()),
       "exp2": (h, lambda a: a.exp2()), "log2": (h, lambda a: a.log2()), "sin": (h, lambda a: a.sin()),
       "trunc": (h, lambda a: a.trunc())}
BIN = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
       "max": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
       "where": lambda a, b: (a < 1).where(a * b, b - a)}
NP = {"to_f32": lambda a: a.astype(np.float32), "to_f64": lambda a: a.astype(np.float64),
      "from_f32": lambda a: a.astype(np.float16), "from_f64": lambda a: a.astype(np.float16),
      "from_i64": lambda a: a.astype(np.float16), "from_u64": lambda a: a.astype(np.float16),
      "from_i32": lambda a: a.astype(np.float16), "to_bool": lambda a: a != 0, "neg": np.negative, "sqrt": np.sqrt,
      "recip": lambda a: 1 / a, "trunc": np.trunc, "add": np.add, "sub": np.subtract, "mul": np.multiply,
      "div": np.divide, "lt": np.less, "eq": np.equal, "ne": np.not_equal,
      "where": lambda a, b: np.where(a < 1, a * b, b - a)}

def digest(r):
  r = np.array(r)
  if r.dtype.kind == "f":
    r = np.where(np.isnan(r), np.array(np.nan, r.dtype), r)
  return hashlib.sha1(r.tobytes()).hexdigest()

out, exact = {}, {}
with np.errstate(all="ignore"):
  for name, (src, fn) in OPS.items():
    got = fn(u(src)).numpy()
    out[name] = digest(got)
    if name in NP:
      exact[name] = digest(got) == digest(NP[name](src))
  for name, fn in BIN.items():
    got = fn(u(x), u(y)).numpy()
    out[name] = digest(got)
    if name in NP:
      exact[name] = digest(got) == digest(NP[name](x, y))
print(json.dumps({"digests": out, "exact": exact}))
"""


def test_half_ops_give_the_same_bits_on_every_preset_this_host_runs():
  isas = ["host", *(isa for isa in ISA_PRESETS if cannot_run(isa) is None)]
  assert {"sse", "avx2"} <= set(isas)  # any x86-64 host we test on: without F16C and FMA, and with them
  got = {isa: child(SWEEP, isa, json.dumps(INTS)) for isa in isas}
  for isa, g in got.items():
    assert all(g["exact"].values()), (isa, {k: v for k, v in g["exact"].items() if not v})
  ref = got["host"]["digests"]
  for isa, g in got.items():
    assert g["digests"] == ref, (isa, sorted(k for k in ref if g["digests"][k] != ref[k]))


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_every_half_casts_to_every_int_saturating(backend, monkeypatch):
  monkeypatch.setenv("BACKEND", backend)
  h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
  for dst in INTS:
    got = Tensor(h).cast(getattr(dtypes, dst)).numpy()
    np.testing.assert_array_equal(got, _saturate(h, getattr(dtypes, dst).np), err_msg=f"float16 -> {dst}")


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_half_mulacc_rounds_the_product_and_the_sum(backend):
  # MULACC of halves is a * b + c as numpy computes it in half: the product rounded, then the sum (not an fma)
  n = 4096
  rng = np.random.default_rng(2)
  a, b, c = ((rng.standard_normal(n) * s).astype(np.float16) for s in (30, 30, 1))
  i = UOp.range(n, 0, G)
  ld = [buf(k, n, dtypes.float16).index(i).load() for k in (1, 2, 3)]
  ast = sink(buf(0, n, dtypes.float16).index(i).store(UOp(Ops.MULACC, dtypes.float16, tuple(ld))), name="E_mulacc")
  arrs = [np.zeros(n, np.float16), a, b, c]
  if backend == "llvm":
    got = run(ast, *arrs)[0]
  else:
    got = arrs[0]
    interpret(ast, arrs)
  want = (a * b) + c
  assert ((a.astype(np.float64) * b + c).astype(np.float16) != want).any()  # (a fused a * b + c rounds otherwise)
  np.testing.assert_array_equal(got, want)
