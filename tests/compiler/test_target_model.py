"""The target model: vector width and registers from LLVM's CPU features, cache sizes from sysfs (with defaults),
and the heuristic's tiles derived from it on SSE, AVX2 and AVX-512 machines."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from support.opt_helpers import matmul_ast, tile

from compiler.opt import Kernel, OptOps, hand_coded_optimizations
from compiler.opt.kernel import axis_stride
from compiler.opt.target import (
  AVX2,
  AVX512,
  DEFAULT_L1,
  DEFAULT_L2,
  SSE,
  cpu_target,
  host_target,
  read_caches,
  vector_shape,
)
from compiler.uop import AxisType


def test_vector_shape_from_llvm_features():
  assert vector_shape("+sse,+sse2,-avx") == (4, 16)
  assert vector_shape("+sse4.2,+avx,+avx2,+fma,-avx512f") == (8, 16)
  assert vector_shape("+avx2,+avx512f,+avx512vl") == (16, 32)
  assert vector_shape("+neon") == (4, 32)
  t = cpu_target("+avx,+avx2", threads=3, l2_bytes=1 << 20)
  assert (t.vector_floats, t.vector_regs, t.threads, t.l2_bytes, t.line_floats) == (8, 16, 3, 1 << 20, 16)


def _cache(root: Path, name: str, level: int, kind: str, size: str, line: int = 64) -> None:
  d = root / name
  d.mkdir()
  for f, v in (("level", level), ("type", kind), ("size", size), ("coherency_line_size", line)):
    (d / f).write_text(f"{v}\n")


def test_caches_read_from_sysfs(tmp_path: Path):
  _cache(tmp_path, "index0", 1, "Data", "48K", 128)
  _cache(tmp_path, "index1", 1, "Instruction", "32K")
  _cache(tmp_path, "index2", 2, "Unified", "2048K")
  _cache(tmp_path, "index3", 3, "Unified", "32M")
  assert read_caches(tmp_path) == (128, 48 << 10, 2 << 20)


def test_caches_default_when_unreadable(tmp_path: Path):
  assert read_caches(tmp_path / "missing") == (64, DEFAULT_L1, DEFAULT_L2)
  _cache(tmp_path, "index0", 1, "Data", "garbage")
  (tmp_path / "index1").mkdir()  # a cache without its files
  assert read_caches(tmp_path) == (64, DEFAULT_L1, DEFAULT_L2)


def test_host_target_is_consistent():
  t = host_target()
  assert (t.vector_floats, t.vector_regs) == vector_shape(t.features)
  assert t.cache_line >= 16 and t.l1_bytes > 0 and t.l2_bytes >= t.l1_bytes


def _tiled(t, m: int, n: int, k: int) -> Kernel:
  return hand_coded_optimizations(Kernel(matmul_ast(m, n, k), replace(t, threads=2)))


def _accumulators(k: Kernel) -> int:
  ups = [s for s, a in zip(k.full_shape, k.axis_types) if a is AxisType.UPCAST]
  n = 1
  for s in ups:
    n *= s
  return -(-n // k.target.vector_floats)


def test_matmul_tiles_per_target():
  # columns cover a 64-byte line (16 floats), rows fill the registers left by B's vectors and one broadcast
  assert tile(_tiled(SSE, 512, 512, 512)) == {1: 16, 512: 2}  # 4 B vectors, 8 of 11 accumulators
  assert tile(_tiled(AVX2, 512, 512, 512)) == {1: 16, 512: 6}  # the 6x16 tile, the 512 % 6 rows left peeled
  assert tile(_tiled(AVX2, 384, 384, 384)) == {1: 16, 384: 6}  # the 6x16 tile: 12 of 13 accumulators
  assert tile(_tiled(AVX512, 512, 512, 512)) == {1: 16, 16: 2, 512: 8}  # 8x32: 16 accumulators
  for t in (SSE, AVX2, AVX512):
    k = _tiled(t, 384, 384, 384)
    tl = tile(k)
    b_vectors = tl[1] * tl.get(16, 1) // t.vector_floats
    assert _accumulators(k) + b_vectors + 1 <= t.vector_regs, t


def test_column_tiles_go_outside_row_tiles():
  k = _tiled(AVX2, 512, 512, 512)
  assert any(o.op is OptOps.SWAP for o in k.applied_opts)
  # after the THREAD axis, the first loop walks the column tiles (stride 16 on the store), then the row tiles
  out_idx = k.stores[0].src[0].src[1]
  assert [axis_stride(out_idx, r) for r in k.rngs[1:3]] == [16, 512 * 6]


def test_tiles_follow_the_register_file_not_the_host():
  # the same kernel, two machines: a wider register file gets a bigger tile
  assert _accumulators(_tiled(AVX512, 512, 512, 512)) > _accumulators(_tiled(AVX2, 512, 512, 512))


def test_column_tiles_go_outside_only_when_b_does_not_stay_in_l2():
  def swapped(t, n):
    return any(o.op is OptOps.SWAP for o in _tiled(t, n, n, n).applied_opts)
  assert swapped(AVX2, 512) and not swapped(AVX2, 128)  # B: 1 MiB, 64 KiB against a 256 KiB L2
  assert not swapped(replace(AVX2, l2_bytes=8 << 20), 512)  # the same kernel on a core with a big L2
