"""llvm_pipeline_ab's kernel-by-kernel A/B: the JIT's own pipeline as the variant makes the same code, so every
kernel's outputs agree, in-place ones (Adam's updates) included, which only holds if each code starts from the same
inputs; and the harness leaves CompiledKernel as it found it."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import llvm_pipeline_ab as ab  # noqa: E402
from bench import real_models as rm  # noqa: E402
from compiler.runtime import compiled  # noqa: E402


def test_the_jits_own_pipeline_gives_every_kernel_the_same_outputs(monkeypatch):
  monkeypatch.setenv("THREADS", "1")
  call = compiled.CompiledKernel.__call__
  rows, (jit_s, variant_s) = ab.measure("mnist", rm.TINY, ab.JITS, reps=1, max_ir=2500)
  assert compiled.CompiledKernel.__call__ is call
  assert len(rows) > 10 and jit_s > 0 and variant_s > 0
  assert all(r[5] for r in rows), [r[0] for r in rows if not r[5]]
  assert any(name.startswith("E_") for name, *_ in rows) and any(name.startswith("r_") for name, *_ in rows)
