"""The compile cache on disk (compiler.runtime.diskcache, used by compiler.engine.compile_runner and the scheduler): a
second process loads what the first scheduled and compiled instead of scheduling, optimizing and compiling, with the
same results; a different AST or target
misses; a corrupt or foreign file is ignored; the folder is the user's alone; CACHELEVEL=0 and DISABLE_COMPILER_CACHE=1
turn it off; a traced compile does not use it."""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import Tensor, engine
from compiler.runtime import diskcache
from compiler.runtime.llvm import get_jit

ROOT = Path(__file__).resolve().parents[2]

# a small program of several kernels (a matmul, a softmax's two, a reduce): its outputs and what the process did
PROGRAM = """
import json, sys
import numpy as np
from compiler import Tensor, engine
from compiler.runtime import diskcache
from compiler.runtime.llvm import get_jit
from compiler.schedule.cache import SCHEDULES
rng = np.random.default_rng(0)
a, b = rng.standard_normal((24, 40)).astype(np.float32), rng.standard_normal((40, 12)).astype(np.float32)
h = (Tensor(a) @ Tensor(b)).relu()
outs = [h.softmax(-1).numpy(), (h * 0.5).sum(0).numpy()]
print(json.dumps({"outs": [o.ravel().tolist() for o in outs], "compiles": engine.COUNTS["compile"],
                  "disk": engine.COUNTS["disk"], "llvm": get_jit().compiles, "stats": vars(diskcache.STATS),
                  "scheduled": SCHEDULES.misses - SCHEDULES.disk_hits, "sched_disk": SCHEDULES.disk_hits}))
"""


def _want() -> list[np.ndarray]:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((24, 40)), rng.standard_normal((40, 12))  # (float64 of the same float32 draws)
  a, b = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
  h = np.maximum(a @ b, 0)
  e = np.exp(h - h.max(-1, keepdims=True))
  return [e / e.sum(-1, keepdims=True), (h * 0.5).sum(0)]


def _run(cache_home: Path, **env: str) -> dict:
  """PROGRAM in a fresh process with its cache under cache_home."""
  full = {**{k: v for k, v in os.environ.items() if k != "TINYVIZ_COMPILE_CACHE"},  # (the session's: conftest)
          "XDG_CACHE_HOME": str(cache_home), "BACKEND": "llvm", "PYTHONPATH": str(ROOT), **env}
  for k in ("VIZ", "BEAM", "NOOPT", "CACHELEVEL", "DISABLE_COMPILER_CACHE"):
    if k not in env:
      full.pop(k, None)
  res = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=full, capture_output=True, text=True,
                       timeout=300)
  assert res.returncode == 0, res.stderr
  return json.loads(res.stdout.strip().splitlines()[-1])


def _check_values(got: dict) -> None:
  for o, w in zip(got["outs"], _want()):
    np.testing.assert_allclose(np.asarray(o).reshape(w.shape), w, rtol=1e-4, atol=1e-5)


def test_a_second_process_with_a_warm_cache_compiles_nothing(tmp_path):
  cold = _run(tmp_path)
  assert cold["compiles"] >= 3 and cold["llvm"] == cold["compiles"] and cold["disk"] == 0
  assert cold["scheduled"] >= 2 and cold["sched_disk"] == 0
  assert cold["stats"]["writes"] == cold["compiles"] + cold["scheduled"]  # (each kernel, and each schedule)
  warm = _run(tmp_path)
  assert warm["compiles"] == 0 and warm["llvm"] == 0, warm  # nothing optimized, nothing compiled by LLVM
  assert warm["scheduled"] == 0 and warm["sched_disk"] == cold["scheduled"]  # nor scheduled
  assert warm["disk"] == cold["compiles"] and warm["stats"]["hits"] == cold["compiles"] + cold["scheduled"]
  assert warm["outs"] == cold["outs"]  # the very same code: the same bits
  _check_values(warm)


