"""Devices (tinygrad's names): where a tensor's buffer lives and its kernels run. "CPU" (the host: the LLVM backend,
or BACKEND=interp) and "CL" (the OpenCL device, compiler/runtime/opencl.py). `DEV` (env) names the default device.

A device travels in the graph: a BUFFER node's arg is (id, size) on the CPU and (id, size, device) elsewhere, and a
COPY node (arg: the device it copies to) puts its source on another device. A graph of constants only has no device
of its own (`device_of` is None): it is computed where the tensors it meets live, and alone on the default device."""
from __future__ import annotations

import os

from compiler.uop import Ops, UOp

DEVICES = ("CPU", "CL")
_KEY = "_device"  # a node's device, remembered in its __dict__ ("" for none)
# whether this process made a COPY node or a buffer off the CPU (sticky): until then every buffer is the CPU's, so
# a schedule looks for no copy in its graph and an op checks no devices
_elsewhere = [False]


def canonicalize(device: str) -> str:
  """A device's canonical name: upper case, ':0' dropped ("cl", "CL:0" -> "CL"); ValueError for an unknown one."""
  if not isinstance(device, str):
    raise TypeError(f"device must be a str, got {type(device).__name__}")
  name, _, num = device.partition(":")
  name = name.upper()
  if name not in DEVICES or num not in ("", "0"):
    raise ValueError(f"unknown device {device!r} (known: {', '.join(DEVICES)})")
  return name


def default_device() -> str:
  """`DEV` (env), canonical; "CPU" when unset."""
  dev = os.environ.get("DEV", "")
  return canonicalize(dev) if dev else "CPU"


def buffer_device(b: UOp) -> str:
  """The device of a BUFFER node (its arg's third item, CPU when it has none)."""
  return b.arg[2] if len(b.arg) > 2 else "CPU"


def device_of(u: UOp) -> str | None:
  """The device a node's value lives on: its buffers', or a COPY's target; None for a graph of constants only.
  Remembered on each node walked (a chain of ops asks for each new node once, reading its sources' answers)."""
  got = u.__dict__.get(_KEY)
  if got is not None:
    return got or None
  stack = [(u, False)]
  while stack:
    x, ready = stack.pop()
    if _KEY in x.__dict__:
      continue
    if x.op is Ops.BUFFER:
      x.__dict__[_KEY] = buffer_device(x) if isinstance(x.arg, tuple) and type(x.arg[0]) is int else ""
      continue
    if x.op in (Ops.COPY, Ops.KERNEL):  # (a kernel's AST holds no device: its AFTER's buffer does)
      x.__dict__[_KEY] = x.arg if x.op is Ops.COPY else ""
      continue
    srcs = x.src[:1] if x.op is Ops.AFTER else x.src  # AFTER(buffer, kernel): the buffer's
    if not ready:
      stack.append((x, True))
      stack.extend((s, False) for s in srcs if _KEY not in s.__dict__)
      continue
    x.__dict__[_KEY] = next((d for s in srcs if (d := s.__dict__[_KEY])), "")
  return u.__dict__[_KEY] or None


def copy_to(u: UOp, device: str) -> UOp:
  """u's value on `device` (canonical): a COPY node, which the scheduler runs as a step of its own."""
  _elsewhere[0] = True
  return UOp(Ops.COPY, u.dtype, (u,), device)


def note_elsewhere() -> None:
  """A buffer off the CPU was made (a schedule's output on the default device, `DEV`, of constants alone)."""
  _elsewhere[0] = True


def devices_used() -> bool:
  """Whether this process made a COPY node or a buffer off the CPU (only then do ops check devices and schedules
  look for copies)."""
  return _elsewhere[0]


def check_same_device(op: str, *uops: UOp) -> str | None:
  """The device the operands share (None: constants only); a RuntimeError naming the op and both devices when two
  live on different devices (tinygrad and torch refuse to move one implicitly)."""
  if not _elsewhere[0]:  # (every buffer is the CPU's: no walk per op)
    return None
  found = None
  for u in uops:
    d = device_of(u)
    if d is not None and found is not None and d != found:
      raise RuntimeError(f"Tensor.{op}: operands on different devices, {found} and {d} (move one with .to())")
    found = found or d
  return found
