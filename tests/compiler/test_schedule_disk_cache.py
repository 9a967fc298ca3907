"""The schedule cache on disk (compiler.schedule.cache disk_get / disk_put, in the compile cache's folder): a schedule
found there is the very same kernels and gives the same values; anything that changes a schedule changes the key; a
foreign entry is ignored with a DEBUG line and written again; a kernel's name is claimed only where it is free; the
keys name values, not objects (diskcache.stable_bytes). The second process's side: test_compile_cache.py."""
import dataclasses
import pickle

import numpy as np
import pytest

from compiler import Tensor
from compiler.dtype import dtypes
from compiler.runtime import diskcache
from compiler.schedule import cache
from compiler.schedule.cache import SCHEDULES, structure_key
from compiler.schedule.naming import _split_name, claim_kernel_names
from compiler.uop import KernelInfo, UOp

pytestmark = pytest.mark.usefixtures("fresh_caches")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
  for k in ("CACHELEVEL", "DISABLE_COMPILER_CACHE", "SCHEDULE_CACHE", "NESTED_REDUCE", "DEBUG"):
    monkeypatch.delenv(k, raising=False)
  monkeypatch.setenv("TINYVIZ_COMPILE_CACHE", str(tmp_path / "cc"))
  return tmp_path / "cc"


X = np.arange(24, dtype=np.float32).reshape(4, 6) / 5


def _program(c: float) -> Tensor:
  """A softmax of x * c (a constant of the test's own: no other test's schedule)."""
  return (Tensor(X) * c).softmax(-1)


def _want(c: float) -> np.ndarray:
  z = X.astype(np.float64) * c
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_a_schedule_from_disk_is_the_same_kernels_and_values(cache_dir):
  first = [si.ast for si in _program(1.375).schedule()]
  assert SCHEDULES.disk_hits == 0 and len(list(cache_dir.iterdir())) == 1  # (schedule(): no kernel compiled)
  SCHEDULES.clear()  # (this process's memory: what a fresh process lacks)
  again = [si.ast for si in _program(1.375).schedule()]
  assert SCHEDULES.disk_hits == 1 and len(again) == len(first) >= 2
  assert all(a is b for a, b in zip(again, first))  # the very same ASTs, names included: the same compiled kernels
  SCHEDULES.clear()
  np.testing.assert_allclose(_program(1.375).numpy(), _want(1.375), rtol=1e-6)
  assert SCHEDULES.disk_hits == 1  # (counted since the clear)


def test_what_changes_a_schedule_changes_its_key(cache_dir, monkeypatch):
  key, _ = structure_key(UOp.sink(_program(2.125).uop))
  dkey = cache.disk_key(key)
  assert dkey is not None and cache.disk_key(key) == dkey
  assert cache.disk_key(structure_key(UOp.sink(_program(2.25).uop))[0]) != dkey  # another constant
  monkeypatch.setenv("NESTED_REDUCE", "1")  # a knob the scheduler's passes read
  assert cache.disk_key(key) != dkey
  monkeypatch.delenv("NESTED_REDUCE")
  monkeypatch.setattr(diskcache, "compiler_version", lambda: "another compiler")
  assert cache.disk_key(key) != dkey
  monkeypatch.setenv("CACHELEVEL", "0")
  assert cache.disk_key(key) is None


def test_a_traced_schedule_does_not_use_the_disk(cache_dir, trace):
  assert cache.disk_key(structure_key(UOp.sink(_program(2.5).uop))[0]) is None


def test_a_foreign_entry_is_ignored_with_a_debug_line_and_written_again(cache_dir, monkeypatch, capsys):
  _program(3.125).schedule()
  (entry,) = cache_dir.iterdir()
  ast = UOp.sink()  # (a UOp of the allowed types, but no schedule's shape)
  assert diskcache.put(entry.name, ((ast, ()), (), (), ())) is not None
  SCHEDULES.clear()
  ignored = diskcache.STATS.ignored
  monkeypatch.setenv("DEBUG", "1")
  np.testing.assert_allclose(_program(3.125).numpy(), _want(3.125), rtol=1e-6)  # scheduled again: right
  assert diskcache.STATS.ignored == ignored + 1 and SCHEDULES.disk_hits == 0
  assert f"compile cache: ignored entry {entry.name[:16]}: schedule:" in capsys.readouterr().err
  SCHEDULES.clear()
  _program(3.125).schedule()
  assert SCHEDULES.disk_hits == 1  # rewritten: loads again