@pytest.mark.parametrize("env", [{"CACHELEVEL": "0"}, {"DISABLE_COMPILER_CACHE": "1"}])
def test_cachelevel_0_or_disable_compiler_cache_turns_it_off(tmp_path, env):
  first, second = _run(tmp_path, **env), _run(tmp_path, **env)
  assert first["compiles"] == second["compiles"] == second["llvm"] >= 3 and second["disk"] == 0
  assert not (tmp_path / "tinyviz" / "compile").exists() or not any((tmp_path / "tinyviz" / "compile").iterdir())
  _check_values(second)


# ---- in this process: kernels of ASTs no other test compiles (a constant of the test's own), the cache in tmp_path

@pytest.fixture
def cache_home(tmp_path, monkeypatch):
  for k in ("CACHELEVEL", "DISABLE_COMPILER_CACHE", "BEAM", "NOOPT"):
    monkeypatch.delenv(k, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  monkeypatch.delenv("TINYVIZ_COMPILE_CACHE", raising=False)
  return tmp_path


def _kernel(c: float):
  """The one kernel of `x * c + 1` over a fresh input: (ast, buffers, x)."""
  x = np.arange(-50, 50, dtype=np.float32) / 7
  (si,) = (Tensor(x) * c + 1).schedule()
  for b in si.bufs:
    b.ensure_allocated()
  return si.ast, si.bufs, x


def _run_kernel(ck, bufs, x: np.ndarray, c: float) -> np.ndarray:
  ck(bufs)
  out = bufs[0].np.copy()
  np.testing.assert_allclose(out, x.astype(np.float64) * c + 1, rtol=1e-6, atol=1e-6)
  return out


def _entry(ast) -> Path:
  return diskcache.cache_dir() / engine.disk_key(ast, engine.OptPolicy())


def test_a_kernel_is_loaded_back_in_this_process_and_gives_the_same_bits(cache_home):
  ast, bufs, x = _kernel(3.0625)
  stats = dataclasses.replace(diskcache.STATS)
  first = _run_kernel(engine.compile_runner(ast), bufs, x, 3.0625)
  assert _entry(ast).is_file() and diskcache.STATS.writes == stats.writes + 1
  llvm = get_jit().compiles
  again = engine.compile_runner(ast)  # (realize keeps its runners; the engine alone asks the disk)
  assert get_jit().compiles == llvm and diskcache.STATS.hits == stats.hits + 1
  assert np.array_equal(_run_kernel(again, bufs, x, 3.0625), first)


def test_a_changed_ast_misses(cache_home):
  ast_a, _, _ = _kernel(5.125)
  ast_b, bufs_b, x = _kernel(5.25)
  assert engine.disk_key(ast_a, engine.OptPolicy()) != engine.disk_key(ast_b, engine.OptPolicy())
  engine.compile_runner(ast_a)
  misses, llvm = diskcache.STATS.misses, get_jit().compiles
  _run_kernel(engine.compile_runner(ast_b), bufs_b, x, 5.25)
  assert diskcache.STATS.misses == misses + 1 and get_jit().compiles == llvm + 1


def test_a_changed_target_or_policy_misses(cache_home, monkeypatch):
  ast, _, _ = _kernel(6.5)
  policy = engine.OptPolicy()
  key = engine.disk_key(ast, policy)
  assert engine.disk_key(ast, engine.OptPolicy(noopt=True)) != key
  real = engine.host_target()
  monkeypatch.setattr(engine, "host_target", lambda: dataclasses.replace(real, features=real.features + ",-avx512f"))
  assert engine.disk_key(ast, policy) != key
  monkeypatch.setattr(engine, "host_target", lambda: dataclasses.replace(real, l2_bytes=real.l2_bytes * 2))
  assert engine.disk_key(ast, policy) != key
  monkeypatch.setattr(engine, "host_target", lambda: real)
  assert engine.disk_key(ast, policy) == key
  monkeypatch.setenv("NOSTAGE", "1")  # a knob of the heuristics the target does not show
  assert engine.disk_key(ast, policy) != key
  monkeypatch.setattr(diskcache, "compiler_version", lambda: "another compiler")
  monkeypatch.delenv("NOSTAGE")
  assert engine.disk_key(ast, policy) != key


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_a_corrupted_file_is_ignored_and_rewritten(cache_home, damage):
  c = {"flip": 7.125, "truncate": 7.25, "garbage": 7.375, "empty": 7.5}[damage]
  ast, bufs, x = _kernel(c)
  engine.compile_runner(ast)
  path = _entry(ast)
  data = path.read_bytes()
  bad = {"flip": data[:-100] + bytes([data[-100] ^ 1]) + data[-99:], "truncate": data[:len(data) // 2],
         "garbage": os.urandom(len(data)), "empty": b""}[damage]
  path.write_bytes(bad)
  ignored, llvm = diskcache.STATS.ignored, get_jit().compiles
  get_jit().cache.clear()  # (else the same IR is this process's code already, and nothing is compiled or written)
  _run_kernel(engine.compile_runner(ast), bufs, x, c)  # compiled again: right
  assert diskcache.STATS.ignored == ignored + 1 and get_jit().compiles == llvm + 1
  assert path.read_bytes() != bad  # rewritten: loads again
  hits = diskcache.STATS.hits
  _run_kernel(engine.compile_runner(ast), bufs, x, c)
  assert diskcache.STATS.hits == hits + 1


class _Evil:
  def __init__(self, marker: Path):
    self.marker = marker

  def __reduce__(self):
    return os.system, (f"touch {self.marker}",)


def test_an_entry_naming_anything_but_the_compilers_types_is_not_loaded(cache_home, tmp_path):
  # checksummed as the cache writes it: only the unpickler's list of types stands between the file and os.system
  ast, bufs, x = _kernel(8.125)
  marker = tmp_path / "ran"
  key = engine.disk_key(ast, engine.OptPolicy())
  assert diskcache.put(key, (_Evil(marker), [], "sym", b"")) is not None
  ignored = diskcache.STATS.ignored
  _run_kernel(engine.compile_runner(ast), bufs, x, 8.125)
  assert not marker.exists() and diskcache.STATS.ignored == ignored + 1


def test_the_cache_folder_and_files_are_the_users_alone(cache_home):
  d = cache_home / "tinyviz" / "compile"
  d.mkdir(parents=True, mode=0o755)
  os.chmod(d, 0o755)  # (as a loose umask or an older version left it)
  ast, _, _ = _kernel(9.125)
  engine.compile_runner(ast)
  assert stat.S_IMODE(d.stat().st_mode) == 0o700
  assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in d.iterdir())


def test_a_cache_folder_that_is_a_link_is_not_used(cache_home, tmp_path):
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir(mode=0o700)
  (cache_home / "tinyviz").mkdir()
  (cache_home / "tinyviz" / "compile").symlink_to(elsewhere)
  ast, bufs, x = _kernel(9.25)
  _run_kernel(engine.compile_runner(ast), bufs, x, 9.25)  # compiled, not cached
  assert not any(elsewhere.iterdir())
  assert diskcache.put("k", (1,)) is None and diskcache.get("k") is None


def test_a_traced_compile_does_not_use_the_cache(cache_home, trace):
  ast, _, _ = _kernel(10.125)
  assert engine.disk_key(ast, engine.OptPolicy()) is None
  assert engine.disk_key(ast, engine.OptPolicy(beam=2)) is None


def test_an_entry_is_a_pickle_of_the_program_without_its_uops(cache_home):
  ast, _, _ = _kernel(11.125)
  ck = engine.compile_runner(ast)
  raw = _entry(ast).read_bytes()
  prg, opts, symbol, obj = pickle.loads(raw[len(diskcache.MAGIC) + 32:])
  assert prg.uops == () and prg.src == ck.program.src and symbol.startswith(prg.fname) and obj[:4] == b"\x7fELF"
