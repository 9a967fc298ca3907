"""TARGET_ISA: the compiler compiles for, tunes for and picks instructions for an older x86 ISA than the host's, so
the bench's targets can be checked for an SSE or AVX2 machine on this one (compiler/host.py). Each preset's kernels
are compiled by the real LLVM JIT in a process of its own (the JIT, like the program and runner caches, lives for
the process and is made for one CPU)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import host
from compiler.codegen import llvmir
from compiler.host import ISA_PRESETS, enabled, host_cpu
from compiler.opt.cache import cache_key
from compiler.opt.target import AVX2, AVX512, SSE, host_target

ROOT = Path(__file__).resolve().parent.parent
# the vector registers each preset may use: SSE's 128-bit xmm, AVX2's 256-bit ymm, AVX-512's 512-bit zmm
ALLOWED = {"sse": {"xmm"}, "avx2": {"xmm", "ymm"}, "avx512": {"xmm", "ymm", "zmm"}}
WIDEST = {"sse": "xmm", "avx2": "ymm", "avx512": "zmm"}

# compiles matmul, elementwise and softmax (exp2: AVX-512's scalef where the CPU has it) with the heuristics' opts
# for host_target(), runs them, and prints the registers their assembly uses and their error against numpy
CHILD = r"""
import json, re, sys
import numpy as np
from test_codegen_helpers import elementwise, matmul, softmax_rows
from compiler.codegen import get_program
from compiler.engine import optimize
from compiler.opt.target import host_target
from compiler.runtime.compiled import CompiledKernel
from compiler.runtime.llvm import get_jit

rng = np.random.default_rng(0)
a, b = rng.standard_normal((48, 64), np.float32), rng.standard_normal((64, 96), np.float32)
x, y = rng.standard_normal((40, 96), np.float32), rng.standard_normal((40, 96), np.float32)
e = np.exp2(x - x.max(1, keepdims=True))
cases = {"matmul": (matmul(48, 96, 64), [np.zeros(48 * 96, np.float32), a.ravel(), b.ravel()], (a @ b).ravel()),
         "elementwise": (elementwise(40, 96), [np.zeros(40 * 96, np.float32), x.ravel(), y.ravel()],
                         np.maximum(x * y + 1, 0).ravel()),
         "softmax": (softmax_rows(40, 96), [np.zeros(40 * 96, np.float32), x.ravel()],
                     (e / e.sum(1, keepdims=True)).ravel())}
jit, t = get_jit(), host_target()
out = {"cpu": [jit.cpu, jit.features], "target": [t.cpu, t.features, t.vector_floats]}
for name, (ast, arrs, want) in cases.items():
  prg = get_program(optimize(ast))
  jf, _ = jit.compile(prg.src, prg.fname, want_text=True)
  CompiledKernel(prg, jf.address, 0.0, None)(arrs)
  out[name] = {"regs": sorted(set(re.findall(r"%([xyz]mm)\d+", jf.asm))), "err": float(np.abs(arrs[0] - want).max()),
               "scale": float(np.abs(want).max())}
# half math: with F16C (AVX2, AVX-512) conversion instructions; without it (SSE) calls of compiler.runtime.libcalls,
# which a process need not otherwise have (MCJIT ran such a kernel into address 0)
from compiler import Tensor
from compiler.dtype import dtypes
h1, h2 = (rng.standard_normal(997) * 300).astype(np.float16), (rng.standard_normal(997) * 300).astype(np.float16)
f32 = np.concatenate([rng.standard_normal(997).astype(np.float32) * 7e4, np.float32([65520, 6e-8, 3e-8, -0.0])])
got_add = (Tensor(h1) * Tensor(h2) + Tensor(h1)).numpy()
got_cast = Tensor(f32).cast(dtypes.float16).numpy()
with np.errstate(over="ignore"):
  want_add = (h1.astype(np.float32) * h2.astype(np.float32)).astype(np.float16).astype(np.float32) + h1
  out["half"] = {"add": bool(np.array_equal(got_add, want_add.astype(np.float16), equal_nan=True)),
                 "cast": bool(np.array_equal(got_cast, f32.astype(np.float16), equal_nan=True)),
                 "libcalls": sorted(set(re.findall(r"__(?:extendhfsf2|truncsfhf2)", "".join(
                   get_jit().compile(ir, re.search(r"define void @(\w+)", ir)[1], want_text=True)[0].asm
                   for ir in list(get_jit().cache)))))}
