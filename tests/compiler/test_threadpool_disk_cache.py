"""The thread pool's native functions (its worker loop, post, finish and a trampoline per kernel signature) come from
the compile cache on disk in a process after the first, as kernels do (issue 29: ~12 ms of LLVM each, 0.18 s of MNIST
step's warm first call with THREADS=2): a later process links their object code and compiles none of them; a broken
entry is compiled again; with the cache off they are compiled as before."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from compiler.runtime import diskcache, threadpool
from compiler.runtime.llvm import get_jit

ROOT = Path(__file__).resolve().parents[2]
# a trampoline of a signature no program here has (37 pointers, 3 variables): compiled by no other test of this process
SIG = (37, 3, True)

# a fresh process: the trampoline's address by _compiled, how many LLVM compiles that made, and the pool working
CHILD = """
import ctypes, json, sys
from compiler.runtime import threadpool
from compiler.runtime.llvm import get_jit
jit = get_jit()
before = jit.compiles
addr = threadpool._compiled(threadpool._entry_ir(37, 3, True), "tv_entry")
made = jit.compiles - before
seen = []
CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
fn = CB(lambda p, s, e: seen.append((s, e)))
job = threadpool.job_words(threadpool.entry_for(1, 0, True), ctypes.cast(fn, ctypes.c_void_p).value, 10, 2, 1, [0])
pool = threadpool.get_pool(1)
assert pool.run(job)
print(json.dumps({"addr": addr, "made": made, "chunks": sorted(seen), "pool_made": jit.compiles - before - made}))
"""


def child(cache: Path, **env: str) -> dict:
  out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TINYVIZ_COMPILE_CACHE": str(cache), **env})
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_later_process_links_the_pools_functions_from_disk(tmp_path):
  first = child(tmp_path)
  assert first["made"] == 1 and first["pool_made"] >= 4  # (worker, post, finish, noop, the entries)
  assert len(list(tmp_path.iterdir())) >= 1 + first["pool_made"]
  second = child(tmp_path)
  assert second["made"] == 0 and second["pool_made"] == 0  # all linked from disk
  assert first["chunks"] == second["chunks"] == [[0, 5], [5, 10]]


def test_the_cache_off_compiles_them(tmp_path):
  child(tmp_path, CACHELEVEL="0")
  assert not list(tmp_path.iterdir())
  assert child(tmp_path, CACHELEVEL="0")["made"] == 1


def test_an_entry_holding_something_else_is_compiled_again(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYVIZ_COMPILE_CACHE", str(tmp_path))
  jit = get_jit()
  ir = threadpool._entry_ir(*SIG).replace("tv_entry", "tv_entry_odd")  # (IR no other test compiles)
  monkeypatch.setattr(threadpool, "_entry_ir", lambda *a: ir)
  key = diskcache.full_key(f"threadpool\n{jit.triple}\n{jit.cpu} {jit.features}\nopt={threadpool.OPT_LEVEL}\n"
                           f"{ir}".encode())
  diskcache.put(key, ("tv_entry_odd_pwrong", b"not object code"))
  ignored, before = diskcache.STATS.ignored, jit.compiles
  addr = threadpool._compiled(ir, "tv_entry_odd")
  assert addr and jit.compiles == before + 1 and diskcache.STATS.ignored == ignored + 1
  symbol, obj = diskcache.get(key)  # (rewritten with the code)
  assert symbol.startswith("tv_entry_odd_p") and obj[:4] == b"\x7fELF"
