"""What the optimizer may assume about the machine: locals, threads, vector width and registers (from the CPU
features LLVM reports), cache line and cache sizes (from the OS), and the CPU's identity. Every heuristic reads
its sizes from a `Target`, so nothing is tuned to the CPU it was developed on."""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from compiler.host import host_cpu, preset, vector_shape
from compiler.opt.tc import TENSOR_CORES, TensorCore

CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
# what a cache we cannot read is assumed to be: today's common x86 core
DEFAULT_CACHE_LINE, DEFAULT_L1, DEFAULT_L2 = 64, 32 << 10, 512 << 10


@dataclass(frozen=True)
class Target:
  """The optimizer's view of a device. The host CPU has no local (shared) memory, so LOCAL/GROUP are refused."""
  name: str = "CPU"
  has_local: bool = False
  has_shared: bool = False
  shared_max: int = 0  # bytes of local memory a GROUP may use
  local_max: int = 0  # work-items of one work-group (the product of the LOCAL and GROUP axes; 0: not reported)
  work_dims: int = 0  # dimensions of a launch, each GROUP axis one of them (0: not reported)
  threads: int = 1  # cores a THREAD opt should spread a kernel over
  max_threads: int = 64  # the largest THREAD split allowed
  vector_floats: int = 4  # float32 lanes the heuristics aim a unit-stride upcast at
  vector_regs: int = 16  # vector registers, which bound a register tile
  cache_line: int = DEFAULT_CACHE_LINE  # bytes; a register tile's contiguous axis covers at least one
  l1_bytes: int = DEFAULT_L1  # data cache per core
  l2_bytes: int = DEFAULT_L2
  cpu: str = ""  # LLVM's name of the CPU
  features: str = ""  # LLVM's feature string, e.g. "+avx2,+fma,..."
  # the TC opt's fragments (compiler/opt/tc.py): none on a CPU, the emulated NVIDIA ones on OpenCL
  tensor_cores: tuple[TensorCore, ...] = ()
  # emulated tensor cores check the TC opt end to end but run slower than plain code (matmul 512 on pocl: 16 ms
  # without, 680 ms with): the heuristics use them only when TC is set
  tensor_cores_emulated: bool = False

  @property
  def key(self) -> str:
    """Identifies the machine for caches: BEAM results from another CPU are not reused."""
    return f"{self.name}|{self.cpu}|{self.features}|threads={self.threads}"

  @property
  def line_floats(self) -> int:
    """float32 elements in one cache line."""
    return max(1, self.cache_line // 4)


def cpu_target(features: str, threads: int = 1, cpu: str = "", cache_line: int = DEFAULT_CACHE_LINE,
               l1_bytes: int = DEFAULT_L1, l2_bytes: int = DEFAULT_L2) -> Target:
  """The target of a CPU with these LLVM features (tests build SSE / AVX2 / AVX-512 machines this way)."""
  vec, regs = vector_shape(features)
  return Target(threads=max(1, threads), cpu=cpu, features=features, vector_floats=vec, vector_regs=regs,
                cache_line=cache_line, l1_bytes=l1_bytes, l2_bytes=l2_bytes)


def isa_target(isa: str, **kw: int) -> Target:
  """The target of TARGET_ISA's preset `isa` (compiler/host.py), e.g. for tests tuning for an AVX2 machine."""
  cpu, features = preset(isa)
  return cpu_target(features, cpu=cpu, **kw)


# the machines of TARGET_ISA's presets, with their CPUs' typical L2 (the JIT compiles for the same presets)
SSE = isa_target("sse")
AVX2 = isa_target("avx2", l2_bytes=256 << 10)
AVX512 = isa_target("avx512", l2_bytes=1 << 20)
AVX512FP16 = isa_target("avx512fp16", l2_bytes=2 << 20)


def _size(text: str) -> int | None:
  """Bytes of a sysfs cache size ("32K", "1024K", "32M", "512")."""
  m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
  if not m:
    return None
  return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def read_caches(root: Path = CACHE_SYSFS) -> tuple[int, int, int]:
  """(cache line, L1 data, L2) bytes of cpu0 from sysfs; a value that cannot be read keeps its default."""
  line, l1, l2 = DEFAULT_CACHE_LINE, DEFAULT_L1, DEFAULT_L2
  try:
    dirs = sorted(root.glob("index*"))
  except OSError:
    return line, l1, l2
  for d in dirs:
    try:
      level, kind = (d / "level").read_text().strip(), (d / "type").read_text().strip()
      size = _size((d / "size").read_text())
      ln = int((d / "coherency_line_size").read_text().strip() or 0)
    except (OSError, ValueError):
      continue
    if kind not in ("Data", "Unified") or size is None or size <= 0:
      continue
    if level == "1":
      l1 = size
      line = ln if 16 <= ln <= 1024 else line
    elif level == "2":
      l2 = size
  return line, l1, l2


def _cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def cl_target(name: str, max_work_group_size: int, local_mem_bytes: int, vector_floats: int = 4,
              work_dims: int = 3) -> Target:
  """An OpenCL device's target from the limits the device reports (compiler.runtime.opencl.DeviceLimits): LOCAL
  axes (a work-group) allowed; GROUP too (has_shared: a reduce split across the work-group through __local memory
  and a barrier, at most `local_mem_bytes` of it; its axis a work-item id, so the kernel's global, LOCAL and GROUP
  axes fit the `work_dims` the renderer uses: compiler.codegen.opencl.MAX_GLOBAL_DIMS); no THREAD (its work-items are
  the parallelism); the tensor cores of compiler.opt.tc, whose WMMA the renderer emulates through __local memory,
  where a work-group holds a warp."""
  cores = tuple(tc for tc in TENSOR_CORES if tc.threads <= max_work_group_size and
                4 * (tc.dims[1] + tc.dims[0]) * tc.dims[2] <= local_mem_bytes)
  return Target(name=f"CL:{name}", has_local=True, has_shared=True, shared_max=local_mem_bytes,
                local_max=max_work_group_size, work_dims=work_dims, threads=1, max_threads=1,
                vector_floats=vector_floats, cpu=name, tensor_cores=cores,
                tensor_cores_emulated=True)


@functools.lru_cache(None)
def host_target() -> Target:
  """The host CPU (or TARGET_ISA's preset: compiler.host.host_cpu, the CPU the JIT compiles for); THREADS=n
  overrides the number of cores used (THREADS=1 disables THREAD opts)."""
  cpu, features = host_cpu()
  threads = int(os.environ.get("THREADS", "0") or 0) or _cores()
  line, l1, l2 = read_caches()
  return cpu_target(features, threads=threads, cpu=cpu, cache_line=line, l1_bytes=l1, l2_bytes=l2)


__all__ = ["Target", "cl_target", "cpu_target", "host_target", "isa_target", "read_caches", "vector_shape", "SSE",
           "AVX2", "AVX512", "AVX512FP16"]