print(json.dumps(out))
"""


def _supported(isa: str) -> bool:
  return enabled(ISA_PRESETS[isa][1]) <= enabled(host._native_cpu()[1])


def _clear() -> None:
  for f in (host._native_cpu, host_cpu, host_target, llvmir.host_features):
    getattr(f, "cache_clear", lambda: None)()  # (a test's stand-in for _native_cpu has no cache)


@pytest.fixture(autouse=True)
def _fresh_cpu():
  # host_cpu and what is derived from it are read once a process: a test that changes TARGET_ISA (or the host's
  # features) starts and ends with none of them cached
  _clear()
  yield
  _clear()


def _child(isa: str) -> dict:
  env = {**os.environ, "TARGET_ISA": isa, "THREADS": "1", "PYTHONPATH": str(ROOT / "tests")}
  proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("isa", sorted(ISA_PRESETS))
def test_kernels_compiled_for_a_preset_use_only_its_registers_and_are_right(isa):
  if not _supported(isa):
    pytest.skip(f"this CPU cannot run {isa}")
  got = _child(isa)
  cpu, features = ISA_PRESETS[isa]
  assert got["cpu"] == [cpu, features] and got["target"][:2] == [cpu, features]  # the JIT and the optimizer agree
  assert got["target"][2] == {"sse": 4, "avx2": 8, "avx512": 16}[isa]
  for name in ("matmul", "elementwise", "softmax"):
    regs = set(got[name]["regs"])
    assert regs <= ALLOWED[isa], (name, regs)
    assert got[name]["err"] <= 1e-5 * got[name]["scale"], (name, got[name])
  # the kernels are vectorized to the preset's width: no narrower code passes for an SSE build by accident
  assert WIDEST[isa] in set(got["matmul"]["regs"]) | set(got["elementwise"]["regs"])
  # half kernels are right, and only a CPU without F16C calls the conversion functions
  assert got["half"]["add"] and got["half"]["cast"], got["half"]
  assert bool(got["half"]["libcalls"]) == (isa == "sse"), got["half"]


def test_an_unknown_isa_names_the_valid_ones(monkeypatch):
  monkeypatch.setenv("TARGET_ISA", "avx3")
  with pytest.raises(ValueError, match="'avx3'.*host, sse, avx2, avx512"):
    host_cpu()


def test_a_preset_the_host_cannot_run_names_the_missing_features(monkeypatch):
  haswell = ("haswell", "+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,"
                        "+lzcnt,+movbe,-avx512f,-avx512vl")
  monkeypatch.setattr(host, "_native_cpu", lambda: haswell)
  monkeypatch.setenv("TARGET_ISA", "avx512")
  with pytest.raises(ValueError, match=r"haswell\) lacks avx512bw, avx512cd, avx512dq, avx512f, avx512vl$"):
    host_cpu()
  monkeypatch.setenv("TARGET_ISA", "AVX2")  # an older preset than the host's runs, whatever its case
  assert host_cpu() == ISA_PRESETS["avx2"]
  host_cpu.cache_clear()
  monkeypatch.setenv("TARGET_ISA", "host")
  assert host_cpu() == haswell
  host_cpu.cache_clear()
  monkeypatch.delenv("TARGET_ISA")
  assert host_cpu() == haswell


def test_presets_turn_off_the_wider_isas_their_cpu_names_imply():
  off = lambda isa: {f[1:] for f in ISA_PRESETS[isa][1].split(",") if f.startswith("-")}  # noqa: E731
  assert {"avx", "avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512dq"} <= off("sse")
  assert {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx10.1"} <= off("avx2")
  assert not enabled(ISA_PRESETS["avx512"][1]) & off("avx512")
  for isa in ISA_PRESETS:
    assert not enabled(ISA_PRESETS[isa][1]) & off(isa)


def test_optimizer_targets_are_the_presets_and_key_caches_apart(monkeypatch):
  # one table: the optimizer's SSE/AVX2/AVX-512 machines are the JIT's presets
  for t, isa in ((SSE, "sse"), (AVX2, "avx2"), (AVX512, "avx512")):
    assert (t.cpu, t.features) == ISA_PRESETS[isa]
  every = ",".join(sorted({f"+{f}" for _, feats in ISA_PRESETS.values() for f in enabled(feats)}))
  monkeypatch.setattr(host, "_native_cpu", lambda: ("znver5", every))  # a host that can run every preset
  keys = {}
  for isa in ("sse", "avx2", "avx512", "host"):
    monkeypatch.setenv("TARGET_ISA", isa)
    _clear()
    t = host_target()
    keys[isa] = t.key
    assert (t.cpu, t.features) == host_cpu() and llvmir.host_features() == frozenset(host_cpu()[1].split(","))
  # a BEAM result found for one ISA is never the answer for another (the disk cache keys on Target.key)
  assert len(set(keys.values())) == 4
  from test_opt_helpers import matmul_ast
  assert cache_key(matmul_ast(8, 8, 8), SSE, 2) != cache_key(matmul_ast(8, 8, 8), AVX512, 2)
