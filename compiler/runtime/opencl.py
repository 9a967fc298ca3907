"""The OpenCL runtime (pyopencl): the device and its limits, buffers, programs built by the device's compiler, and
kernels launched over global (and local) sizes, timed by OpenCL's profiling events.

A tensor on the "CL" device (compiler/device.py) has Buffers whose memory lives here (`Buffer.dev_mem`, made by
`Device.alloc`): its kernels run on that memory, with no copy in or out (compiler/realize.py runs a schedule's
COPY steps between devices). `BACKEND=cl` runs the CPU's kernels here too, each one's host buffers copied to the
device before the run and its outputs back after it. The source comes from
compiler/codegen/opencl.py and is built without fast math (`BUILD_OPTIONS`), so values are the LLVM backend's.
`CL_PLATFORM` / `CL_DEVICE` (a substring of the name, case-insensitive) pick a device; default: the first GPU,
else the first device of the first platform that has one (Debian's pocl on a machine without a GPU)."""
from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from compiler.codegen import format_uops
from compiler.codegen.opencl import ClProgram, cl_program
from compiler.trace import recorder
from compiler.uop import Ops, UOp

if TYPE_CHECKING:  # (buffer.py asks this module for a CL buffer's memory: no import back at run time)
  from compiler.runtime.buffer import Buffer

# IEEE division and sqrt for float32 (OpenCL allows 2.5 ulp without it), and no -cl-fast-relaxed-math /
# -cl-mad-enable: the LLVM backend's values, nan, inf and -0.0 included
BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt", "-cl-std=CL1.2")


class OpenCLError(RuntimeError):
  """No usable OpenCL device, or a program the device's compiler refused (with its build log)."""


def _cl() -> Any:
  try:
    import pyopencl
  except ImportError as e:  # (the `cl` extra: pip install '.[cl]', and an ICD such as Debian's pocl-opencl-icd)
    raise OpenCLError("BACKEND=cl needs pyopencl (pip install pyopencl) and an OpenCL driver "
                      "(apt-get install pocl-opencl-icd)") from e
  return pyopencl


@dataclass(frozen=True)
class DeviceLimits:
  """What the optimizer and the renderer may assume about a device, read from the device."""
  name: str
  max_work_group_size: int
  max_work_item_sizes: tuple[int, ...]
  local_mem_bytes: int
  max_dims: int
  fp16: bool  # IEEE half arithmetic (ieee_half): without it half is only a storage type (vload_half / vstore_half)
  fp64: bool


# CL_DEVICE_HALF_FP_CONFIG's bits the renderer's half arithmetic needs (CL_FP_DENORM, CL_FP_INF_NAN,
# CL_FP_ROUND_TO_NEAREST): OpenCL lets a device flush half denormals and round half ops toward zero, which would
# give other values than the LLVM backend's
HALF_IEEE_BITS = 0x1 | 0x2 | 0x4


def ieee_half(extensions: Sequence[str], half_config: int) -> bool:
  """Whether a device computes half as IEEE does: cl_khr_fp16, and its half config has denormals, inf and nan and
  rounding to nearest (then compiler/codegen/opencl.py renders half arithmetic; else half is storage only)."""
  return "cl_khr_fp16" in extensions and half_config & HALF_IEEE_BITS == HALF_IEEE_BITS


