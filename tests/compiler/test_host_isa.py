"""TARGET_ISA: the compiler compiles for, tunes for and picks instructions for an older x86 ISA than the host's, so
the bench's targets can be checked for an SSE or AVX2 machine on this one (compiler/host.py). Each preset's kernels
are compiled by the real LLVM JIT in a process of its own (the JIT, like the program and runner caches, lives for
the process and is made for one CPU): on every host with COMPILE_ONLY=1 (their assembly checked, nothing run), and
run where the host can (AVX512-FP16, Sapphire Rapids' half instructions, few hosts have)."""
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
from compiler.opt.beam_cache import cache_key
from compiler.opt.target import AVX2, AVX512, AVX512FP16, SSE, host_target

ROOT = Path(__file__).resolve().parents[2]
# the vector registers each preset may use: SSE's 128-bit xmm, AVX2's 256-bit ymm, AVX-512's 512-bit zmm
ALLOWED = {"sse": {"xmm"}, "avx2": {"xmm", "ymm"}, "avx512": {"xmm", "ymm", "zmm"}, "avx512fp16": {"xmm", "ymm", "zmm"}}
WIDEST = {"sse": "xmm", "avx2": "ymm", "avx512": "zmm", "avx512fp16": "zmm"}
LANES = {"sse": 4, "avx2": 8, "avx512": 16, "avx512fp16": 16}

# compiles matmul, elementwise and softmax (exp2: AVX-512's scalef where the CPU has it) with the heuristics' opts
# for host_target() and prints the registers their assembly uses; runs them (and half kernels) and prints their error
# against numpy, unless COMPILE_ONLY=1 (the half kernels' assembly then only says which libcalls they call)
CHILD = r"""
import json, os, re, sys
import numpy as np
from support.codegen_helpers import elementwise, matmul, softmax_rows
from compiler import Tensor
from compiler.codegen import get_program
from compiler.dtype import dtypes
from compiler.engine import optimize
from compiler.opt.target import host_target
from compiler.runtime.compiled import CompiledKernel
from compiler.runtime.llvm import get_jit
LIBCALLS = r"__(?:extendhfsf2|truncsfhf2)"
compile_only = bool(os.environ.get("COMPILE_ONLY"))

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
  if compile_only:
    out[name] = {"regs": sorted(set(re.findall(r"%([xyz]mm)\d+", jit.texts(prg.src, prg.fname)[1])))}
    continue
  jf, _ = jit.compile(prg.src, prg.fname, want_text=True)
  CompiledKernel(prg, jf.address, 0.0, None)(arrs)
  out[name] = {"regs": sorted(set(re.findall(r"%([xyz]mm)\d+", jf.asm))), "err": float(np.abs(arrs[0] - want).max()),
               "scale": float(np.abs(want).max())}
# half math: with F16C (AVX2, AVX-512) conversion instructions; without it (SSE) calls of compiler.runtime.libcalls,
# which a process need not otherwise have (MCJIT ran such a kernel into address 0)
h1, h2 = (rng.standard_normal(997) * 300).astype(np.float16), (rng.standard_normal(997) * 300).astype(np.float16)
f32 = np.concatenate([rng.standard_normal(997).astype(np.float32) * 7e4, np.float32([65520, 6e-8, 3e-8, -0.0])])
if compile_only:
  sched = (Tensor(h1) * Tensor(h2) + Tensor(h1)).schedule() + Tensor(f32).cast(dtypes.float16).schedule()
  asm = "".join(jit.texts(p.src, p.fname)[1] for p in (get_program(optimize(si.ast)) for si in sched))
  out["half"] = {"libcalls": sorted(set(re.findall(LIBCALLS, asm)))}
  print(json.dumps(out))
  sys.exit(0)
got_add = (Tensor(h1) * Tensor(h2) + Tensor(h1)).numpy()
got_cast = Tensor(f32).cast(dtypes.float16).numpy()
with np.errstate(over="ignore"):
  want_add = (h1.astype(np.float32) * h2.astype(np.float32)).astype(np.float16).astype(np.float32) + h1
  out["half"] = {"add": bool(np.array_equal(got_add, want_add.astype(np.float16), equal_nan=True)),
                 "cast": bool(np.array_equal(got_cast, f32.astype(np.float16), equal_nan=True)),
                 "libcalls": sorted(set(re.findall(LIBCALLS, "".join(
                   get_jit().compile(ir, re.search(r"define void @(\w+)", ir)[1], want_text=True)[0].asm
                   for ir in list(get_jit().cache)))))}
print(json.dumps(out))
"""


