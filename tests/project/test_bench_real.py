"""bench/bench_real.py's programs (bench/real_models.py) at tiny shapes, and the script's table.

Each program runs 3 calls plain and 3 under TinyJit on both backends: plain and jitted runs are the same kernels on
the same weights, so their numbers are equal call by call and so are the models' states after them (weights,
BatchNorm's running statistics); the compiled numbers are the reference interpreter's; the losses are finite, and
fall on the fixed batch for the training programs."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import bench_real
from bench import real_models as rm

ROOT = Path(__file__).resolve().parents[2]
CALLS = 3


def _run(name: str, jit: bool) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
  """The program's outputs over CALLS calls and its model's state after them."""
  lib = rm.tinyviz()
  prog = rm.build(name, lib, rm.TINY, jit=jit)
  outs = [prog().numpy().copy() for _ in range(CALLS)]
  return outs, rm.numpy_state(prog.model, lib)


@pytest.mark.parametrize("name", list(rm.PROGRAMS))
def test_a_program_runs_alike_plain_jitted_and_on_both_backends(name, monkeypatch):
  runs = {}
  for backend in ("interp", "llvm"):
    monkeypatch.setenv("BACKEND", backend)
    for jit in (False, True):
      runs[backend, jit] = _run(name, jit)
  for backend in ("interp", "llvm"):
    (plain, plain_state), (jitted, jit_state) = runs[backend, False], runs[backend, True]
    for i, (a, b) in enumerate(zip(plain, jitted)):
      assert np.isfinite(a).all(), f"{backend}: call {i + 1} of {name} is not finite: {a}"
      np.testing.assert_array_equal(b, a, err_msg=f"{backend}: TinyJit's call {i + 1} of {name}")
    assert plain_state.keys() == jit_state.keys()
    for k in plain_state:
      np.testing.assert_array_equal(jit_state[k], plain_state[k], err_msg=f"{backend}: {name}'s {k} after the calls")
  # compiled vs the numpy reference interpreter: float32 in other orders, through up to 3 Adam steps
  for i, (a, b) in enumerate(zip(runs["interp", False][0], runs["llvm", False][0])):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=f"{name}'s call {i + 1}, llvm vs interp")
  outs = [float(o.ravel()[0]) for o in runs["llvm", False][0]]
  if name in rm.TRAINING:
    assert outs[0] > outs[1] > outs[2], f"{name}'s loss does not fall on a fixed batch: {outs}"
  else:  # no update: every call computes the same thing
    assert outs[0] == outs[1] == outs[2], outs


def test_the_bench_catches_a_jit_that_differs_from_plain(monkeypatch):
  monkeypatch.setenv("BACKEND", "interp")
  monkeypatch.setattr(bench_real, "_limit_threads", lambda threads, torch: None)  # (process-wide: the script's own)
  monkeypatch.setattr(bench_real, "installed", lambda lib: lib == "tinyviz")
  res = bench_real.measure(["gpt_fwd"], rm.TINY, reps=1, threads=1)
  assert res["failed"] == [] and res["checks"][0].startswith("gpt_fwd: plain and TinyJit outputs agree over 4 calls")
  build = rm.build
  # the jitted side with other weights: what a wrong replay (a stale input, a missed write) looks like
  monkeypatch.setattr(rm, "build", lambda name, lib, size, jit=False: build(name, lib, size, jit, seed=int(jit)))
  res = bench_real.measure(["gpt_fwd"], rm.TINY, reps=1, threads=1)
  assert len(res["failed"]) == 1 and res["failed"][0].startswith("gpt_fwd: TinyJit's call 1 differs from plain's")


def test_the_script_prints_a_row_per_program_and_thread_count():
  proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_real.py"), "--quick", "--reps", "1", "--threads",
                         "1", "--only", "gpt_fwd"], capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.splitlines()
  header = next(i for i, line in enumerate(lines) if line.startswith("program"))
  heads = lines[header].split()
  for col in ("plain", "jit", "torch", "tg", "jit/torch", "first", "warm", "MB", "buf"):
    assert col in heads, lines[header]
  row = lines[header + 1]
  assert row.startswith("GPT forward") and len(lines) == header + 2, proc.stdout
  cells = row[len("GPT forward"):].split()
  assert cells[0] == "1" and float(cells[1]) > 0 and float(cells[2]) > 0  # threads, plain ms, jit ms
  assert "gpt_fwd: plain and TinyJit outputs agree over 4 calls" in proc.stdout
  for lib in ("torch", "tinygrad"):  # a side that is not installed says so
    assert re.search(rf"{lib} \w+(: not installed)?(,|$)", lines[0]), lines[0]
    assert bench_real.installed(lib) != bool(re.search(rf"{lib} \w+: not installed", lines[0])), lines[0]


def test_an_unknown_program_is_an_error_naming_the_programs():
  proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_real.py"), "--only", "vgg"], capture_output=True,
                        text=True, cwd=ROOT, timeout=120)
  assert proc.returncode == 2 and "no program vgg: one of gpt_fwd, gpt_step, resnet, mnist" in proc.stderr