class Device:
  """One OpenCL device with its context and a profiling command queue."""

  def __init__(self, platform: str = "", device: str = ""):
    cl = _cl()
    try:
      platforms = cl.get_platforms()
    except cl.Error as e:  # (the ICD loader finds no platform: no driver installed)
      raise OpenCLError(f"no OpenCL platform: {e}") from None
    found = [(p, d) for p in platforms if platform.lower() in p.name.lower()
             for d in p.get_devices() if device.lower() in d.name.lower()]
    if not found:
      raise OpenCLError(f"no OpenCL device matches platform {platform!r} device {device!r} (platforms: "
                        f"{', '.join(p.name for p in platforms) or 'none'})")
    gpus = [pd for pd in found if pd[1].type & cl.device_type.GPU]
    self.platform, self.device = (gpus or found)[0]
    self.ctx = cl.Context([self.device])
    self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    ext = self.device.extensions.split()
    try:
      half_config = int(self.device.half_fp_config) if "cl_khr_fp16" in ext else 0
    except cl.Error:  # (a device that reports no half config: storage-only half)
      half_config = 0
    self.limits = DeviceLimits(self.device.name.strip(), int(self.device.max_work_group_size),
                               tuple(int(x) for x in self.device.max_work_item_sizes),
                               int(self.device.local_mem_size), int(self.device.max_work_item_dimensions),
                               ieee_half(ext, half_config), "cl_khr_fp64" in ext)
    self._kernels: dict[str, Any] = {}
    self.copies = {"in": 0, "out": 0}  # host <-> device copies made, ever (tests count them)

  def __repr__(self) -> str:
    return f"<Device {self.limits.name!r} on {self.platform.name.strip()!r}>"

  # ---- buffers
  def alloc(self, nbytes: int, zero: bool = False) -> Any:
    """Device memory of nbytes (at least 1: OpenCL refuses an empty buffer), zeroed when `zero`."""
    cl = _cl()
    mem = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=max(1, nbytes))
    if zero and nbytes:
      cl.enqueue_fill_buffer(self.queue, mem, np.uint8(0), 0, nbytes)
    return mem

  def copy_in(self, dst: Any, src: np.ndarray) -> None:
    """Host -> device (queued: pyopencl holds the host array until it is done); counted in `copies`."""
    self.copies["in"] += 1
    if src.nbytes:
      _cl().enqueue_copy(self.queue, dst, np.ascontiguousarray(src), is_blocking=False)

  def copy_out(self, dst: np.ndarray, src: Any) -> None:
    """Device -> host, waited for; counted in `copies`."""
    self.copies["out"] += 1
    if dst.nbytes:
      _cl().enqueue_copy(self.queue, dst, src, is_blocking=True)

  def finish(self) -> None:
    """Wait for everything queued (a copy in is asynchronous)."""
    self.queue.finish()

  # ---- programs
  def build(self, src: str, fname: str) -> Any:
    """The kernel `fname` of OpenCL C `src`, built once per source (kernels of one source share one cl.Kernel: its
    arguments are set at each launch); OpenCLError with the build log on failure."""
    return self.build_timed(src, fname)[0]

  def build_timed(self, src: str, fname: str) -> tuple[Any, float]:
    """build's kernel and the seconds the device's compiler took for it now (0.0: built before)."""
    kernel = self._kernels.get(src)
    if kernel is not None:
      return kernel, 0.0
    cl = _cl()
    t0 = time.perf_counter()
    try:
      kernel = cl.Kernel(cl.Program(self.ctx, src).build(options=list(BUILD_OPTIONS)), fname)
    except cl.Error as e:
      raise OpenCLError(f"OpenCL build of kernel {fname!r} failed on {self.limits.name}:\n{e}") from None
    self._kernels[src] = kernel
    return kernel, time.perf_counter() - t0

  def launch(self, kernel: Any, gsize: Sequence[int], lsize: Sequence[int] | None, args: Sequence[Any]) -> float:
    """Run kernel over gsize work-items (in work-groups of lsize; None: the driver picks) and wait for it; the
    seconds it ran on the device, from its profiling event."""
    cl = _cl()
    for i, a in enumerate(args):
      kernel.set_arg(i, a)
    ev = cl.enqueue_nd_range_kernel(self.queue, kernel, tuple(gsize), None if lsize is None else tuple(lsize))
    ev.wait()
    return (ev.profile.end - ev.profile.start) * 1e-9


@functools.lru_cache(None)
def get_device() -> Device:
  """The process's OpenCL device (CL_PLATFORM / CL_DEVICE pick one; see the module doc)."""
  return Device(os.environ.get("CL_PLATFORM", ""), os.environ.get("CL_DEVICE", ""))


def _array(b: Any) -> np.ndarray:
  return b if isinstance(b, np.ndarray) else b.np


def _on_device(b: Any) -> bool:
  """A Buffer whose memory is this device's (a CL tensor's): the kernel runs on it, nothing is copied."""
  return getattr(b, "device", "CPU") == "CL"


def launch_sizes(prg: ClProgram) -> tuple[list[int | str], list[int | str] | None]:
  """The global and local sizes of a program's launch (a size of variables as its expression; local None: the
  driver picks the work-groups), as a trace's opencl source record holds them."""
  def dims(es: tuple[UOp, ...]) -> list[int | str]:
    return [e.arg if e.op is Ops.CONST else e.render() for e in es]
  return dims(prg.global_size) or [1], None if prg.local_size is None else dims(prg.local_size)