def test_a_kernel_name_is_claimed_only_where_it_is_free(cache_dir):
  ast = _program(4.125).schedule()[0].ast
  base, n = _split_name(ast.arg.name)
  assert claim_kernel_names([ast])  # its own name: free for it
  assert not claim_kernel_names([ast.replace(arg=KernelInfo(name=f"{base}n{n + 7}"))])  # it is named otherwise here
  assert not claim_kernel_names([ast.replace(arg=KernelInfo(name="E_999"))])  # not a name of its shape


def test_keys_name_values_not_objects():
  # equal, another object (dtypes can't be: their constructor interns; a dtype rebuilt is the same object)
  assert dataclasses.replace(dtypes.float32) is dtypes.float32
  arg = ("".join(["float", "32"]), 4)
  arg2 = ("".join(["float", "32"]), 4)
  assert arg == arg2 and arg is not arg2 and arg[0] is not arg2[0]
  one, two = (arg, arg, dtypes.float32), (arg, arg2, dtypes.float32)
  assert pickle.dumps(one) != pickle.dumps(two)  # a pickle's bytes say which equal objects are one object
  assert diskcache.stable_bytes(one) == diskcache.stable_bytes(two)
  assert len({diskcache.stable_bytes(v) for v in (0.0, -0.0, 1, True, 1.0, "1", (1,), [1])}) == 8
  with pytest.raises(TypeError, match="no stable key"):
    diskcache.stable_bytes(object())


def test_key_bytes_keep_their_format():
  # (stable_bytes' rows read an op's name and a seen dtype's text from tables, a schedule key's ops and dtypes first:
  # the bytes they were, so that the same AST names the same entry)
  from compiler.uop import AxisType, KernelInfo, Ops, UOp
  f32 = dtypes.float32
  g, r = UOp(Ops.DEFINE_GLOBAL, f32.ptr(16), (), 0), UOp.range(16, 0, AxisType.LOOP, dtypes.int32)
  idx = UOp(Ops.INDEX, f32.ptr(16), (g, r))
  val = UOp(Ops.ADD, f32, (UOp(Ops.LOAD, f32, (idx,)), UOp.const(f32, -0.0)))
  ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (idx, val)), UOp(Ops.END, dtypes.void, (r,))),
            KernelInfo(name="E_16"))
  f32_text, i32_text = "dDType(i11,i4,s'float32',s'f',i1,None)", "dDType(i5,i4,s'int32',s'i',i1,None)"
  void_text = "dDType(i-1,i0,s'void',None,i1,None)"
  ptr_text = f"dPtrDType(i11,i4,s'float32',s'f',i1,None,{f32_text},i16)"
  assert diskcache.stable_bytes(ast).decode().split("\n") == [
    f"DEFINE_GLOBAL|{ptr_text}||i0", f"CONST|{i32_text}||i16", f"RANGE|{i32_text}|1|(i0,eAxisType.LOOP)",
    f"INDEX|{ptr_text}|0,2|None", f"LOAD|{f32_text}|3|None", f"CONST|{f32_text}||f0000000000000080",
    f"ADD|{f32_text}|4,5|None", f"STORE|{void_text}|3,6|None", f"END|{void_text}|2|None",
    f"SINK|{void_text}|7,8|dKernelInfo(s'E_16',(),True)", "r9"]
  key = ((Ops.BUFFER, f32, (), ("in", 0, 16)), (Ops.CONST, dtypes.bool, (), True),
         (Ops.ADD, dtypes.int32, (0, 1), None))
  assert diskcache.stable_bytes((key, (None, "1"), False)).decode() == (
    f"\n(((eOps.BUFFER,{f32_text},(),(s'in',i0,i16)),(eOps.CONST,dDType(i0,i1,s'bool',s'?',i1,None),(),True),"
    f"(eOps.ADD,{i32_text},(i0,i1),None)),(None,s'1'),False)")
