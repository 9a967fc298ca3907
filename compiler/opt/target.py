"""What the optimizer may assume about the machine: locals, threads, vector width, and the CPU's identity."""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
  """The optimizer's view of a device. The host CPU has no local (shared) memory, so LOCAL/GROUP are refused."""
  name: str = "CPU"
  has_local: bool = False
  has_shared: bool = False
  shared_max: int = 0  # bytes of local memory a GROUP may use
  threads: int = 1  # cores a THREAD opt should spread a kernel over
  max_threads: int = 64  # the largest THREAD split allowed
  vector_floats: int = 4  # float32 lanes the heuristics aim a unit-stride upcast at
  vector_regs: int = 16  # vector registers, which bound a register tile
  cpu: str = ""  # LLVM's name of the CPU
  features: str = ""  # LLVM's feature string, e.g. "+avx2,+fma,..."

  @property
  def key(self) -> str:
    """Identifies the machine for caches: BEAM results from another CPU are not reused."""
    return f"{self.name}|{self.cpu}|{self.features}|threads={self.threads}"


def _cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def _llvm_host() -> tuple[str, str]:
  try:
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
  except Exception:  # llvmlite missing or broken: the machine name still keys the caches
    return platform.machine(), platform.processor()


@functools.lru_cache(None)
def host_target() -> Target:
  """The host CPU; THREADS=n overrides the number of cores used (THREADS=1 disables THREAD opts)."""
  cpu, features = _llvm_host()
  threads = int(os.environ.get("THREADS", "0") or 0) or _cores()
  feats = set(features.split(","))
  # a float32 vector register holds 16 lanes with AVX-512, 8 with AVX, 4 otherwise (SSE, NEON)
  vec = 16 if "+avx512f" in feats else 8 if "+avx" in feats else 4
  regs = 32 if "+avx512f" in feats or "+neon" in feats else 16
  return Target(threads=max(1, threads), cpu=cpu, features=features, vector_floats=vec, vector_regs=regs)