def _supported(isa: str) -> bool:
  return host.cannot_run(isa) is None


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


def _child(isa: str, compile_only: bool) -> dict:
  env = {**os.environ, "TARGET_ISA": isa, "THREADS": "1", "PYTHONPATH": str(ROOT / "tests"),
         "COMPILE_ONLY": "1" if compile_only else ""}
  proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout.splitlines()[-1])


def _check_compiled(isa: str, got: dict) -> None:
  cpu, features = ISA_PRESETS[isa]
  assert got["cpu"] == [cpu, features] and got["target"][:2] == [cpu, features]  # the JIT and the optimizer agree
  assert got["target"][2] == LANES[isa]
  for name in ("matmul", "elementwise", "softmax"):
    assert set(got[name]["regs"]) <= ALLOWED[isa], (name, got[name]["regs"])
  # the kernels are vectorized to the preset's width: no narrower code passes for an SSE build by accident
  assert WIDEST[isa] in set(got["matmul"]["regs"]) | set(got["elementwise"]["regs"])
  # only a CPU without F16C calls the half conversion functions
  assert bool(got["half"]["libcalls"]) == (isa == "sse"), got["half"]


@pytest.mark.parametrize("isa", sorted(ISA_PRESETS))
def test_kernels_compiled_for_a_preset_use_only_its_registers(isa):
  # on every host, whichever presets it can run (COMPILE_ONLY=1: the assembly is made, nothing runs)
  _check_compiled(isa, _child(isa, compile_only=True))


@pytest.mark.parametrize("isa", sorted(ISA_PRESETS))
def test_kernels_compiled_for_a_preset_are_right(isa):
  if not _supported(isa):  # (the compile part above ran on this host all the same)
    pytest.skip(f"run part only: {host.cannot_run(isa)}")
  got = _child(isa, compile_only=False)
  _check_compiled(isa, got)
  for name in ("matmul", "elementwise", "softmax"):
    assert got[name]["err"] <= 1e-5 * got[name]["scale"], (name, got[name])
  assert got["half"]["add"] and got["half"]["cast"], got["half"]


def test_an_unknown_isa_names_the_valid_ones(monkeypatch):
  monkeypatch.setenv("TARGET_ISA", "avx3")
  with pytest.raises(ValueError, match="'avx3'.*host, sse, avx2, avx512, avx512fp16, sapphirerapids"):
    host_cpu()


def test_a_preset_the_host_cannot_run_names_the_missing_features(monkeypatch):
  haswell = ("haswell", "+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,"
                        "+lzcnt,+movbe,-avx512f,-avx512vl")
  monkeypatch.setattr(host, "_native_cpu", lambda: haswell)
  monkeypatch.setenv("TARGET_ISA", "avx512")
  with pytest.raises(ValueError, match=r"haswell\) lacks avx512bw, avx512cd, avx512dq, avx512f, avx512vl \(COMPILE_"):
    host_cpu()
  monkeypatch.setenv("COMPILE_ONLY", "1")  # compiled for, not run: any preset, on any host
  assert host_cpu() == ISA_PRESETS["avx512"]
  host_cpu.cache_clear()
  monkeypatch.setenv("TARGET_ISA", "Sapphirerapids")  # (an alias)
  assert host_cpu() == ISA_PRESETS["avx512fp16"]
  host_cpu.cache_clear()
  monkeypatch.delenv("COMPILE_ONLY")
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
  for t, isa in ((SSE, "sse"), (AVX2, "avx2"), (AVX512, "avx512"), (AVX512FP16, "avx512fp16")):
    assert (t.cpu, t.features) == ISA_PRESETS[isa]
  every = ",".join(sorted({f"+{f}" for _, feats in ISA_PRESETS.values() for f in enabled(feats)}))
  monkeypatch.setattr(host, "_native_cpu", lambda: ("znver5", every))  # a host that can run every preset
  keys = {}
  for isa in ("sse", "avx2", "avx512", "avx512fp16", "host"):
    monkeypatch.setenv("TARGET_ISA", isa)
    _clear()
    t = host_target()
    keys[isa] = t.key
    assert (t.cpu, t.features) == host_cpu() and llvmir.host_features() == frozenset(host_cpu()[1].split(","))
  # a BEAM result found for one ISA is never the answer for another (the disk cache keys on Target.key)
  assert len(set(keys.values())) == 5
  from support.opt_helpers import matmul_ast
  assert cache_key(matmul_ast(8, 8, 8), SSE, 2) != cache_key(matmul_ast(8, 8, 8), AVX512, 2)