class ClKernel:
  """A kernel built for the OpenCL device; call it with its buffers in slot order (Buffers or numpy arrays). While
  tracing, its build writes the kernel's "uops" and "opencl" sources (with the launch's sizes and the build's time)
  into the current trace context, and each run a `run` record timed by its profiling event."""

  def __init__(self, prg: ClProgram, device: Device):
    self.program, self.name, self.device = prg, prg.name, device
    ts = time.time()  # when the build began (with compile_s, its span on the viewer's timeline)
    self.kernel, self.compile_s = device.build_timed(prg.src, prg.fname)
    self.last_s = 0.0  # how long the last run took on the device (its profiling event)
    self.opts: tuple = ()  # the opts applied to its AST (DEBUG=3 prints them)
    if recorder.RECORDER is not None:
      self._record_sources(ts)

  def _record_sources(self, ts: float) -> None:
    """The "uops" and "opencl" source records, each line mapped to its UOps' trace nodes (as an LLVM kernel's)."""
    prg, rec = self.program, recorder.RECORDER
    assert rec is not None
    uops = [rec.node_id(u) for u in prg.uops]
    gsize, lsize = launch_sizes(prg)
    sizes = {"global_size": gsize} if lsize is None else {"global_size": gsize, "local_size": lsize}
    recorder.record("source", kind="uops", text=format_uops(prg.uops), compile_s=0.0, ts=ts,
                    lines=[[i] for i in range(len(prg.uops))], uops=uops)
    recorder.record("source", kind="opencl", text=prg.src, compile_s=self.compile_s, ts=ts,
                    lines=[list(x) for x in prg.lines], uops=uops, **sizes)

  def __repr__(self) -> str:
    return f"<ClKernel {self.name} global={self.program.global_size} local={self.program.local_size}>"

  def __call__(self, bufs: Sequence[Buffer | np.ndarray], var_vals: Mapping[str, int] | None = None) -> float:
    """Run on the buffers: a CL Buffer's device memory as it is, host ones (arrays, CPU Buffers) copied in before
    and the outputs copied back after; the seconds the kernel ran on the device."""
    prg, dev = self.program, self.device
    if len(bufs) != prg.nbufs:
      raise ValueError(f"kernel {self.name!r} takes {prg.nbufs} buffers, got {len(bufs)}")
    arrs: list[Any] = [b.ensure_allocated() if _on_device(b) else _array(b) for b in bufs]
    for slot, (a, dt) in enumerate(zip(arrs, prg.buf_dtypes)):
      have = a.dtype.np if _on_device(a) else a.dtype
      if dt is not None and have != dt.np:
        raise TypeError(f"kernel {self.name!r}: buffer {slot} must be {dt.np}, got {have}")
    dbufs = []
    for a in arrs:  # one device buffer per distinct array (an in-place kernel passes one twice)
      same = a.dev_mem if _on_device(a) else next((d for d, b in zip(dbufs, arrs) if b is a), None)
      if same is None:
        same = dev.alloc(a.nbytes)
        dev.copy_in(same, a)
      dbufs.append(same)
    vv = dict(var_vals or {})
    args = dbufs + [np.int32(vv[v]) for v in prg.var_names]
    gsize, lsize = prg.global_dims(vv), prg.local_dims(vv)
    if 0 in gsize:  # (no work-item: OpenCL refuses an empty range)
      return 0.0
    lim = dev.limits
    if lsize is not None and (math.prod(lsize) > lim.max_work_group_size or
                              any(n > m for n, m in zip(lsize, lim.max_work_item_sizes))):
      raise OpenCLError(f"kernel {self.name!r}: work-group {lsize} exceeds {lim.name}'s limits (at most "
                        f"{lim.max_work_group_size} work-items, {list(lim.max_work_item_sizes)} per dimension)")
    ts = time.time()
    self.last_s = dt = dev.launch(self.kernel, gsize, lsize, args)
    for slot in prg.outs:
      if not _on_device(arrs[slot]):
        dev.copy_out(arrs[slot], dbufs[slot])
    if recorder.RECORDER is not None:  # (into the current context: the kernel's, or a TinyJit replay's)
      flops, nbytes = prg.flops(vv), sum(arrs[i].nbytes for i in prg.ins) + sum(arrs[i].nbytes for i in prg.outs)
      recorder.record("run", kname=self.name, times=[dt], min=dt, median=dt, flops=flops, bytes=nbytes,
                      gflops=flops / dt / 1e9 if dt > 0 else 0.0, gbs=nbytes / dt / 1e9 if dt > 0 else 0.0, ts=ts)
    return self.last_s


def cl_kernel(ast: UOp) -> ClKernel:
  """Render an (optimized) kernel AST to OpenCL C for the process's device and build it."""
  dev = get_device()
  return ClKernel(cl_program(ast, dev.limits.fp16), dev)


__all__ = ["BUILD_OPTIONS", "ClKernel", "Device", "DeviceLimits", "OpenCLError", "cl_kernel", "get_device",
           "ieee_half", "launch_sizes"]
