"""Rendering a linearized kernel to LLVM IR text.

Signature: `void @name(ptr noalias %data0, ..., i32 %<var>..., iN %core_start, iN %core_end)`; buffer slots
0..max are all parameters (unused ones too), DEFINE_VARs follow sorted by name; iN is the parallel loop's type
(i64 where its size is a constant: codegen's "widen index" pass gives loop counters and index math int64, else i32),
as every loop counter has its RANGE's type. A kernel of more
than MAX_BUF_ARGS buffers takes them as one array of pointers instead (`ptr %bufs`: ctypes calls at most 1024
arguments), loaded at entry (without noalias: such kernels are rare and bound by their loads anyway).
bool is i1 in registers and i8 in memory. Loops are top-tested with PHIs for the counter and for every
accumulator updated inside them.
Fast-math only on reduce accumulations: `reassoc contract` on the chain acc op v0 op v1 ..., and `contract` on the
float products it adds, so LLVM may vectorize and reorder the sum and fuse a product into it (fma); a reduction
may differ from the interpreter by that reordering and the products' roundings. Every other float op is plain
IEEE, the interpreter's result bit for bit: an fma outside a sum changes a*b - c by the rounding of a*b, all of
the answer where c is that product rounded (a value stored by one kernel and recomputed by the next: std over
one element was inf, not nan). Never `nnan`/`ninf` (kernels see inf and nan). Integer division and shifts are
guarded so division by zero gives 0 and INT_MIN // -1 wraps, as in the interpreter, instead of trapping.
A float MAX is `llvm.maximum`, IEEE 754-2019 maximum: NaN if either operand is NaN, +0.0 above -0.0 in either order
(the interpreter's and the constant folder's MAX, torch.maximum's); not `maxnum`, which drops a NaN, nor fcmp and
select, which keeps one operand's zero. Vector max reductions are built of such selects and fixed up to the same
answer (compiler/codegen/lowerer.py).
Half means the same on every CPU, with or without native half instructions (AVX512-FP16, F16C, neither): each half
op is rounded to half once, as if computed exactly (as numpy does: in float32, then rounded). For + - * / sqrt, the
compares, max and the conversions from ints (exact in float32 wherever the half is finite) that is the correctly
rounded half result, so LLVM may lower them natively (vaddsh) or in float32 alike. Half never gets `contract` (a
half fma rounds once where the promoted code rounds twice), MULACC of halves is a product and a sum, each rounded
(the interpreter's a * b + c), and half -> int casts go through float32 (exact) to the saturating conversion
(LLVM 22 lowers `fptosi.sat.i16.f16` with AVX512-FP16 without its NaN check: NaN gave -32768). Transcendentals of
half are computed in float32 and rounded; NaN payloads are not kept."""
from __future__ import annotations

import functools
import math
import re
import struct
from typing import Callable

import numpy as np

from compiler.codegen.errors import CodegenError
from compiler.codegen.linearizer import Linear
from compiler.dtype import DType, dtypes
from compiler.host import host_cpu
from compiler.uop import FastOps, GroupOp, Ops, UOp

_SCALAR = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
           dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64",
           dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double"}
_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}



def ltype(dt: DType, mem: bool = False) -> str:
  """LLVM type of a dtype (in memory, bool is i8)."""
  s = dt.scalar()
  if s not in _SCALAR:
    raise TypeError(f"dtype {dt} has no LLVM type")
  base = "i8" if mem and s == dtypes.bool else _SCALAR[s]
  return base if dt.count == 1 else f"<{dt.count} x {base}>"


def _isuffix(dt: DType) -> str:
  s = _SCALAR[dt.scalar()]
  s = _SUFFIX.get(s, s)
  return s if dt.count == 1 else f"v{dt.count}{s}"


def const_text(v, dt: DType) -> str:
  """A scalar constant as LLVM spells it (floats in exact hex)."""
  s = dt.scalar()
  if s == dtypes.bool:
    return "true" if v else "false"
  if dtypes.is_int(s):
    bits = 8 * s.itemsize
    iv = int(v) & ((1 << bits) - 1)
    return str(iv - (1 << bits) if iv >= 1 << (bits - 1) else iv)
  if s == dtypes.float16:
    return "0xH%04X" % int(np.array(v, dtype=np.float16).view(np.uint16))
  if s == dtypes.float32:
    v = float(np.float32(v)) if math.isfinite(v) else v
  if isinstance(v, float) and math.isnan(v):
    return "0x7FF8000000000000"
  return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(v)))[0]


# per-node tables of the ALU renderer, made once (a literal in _alu was a dict and its Ops.X lookups a node)
_FCMP = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}
_SCMP = {Ops.CMPLT: "slt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}
_UCMP = {Ops.CMPLT: "ult", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}
_FLOAT_ONLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.FDIV, Ops.POW})
_BOOL_OPS = {Ops.ADD: "or", Ops.MUL: "and", Ops.MAX: "or", Ops.SUB: "xor", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
# ops whose dtype is no value's (buffers, their indexing, a scratch's AFTER): render_llvm checks the others' types
_UNTYPED = frozenset({Ops.INDEX, Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.AFTER})

MAX_BUF_ARGS = 512  # more buffers than this are passed as an array of pointers


def bufs_in_array(nbufs: int) -> bool:
  """Whether a kernel of nbufs buffers takes them as one array of pointers (see the module doc)."""
  return nbufs > MAX_BUF_ARGS


# debug metadata numbers: !0 the compile unit, !1 its file, then the kernel's subprogram, its type and the module flag;
# the location of the UOp at position i is !(_DBG_LOC + i), the loops' metadata after all of those
_DBG_SP = 2
_DBG_LOC = 5


def symbol(name: str) -> str:
  """name as an identifier every renderer's language accepts (LLVM IR, OpenCL C)."""
  return re.sub(r"[^A-Za-z0-9_]", "_", name) or "k"


class _Renderer:
  def __init__(self, kname: str, fname: str, lin: Linear, nbufs: int, vars_: list[UOp], debug: bool = True):
    self.kname, self.fname, self.lin = kname, fname, lin
    self.nbufs, self.vars = nbufs, vars_
    self.lines: list[str] = []
    self.names: dict[UOp, str] = {}
    self.acc_cur: dict[UOp, str] = {}
    self.vec_consts: dict[UOp, str] = {}
    self.decls: set[str] = set()
    self.block = "entry"
    self.tmp = 0
    self.accum_ops: set[UOp] = set()
    self.fused_muls: set[UOp] = set()  # float products an accumulation may fuse (fma)
    self.loop_md: list[str] = []
    self.outer_loops: set[int] = set()
    # debug locations (see _debug_md): `at` is the position of the UOp being rendered, None outside any
    self.debug, self.at = debug, None
    self.locs: set[int] = set()
    self.md_base = _DBG_LOC + len(lin.uops) if debug else 0  # the loops' metadata come after the locations

  # ---- helpers
  def err(self, reason: str, u: UOp) -> CodegenError:
    return CodegenError(self.kname, reason, u)

  def fresh(self, hint: str = "t") -> str:
    self.tmp += 1
    return f"%{hint}{self.tmp}"

  def emit(self, line: str) -> None:
    self.lines.append("  " + line + self.dbg(self.at))

  def dbg(self, at: int | None) -> str:
    """The `!dbg` attachment of an instruction made for the UOp at position `at` ("" for none)."""
    if at is None or not self.debug:
      return ""
    self.locs.add(at)
    return f", !dbg !{_DBG_LOC + at}"

  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name

  def val(self, u: UOp) -> str:
    """The operand text of u: a literal, a parameter, or the SSA name it got."""
    name = self.names.get(u)
    if name is not None:  # (most operands: an emitted value; names holds no inline node, accumulator or PHI)
      return name
    if u.op is FastOps.CONST:
      return const_text(u.arg, u.dtype)
    if u.op is FastOps.VECTORIZE and all(s.op is FastOps.CONST for s in u.src):
      text = self.vec_consts.get(u)
      if text is None:  # (spelled once a kernel: a 16-lane index or mask constant is read by every lane group)
        et = ltype(u.dtype.scalar())
        text = self.vec_consts[u] = "<" + ", ".join(f"{et} {const_text(s.arg, s.dtype)}" for s in u.src) + ">"
      return text
    if u.op is FastOps.DEFINE_GLOBAL:
      return f"%data{u.arg}"
    if u.op is FastOps.DEFINE_VAR:
      return f"%var_{symbol(str(u.arg[0]))}"
    if u.op is FastOps.DEFINE_ACC:
      return self.acc_cur[u]
    if u.op is FastOps.PHI:
      return self.acc_cur[u.src[0]]
    try:
      return self.names[u]
    except KeyError:
      raise self.err("node used before it is defined (linearizer bug)", u) from None

  def tv(self, u: UOp) -> str:
    return f"{ltype(u.dtype)} {self.val(u)}"

  def in_float32(self, dt: DType, args: list[str], fn: Callable[[list[str], DType], str]) -> str:
    """fn of half args computed in float32: the args extended, fn's result rounded back to half once."""
    ft = dtypes.float32.vec(dt.count)
    wide = []
    for a in args:
      w = self.fresh()
      self.emit(f"{w} = fpext {ltype(dt)} {a} to {ltype(ft)}")
      wide.append(w)
    r = fn(wide, ft)
    out = self.fresh()
    self.emit(f"{out} = fptrunc {ltype(ft)} {r} to {ltype(dt)}")
    return out

  def intrinsic(self, name: str, dt: DType, args: list[str], flags: str = "") -> str:
    if dt.scalar() == dtypes.float16:  # computed in float: half libcalls (fmaf16, ...) may not exist in the process
      return self.in_float32(dt, args, lambda wide, ft: self.intrinsic(name, ft, wide, flags))
    t = ltype(dt)
    fn = f"@llvm.{name}.{_isuffix(dt)}"
    self.decls.add(f"declare {t} {fn}({', '.join([t] * len(args))})")
    out = self.fresh()
    self.emit(f"{out} = call {flags}{t} {fn}({', '.join(f'{t} {a}' for a in args)})")
    return out

  def splat(self, scalar: str, dt: DType) -> str:
    n, et = dt.count, ltype(dt.scalar())
    one = self.fresh()
    self.emit(f"{one} = insertelement <1 x {et}> poison, {et} {scalar}, i32 0")
    out = self.fresh()
    self.emit(f"{out} = shufflevector <1 x {et}> {one}, <1 x {et}> poison, <{n} x i32> zeroinitializer")
    return out

  def const_like(self, v, dt: DType) -> str:
    c = const_text(v, dt)
    if dt.count == 1:
      return c
    return "<" + ", ".join([f"{ltype(dt.scalar())} {c}"] * dt.count) + ">"

  # ---- the function
  def render(self) -> str:
    in_array = bufs_in_array(self.nbufs)
    params = ["ptr noalias readonly %bufs"] if in_array else [f"ptr noalias %data{i}" for i in range(self.nbufs)]
    params += [f"i32 %var_{symbol(str(v.arg[0]))}" for v in self.vars]
    core = ltype(self.lin.par.dtype) if self.lin.par is not None else "i32"  # the parallel loop's counter type
    params += [f"{core} %core_start", f"{core} %core_end"]
    carried = self._carried()
    self.outer_loops = self._loop_nesting()
    self.label("entry")
    for i in range(self.nbufs if in_array else 0):
      self.emit(f"%data{i}.at = getelementptr inbounds ptr, ptr %bufs, i64 {i}")
      self.emit(f"%data{i} = load ptr, ptr %data{i}.at, align 8")
    loop_state: dict[UOp, dict] = {}
    if_state: dict[UOp, tuple[str, dict[UOp, str]]] = {}  # IF -> (the block before it, the accumulators there)
    for i, u in enumerate(self.lin.uops):
      self.at = i
      if u.op is FastOps.RANGE:
        loop_state[u] = self._open(u, i, carried.get(i, []))
      elif u.op is FastOps.END:
        self._close(loop_state.pop(u.src[0]))
      elif u.op is FastOps.IF:
        if_state[u] = (self.block, dict(self.acc_cur))
        self.emit(f"br i1 {self.val(u.src[0])}, label %if{u.arg}, label %endif{u.arg}")
        self.label(f"if{u.arg}")
      elif u.op is FastOps.ENDIF:
        self._endif(u.src[0], *if_state.pop(u.src[0]))
      elif u.op is FastOps.DEFINE_ACC:
        self.acc_cur[u] = self.val(u.src[0])
      elif u.op is FastOps.PHI:
        self.acc_cur[u.src[0]] = self.val(u.src[1])
      elif u.op is FastOps.STORE:
        self._store(u)
      else:
        self.names[u] = self._value(u, i)
    self.at = None
    self.emit("ret void")
    body = "\n".join(self.lines)
    decls = "\n".join(sorted(self.decls))
    md = "".join(f"{m}\n" for m in self.loop_md) + (self._debug_md() if self.debug else "")
    sp = f" !dbg !{_DBG_SP}" if self.debug else ""
    return (f"; kernel {self.kname}\n{decls}\n\ndefine void @{self.fname}({', '.join(params)}) #0{sp} {{\n{body}\n}}"
            f'\n\nattributes #0 = {{ nounwind "frame-pointer"="none" }}\n{md}')

  def _debug_md(self) -> str:
    """Line-table debug info whose line N is the UOp at position N - 1 of the linearized kernel (DWARF's line 0 is
    "no line"): LLVM's optimizer keeps an instruction's location and its code generator writes them as `.loc`
    directives, so each line of the optimized IR and of the assembly names the UOps it came from (source_lines)."""
    head = ['!llvm.dbg.cu = !{!0}', f'!llvm.module.flags = !{{!{_DBG_SP + 2}}}',
            '!0 = distinct !DICompileUnit(language: DW_LANG_C, file: !1, producer: "tinyviz", isOptimized: true, '
            'runtimeVersion: 0, emissionKind: LineTablesOnly)',
            f'!1 = !DIFile(filename: "{symbol(self.kname)}.uops", directory: "")',
            f'!{_DBG_SP} = distinct !DISubprogram(name: "{self.fname}", scope: !1, file: !1, line: 1, type: '
            f'!{_DBG_SP + 1}, scopeLine: 1, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0)',
            f'!{_DBG_SP + 1} = !DISubroutineType(types: !{{}})',
            f'!{_DBG_SP + 2} = !{{i32 2, !"Debug Info Version", i32 3}}']
    locs = [f"!{_DBG_LOC + i} = !DILocation(line: {i + 1}, scope: !{_DBG_SP})" for i in sorted(self.locs)]
    return "".join(f"{x}\n" for x in head + locs)

  def _loop_nesting(self) -> set[int]:
    """Positions of loops that contain another loop. LLVM's loop vectorizer is kept off them: once it has fully
    unrolled a short inner loop it would vectorize the outer one with strided gathers, slowly to compile (100+ ms)
    and rarely faster; vectors across lanes are what UPCAST is for."""
    out: set[int] = set()
    stack: list[int] = []
    for i, u in enumerate(self.lin.uops):
      if u.op is FastOps.RANGE:
        if stack:
          out.add(stack[-1])
        stack.append(i)
      elif u.op is FastOps.END:
        stack.pop()
    return out

  def _carried(self) -> dict[int, list[UOp]]:
    """For each loop (by position: a RANGE may loop twice), the accumulators updated inside it."""
    pos: dict[UOp, int] = {}
    open_loops: list[tuple[UOp, int]] = []
    out: dict[int, list[UOp]] = {}
    for i, u in enumerate(self.lin.uops):
      if u.op is FastOps.RANGE:
        open_loops.append((u, i))
      elif u.op is FastOps.END:
        open_loops.pop()
      elif u.op is FastOps.DEFINE_ACC:
        pos[u] = i
      elif u.op is FastOps.PHI:
        acc = u.src[0]
        for _, at in open_loops:
          if at > pos[acc]:
            out.setdefault(at, []).append(acc)
    self._mark_accums({acc for accs in out.values() for acc in accs})
    return out

  def _mark_accums(self, accs: set[UOp]) -> None:
    """The chain acc op v0 op v1 ... of each reduce gets `reassoc` (only that chain uses the accumulator): one walk
    for all of them (a node is on some chain when a source is), where a walk per accumulator and loop was 506 walks
    of GPT's training step (its IR the same: issue 29)."""
    chain_nodes = set(accs)
    for u in self.lin.uops:
      if u.op in GroupOp.Binary and any(s in chain_nodes for s in u.src):
        chain_nodes.add(u)
        self.accum_ops.add(u)
        if u.op is FastOps.ADD:
          self.fused_muls.update(s for s in u.src if s.op is FastOps.MUL)

  def _open(self, r: UOp, i: int, accs: list[UOp]) -> dict:
    name = f"%r{i}"
    self.names[r] = name
    par = r is self.lin.par
    start = "%core_start" if par else "0"
    end = "%core_end" if par else self.val(r.src[0])
    pre = self.block
    self.emit(f"br label %loop{i}")
    self.label(f"loop{i}")
    hdr = len(self.lines)
    self.lines.append("")  # the counter's PHI, filled in when the loop closes
    outer = {}
    for acc in accs:
      outer[acc] = self.acc_cur[acc]
      self.lines.append("")
      self.acc_cur[acc] = f"%acc{acc.arg}.l{i}"
    self.emit(f"%c{i} = icmp slt {ltype(r.dtype)} {name}, {end}")
    self.emit(f"br i1 %c{i}, label %body{i}, label %exit{i}")
    self.label(f"body{i}")
    return {"i": i, "r": r, "pre": pre, "hdr": hdr, "start": start, "accs": accs, "outer": outer}

  def _endif(self, iff: UOp, pre: str, before: dict[UOp, str]) -> None:
    """Close IF iff: an accumulator updated inside it (a gated reduce's loops) is merged with its value before it."""
    last = self.block
    self.emit(f"br label %endif{iff.arg}")
    self.label(f"endif{iff.arg}")
    for acc, cur in self.acc_cur.items():
      if acc in before and before[acc] != cur:
        name = f"%acc{acc.arg}.if{iff.arg}"
        self.emit(f"{name} = phi {ltype(acc.dtype)} [ {before[acc]}, %{pre} ], [ {cur}, %{last} ]")
        self.acc_cur[acc] = name

  def _close(self, st: dict) -> None:
    i, r = st["i"], st["r"]
    self.emit(f"%r{i}.next = add nuw nsw {ltype(r.dtype)} %r{i}, 1")
    latch = self.block
    if i in self.outer_loops:  # LLVM vectorizes only loops that are innermost here (see _loop_nesting)
      n = self.md_base + len(self.loop_md) * 2
      self.loop_md.append(f"!{n} = distinct !{{!{n}, !{n + 1}}}\n!{n + 1} = "
                          '!{!"llvm.loop.vectorize.enable", i1 false}')
      self.emit(f"br label %loop{i}, !llvm.loop !{n}")
    else:
      self.emit(f"br label %loop{i}")
    self.lines[st["hdr"]] = (f"  %r{i} = phi {ltype(r.dtype)} [ {st['start']}, %{st['pre']} ], "
                             f"[ %r{i}.next, %{latch} ]{self.dbg(i)}")
    for k, acc in enumerate(st["accs"]):
      t = ltype(acc.dtype)
      self.lines[st["hdr"] + 1 + k] = (f"  %acc{acc.arg}.l{i} = phi {t} [ {st['outer'][acc]}, %{st['pre']} ], "
                                       f"[ {self.acc_cur[acc]}, %{latch} ]{self.dbg(i)}")
      self.acc_cur[acc] = f"%acc{acc.arg}.l{i}"
    self.label(f"exit{i}")
    del r

  # ---- memory
  def _addr(self, ix: UOp) -> str:
    buf, idx = ix.src[0], ix.src[1]
    if buf.op not in (FastOps.DEFINE_GLOBAL, FastOps.DEFINE_LOCAL, FastOps.AFTER):
      raise self.err("INDEX of something other than a buffer", ix)
    if len(ix.src) > 2:
      raise self.err("INDEX with a valid left after lowering", ix)
    if idx.dtype.count != 1 or not dtypes.is_int(idx.dtype):
      raise self.err("index must be a scalar int", ix)
    p = self.fresh("p")
    et = ltype(buf.dtype.base.scalar(), mem=True)
    self.emit(f"{p} = getelementptr inbounds {et}, ptr {self.val(buf)}, {self.tv(idx)}")
    return p

  def _store(self, st: UOp) -> None:
    ix, v = st.src[0], st.src[1]
    if ix.op is not Ops.INDEX:
      raise self.err("STORE needs an INDEX", st)
    p = self.val(ix)
    text = self.val(v)
    align = v.dtype.scalar().itemsize
    if v.dtype.scalar() == dtypes.bool:
      z = self.fresh()
      self.emit(f"{z} = zext {self.tv(v)} to {ltype(v.dtype, mem=True)}")
      text = z
    self.emit(f"store {ltype(v.dtype, mem=True)} {text}, ptr {p}, align {align}")

  def _load(self, u: UOp) -> str:
    ix = u.src[0]
    if ix.op is not Ops.INDEX:
      raise self.err("LOAD needs an INDEX", u)
    mt = ltype(u.dtype, mem=True)
    out = self.fresh("ld")
    if len(u.src) > 1:  # a masked vector load: the lanes off the mask read nothing (their addresses may be outside)
      return self._masked_load(u, out)
    p = self.val(ix)
    self.emit(f"{out} = load {mt}, ptr {p}, align {u.dtype.scalar().itemsize}")
    if u.dtype.scalar() == dtypes.bool:
      b = self.fresh()
      self.emit(f"{b} = icmp ne {mt} {out}, {'zeroinitializer' if u.dtype.count > 1 else '0'}")
      return b
    return out

  def _masked_load(self, u: UOp, out: str) -> str:
    """LOAD(INDEX(buf, idx), mask): llvm.masked.load, 0 in the lanes off the mask; the address is computed without
    `inbounds` (the first lanes of a padded row lie before the buffer when they are off the mask)."""
    buf, idx = u.src[0].src[:2]
    if u.dtype.count == 1 or u.src[1].dtype.count != u.dtype.count or u.dtype.scalar() == dtypes.bool:
      raise self.err("a masked load is a vector of values with a mask a lane", u)
    et, t = ltype(buf.dtype.base.scalar(), mem=True), ltype(u.dtype)
    p = self.fresh("p")
    self.emit(f"{p} = getelementptr {et}, ptr {self.val(buf)}, {self.tv(idx)}")
    fn = f"@llvm.masked.load.{_isuffix(u.dtype)}.p0"
    self.decls.add(f"declare {t} {fn}(ptr, i32, {ltype(u.src[1].dtype)}, {t})")
    self.emit(f"{out} = call {t} {fn}(ptr {p}, i32 {u.dtype.scalar().itemsize}, {self.tv(u.src[1])}, "
              f"{t} zeroinitializer)")
    return out

  # ---- values
  def _value(self, u: UOp, i: int) -> str:
    if u.op is FastOps.LOAD:
      return self._load(u)
    if u.op is FastOps.VECTORIZE:
      return self._vectorize(u)
    if u.op is FastOps.GEP:
      out = self.fresh()
      if isinstance(u.arg, tuple):  # lanes of a vector as a vector (a horizontal reduce's halves)
        mask = ", ".join(f"i32 {i}" for i in u.arg)
        self.emit(f"{out} = shufflevector {self.tv(u.src[0])}, {ltype(u.src[0].dtype)} poison, "
                  f"<{len(u.arg)} x i32> <{mask}>")
      else:
        self.emit(f"{out} = extractelement {self.tv(u.src[0])}, i32 {u.arg}")
      return out
    if u.op is FastOps.CAST:
      return self._cast(u)
    if u.op is FastOps.BITCAST:
      if u.dtype.itemsize != u.src[0].dtype.itemsize or dtypes.bool in (u.dtype.scalar(), u.src[0].dtype.scalar()):
        raise self.err("BITCAST between types of different size", u)
      out = self.fresh()
      self.emit(f"{out} = bitcast {self.tv(u.src[0])} to {ltype(u.dtype)}")
      return out
    if u.op in GroupOp.ALU:
      return self._alu(u)
    if u.op is FastOps.INDEX:
      return self._addr(u)
    if u.op is FastOps.DEFINE_LOCAL:  # a STAGE scratch: the function's own, so each thread's call has one
      if self.block != "entry":
        raise self.err("a scratch must be allocated before the loops", u)
      out = self.fresh("local")
      self.emit(f"{out} = alloca [{u.dtype.size} x {ltype(u.dtype.base, mem=True)}], align 64")
      return out
    if u.op is FastOps.AFTER:  # the scratch, read once its fill (the second source, placed before) is done
      return self.val(u.src[0])
    raise self.err(f"unsupported op {u.op.name}", u)

  def _vectorize(self, u: UOp) -> str:
    s0 = u.src[0]
    if all(s is s0 for s in u.src):
      return self.splat(self.val(s0), u.dtype)
    t = ltype(u.dtype)
    cur = "poison"
    for k, s in enumerate(u.src):
      nxt = self.fresh("vec")
      self.emit(f"{nxt} = insertelement {t} {cur}, {self.tv(s)}, i32 {k}")
      cur = nxt
    return cur

  def _cast(self, u: UOp) -> str:
    x = u.src[0]
    fs, ts = x.dtype.scalar(), u.dtype.scalar()
    src, tt = self.tv(x), ltype(u.dtype)
    out = self.fresh("cast")
    if fs == ts or (_SCALAR[fs] == _SCALAR[ts] and dtypes.is_int(fs) and dtypes.is_int(ts)):
      return self.val(x)
    if ts == dtypes.bool:
      z = "zeroinitializer" if x.dtype.count > 1 else ("0.0" if dtypes.is_float(fs) else "0")
      self.emit(f"{out} = {'fcmp une' if dtypes.is_float(fs) else 'icmp ne'} {src}, {z}")
      return out
    fb = 1 if fs == dtypes.bool else 8 * fs.itemsize
    tb = 8 * ts.itemsize
    funsigned = fs == dtypes.bool or dtypes.is_unsigned(fs)
    if dtypes.is_int(ts):
      if dtypes.is_float(fs):
        # plain fptosi/fptoui of NaN or an out-of-range value is poison; the saturating forms are defined (clamped,
        # NaN -> 0), as the interpreter computes it. A half goes through float32 (exact): native half conversions
        # are a lowering of their own, and LLVM's for half -> i16 loses the NaN check (see the module doc)
        fdt = dtypes.float32.vec(x.dtype.count) if fs == dtypes.float16 else x.dtype
        if fdt != x.dtype:
          wide = self.fresh()
          self.emit(f"{wide} = fpext {src} to {ltype(fdt)}")
          src = f"{ltype(fdt)} {wide}"
        fn = f"@llvm.fpto{'u' if dtypes.is_unsigned(ts) else 's'}i.sat.{_isuffix(u.dtype)}.{_isuffix(fdt)}"
        self.decls.add(f"declare {tt} {fn}({ltype(fdt)})")
        self.emit(f"{out} = call {tt} {fn}({src})")
        return out
      else:
        op = "trunc" if fb > tb else ("zext" if funsigned else "sext")
    elif dtypes.is_float(ts):
      if fs == dtypes.float64 and ts == dtypes.float16:
        return self._f64_to_f16(x, u.dtype)
      if dtypes.is_float(fs):
        op = "fptrunc" if fs.itemsize > ts.itemsize else "fpext"
      else:
        op = "uitofp" if funsigned else "sitofp"
    else:
      raise self.err(f"can't cast {x.dtype} to {u.dtype}", u)
    self.emit(f"{out} = {op} {src} to {tt}")
    return out

  def _f64_to_f16(self, x: UOp, dt: DType) -> str:
    """double -> half without the __truncdfhf2 libcall: round to float with round-to-odd, then to half (exact)."""
    n = dt.count
    dd, ff, ii = ltype(dtypes.float64.vec(n)), ltype(dtypes.float32.vec(n)), ltype(dtypes.int32.vec(n))
    bt = ltype(dtypes.bool.vec(n))
    f, back, exact, over, i, dec, odd, sel, f2, out = (self.fresh() for _ in range(10))
    self.emit(f"{f} = fptrunc {dd} {self.val(x)} to {ff}")
    self.emit(f"{back} = fpext {ff} {f} to {dd}")
    self.emit(f"{exact} = fcmp oeq {dd} {back}, {self.val(x)}")
    ab, ax = self.intrinsic("fabs", dtypes.float64.vec(n), [back]), self.intrinsic("fabs", dtypes.float64.vec(n),
                                                                                  [self.val(x)])
    self.emit(f"{over} = fcmp ogt {dd} {ab}, {ax}")
    self.emit(f"{i} = bitcast {ff} {f} to {ii}")
    z = self.fresh()
    self.emit(f"{z} = zext {bt} {over} to {ii}")
    self.emit(f"{dec} = sub {ii} {i}, {z}")
    self.emit(f"{odd} = or {ii} {dec}, {self.const_like(1, dtypes.int32.vec(n))}")
    self.emit(f"{sel} = select {bt} {exact}, {ii} {i}, {ii} {odd}")
    self.emit(f"{f2} = bitcast {ii} {sel} to {ff}")
    self.emit(f"{out} = fptrunc {ff} {f2} to {ltype(dt)}")
    return out

  def _alu(self, u: UOp) -> str:
    op, dt = u.op, u.dtype
    srcs = u.src
    sdt = srcs[0].dtype if op in GroupOp.Comparison or op is FastOps.WHERE else dt
    s = sdt.scalar()
    is_f, is_b = dtypes.is_float(s), s == dtypes.bool
    uns = dtypes.is_unsigned(s) or is_b
    t = ltype(sdt)
    a = [self.val(x) for x in srcs]
    out = self.fresh("alu")
    # half never contracts: a half fma rounds once where CPUs without one round twice (see the module doc)
    contract = "" if s == dtypes.float16 else "contract "
    fm = f"reassoc {contract}" if u in self.accum_ops else contract if u in self.fused_muls else ""
    if op is FastOps.WHERE:
      self.emit(f"{out} = select {self.tv(srcs[0])}, {self.tv(srcs[1])}, {self.tv(srcs[2])}")
      return out
    if op in GroupOp.Comparison:
      if is_f:
        pred = _FCMP[op]
        self.emit(f"{out} = fcmp {pred} {t} {a[0]}, {a[1]}")
      else:
        pred = (_UCMP if uns else _SCMP)[op]
        self.emit(f"{out} = icmp {pred} {t} {a[0]}, {a[1]}")
      return out
    if is_f:
      return self._falu(u, out, t, a, fm)
    if op in _FLOAT_ONLY:
      raise self.err(f"{op.name} needs a float dtype", u)
    if is_b:
      bop = _BOOL_OPS.get(op)
      if op is FastOps.NEG:
        self.emit(f"{out} = xor {t} {a[0]}, {self.const_like(True, dt)}")
        return out
      if op is FastOps.TRUNC:
        return a[0]
      if op is FastOps.WHERE or bop is None:
        raise self.err(f"{op.name} is not defined on bool", u)
      self.emit(f"{out} = {bop} {t} {a[0]}, {a[1]}")
      return out
    nsw = " nsw" if dt.count == 1 and not uns and (u.vmin, u.vmax) != (dtypes.min(dt), dtypes.max(dt)) else ""
    if op in (FastOps.ADD, FastOps.SUB, FastOps.MUL):
      self.emit(f"{out} = {op.name.lower()}{nsw} {t} {a[0]}, {a[1]}")
    elif op is FastOps.NEG:
      self.emit(f"{out} = sub {t} {self.const_like(0, dt)}, {a[0]}")
    elif op is FastOps.TRUNC:
      return a[0]
    elif op is FastOps.MAX:
      return self.intrinsic("umax" if uns else "smax", dt, a)
    elif op in (FastOps.AND, FastOps.OR, FastOps.XOR):
      self.emit(f"{out} = {op.name.lower()} {t} {a[0]}, {a[1]}")
    elif op in (FastOps.IDIV, FastOps.MOD):
      return self._divmod(u, t, a, uns)
    elif op in (FastOps.SHL, FastOps.SHR):
      return self._shift(u, t, a, uns)
    elif op is FastOps.MULACC:
      m = self.fresh()
      self.emit(f"{m} = mul {t} {a[0]}, {a[1]}")
      self.emit(f"{out} = add {t} {m}, {a[2]}")
    else:
      raise self.err(f"unsupported int op {op.name}", u)
    return out

  def _falu(self, u: UOp, out: str, t: str, a: list[str], fm: str) -> str:
    op, dt = u.op, u.dtype
    if op in (FastOps.ADD, FastOps.SUB, FastOps.MUL):
      self.emit(f"{out} = f{op.name.lower()} {fm}{t} {a[0]}, {a[1]}")
    elif op is FastOps.FDIV:
      self.emit(f"{out} = fdiv {t} {a[0]}, {a[1]}")
    elif op is FastOps.RECIP:
      self.emit(f"{out} = fdiv {t} {self.const_like(1.0, dt)}, {a[0]}")
    elif op is FastOps.NEG:
      self.emit(f"{out} = fneg {t} {a[0]}")
    elif op is FastOps.MAX:
      return self.intrinsic("maximum", dt, a, fm if u in self.accum_ops else "")
    elif op is FastOps.MULACC and dt.scalar() == dtypes.float16:  # each rounded to half, as the interpreter does
      m = self.fresh()
      self.emit(f"{m} = fmul {t} {a[0]}, {a[1]}")
      self.emit(f"{out} = fadd {t} {m}, {a[2]}")
    elif op is FastOps.MULACC:
      return self.intrinsic("fma", dt, a)
    elif op is FastOps.EXP2 and dt.scalar() in (dtypes.float32, dtypes.float16):
      return self._exp2(a[0], dt)
    elif op is FastOps.LOG2 and dt.scalar() in (dtypes.float32, dtypes.float16):
      return self._log2(a[0], dt)
    elif op in (FastOps.EXP2, FastOps.LOG2, FastOps.SIN, FastOps.SQRT, FastOps.TRUNC, FastOps.POW):
      return self.intrinsic(op.name.lower(), dt, a)
    else:
      raise self.err(f"{op.name} is not defined on floats", u)
    return out

  def _exp2(self, x: str, dt: DType) -> str:
    """exp2 inline for float32 (and half, computed in float32), so loops of it vectorize: 2^round(x) times a
    degree-7 polynomial of the remainder in [-0.5, 0.5] (Taylor series of e^(f ln 2), error < 1e-8 before
    rounding), the product rounded once (results down to denormals and up to inf). With AVX-512 that product is
    one `vscalefps` (p * 2^n) of a 4/8/16-lane vector: 12 instructions a vector instead of 23."""
    if dt.scalar() == dtypes.float16:
      return self.in_float32(dt, [x], lambda wide, ft: self._exp2(wide[0], ft))
    scalef = _scalef_intrinsic(dt)
    if scalef is None:
      return self._exp2_bits(x, dt)
    t, bt = ltype(dt), ltype(dtypes.bool.vec(dt.count))
    # clamped so that inf - rint(inf) is no NaN; `x > 130 ? 130 : x` keeps a NaN x (one min instruction)
    hi, lo, xh, xc = (self.fresh() for _ in range(4))
    self.emit(f"{hi} = fcmp ogt {t} {x}, {self.const_like(130.0, dt)}")
    self.emit(f"{xh} = select {bt} {hi}, {t} {self.const_like(130.0, dt)}, {t} {x}")
    self.emit(f"{lo} = fcmp olt {t} {xh}, {self.const_like(-160.0, dt)}")
    self.emit(f"{xc} = select {bt} {lo}, {t} {self.const_like(-160.0, dt)}, {t} {xh}")
    n = self.intrinsic("rint", dt, [xc])
    p = self._exp2_poly(xc, n, dt)
    mask = f"i{max(8, dt.count)}"  # all lanes; the 512-bit form also takes the rounding, 4: the current mode
    rnd = (", i32", ", i32 4") if dt.count == 16 else ("", "")
    self.decls.add(f"declare {t} {scalef}({t}, {t}, {t}, {mask}{rnd[0]})")
    out = self.fresh()  # p * 2^n rounded once (down to denormals, up to inf), NaN kept
    self.emit(f"{out} = call {t} {scalef}({t} {p}, {t} {n}, {t} poison, {mask} -1{rnd[1]})")
    return out

  def _exp2_poly(self, xc: str, n: str, dt: DType) -> str:
    """The polynomial of exp2's remainder f = xc - n, by Horner's rule (fused multiply-adds)."""
    t = ltype(dt)
    f, p = self.fresh(), self.const_like(math.log(2) ** 7 / math.factorial(7), dt)
    self.emit(f"{f} = fsub {t} {xc}, {n}")
    for k in range(6, -1, -1):
      m, q = self.fresh(), self.fresh()
      self.emit(f"{m} = fmul contract {t} {p}, {f}")
      self.emit(f"{q} = fadd contract {t} {m}, {self.const_like(math.log(2) ** k / math.factorial(k), dt)}")
      p = q
    return p

  def _log2(self, x: str, dt: DType) -> str:
    """log2 inline for float32 (and half, computed in float32): llvm.log2 of a vector is one libm call a lane (GPT's
    tanh, by expm1's log, ran at 4 GFLOP/s). x = m 2^e with m in [sqrt(1/2), sqrt(2)) from its bits (a denormal
    scaled by 2^23 first), log2 x = e + ln(m) / ln 2 with ln m = 2 atanh(s), s = (m - 1) / (m + 1) (m - 1 exact,
    |s| < 0.172), by atanh's odd series to s^11 (truncation < 3e-9 relative): within 2 ulp of float64's; 0 -> -inf,
    inf -> inf, below 0 or NaN -> NaN."""
    if dt.scalar() == dtypes.float16:
      return self.in_float32(dt, [x], lambda wide, ft: self._log2(wide[0], ft))
    idt = dtypes.int32.vec(dt.count)
    t, it, bt = ltype(dt), ltype(idt), ltype(dtypes.bool.vec(dt.count))
    c = lambda v: self.const_like(v, dt)  # noqa: E731
    ci = lambda v: self.const_like(v, idt)  # noqa: E731
    sub, xs0, xs, bias, b, b2, k, e, ef, mb, mb2, m, fm, den, s_, z = (self.fresh() for _ in range(16))
    self.emit(f"{sub} = fcmp olt {t} {x}, {c(2.0 ** -126)}")
    self.emit(f"{xs0} = fmul {t} {x}, {c(2.0 ** 23)}")
    self.emit(f"{xs} = select {bt} {sub}, {t} {xs0}, {t} {x}")
    self.emit(f"{bias} = select {bt} {sub}, {it} {ci(127 + 23)}, {it} {ci(127)}")
    self.emit(f"{b} = bitcast {t} {xs} to {it}")
    # (musl's logf) moving [sqrt(1/2), 1) up by an exponent step puts the split at sqrt(2): m's mantissa bits, and
    # the exponent from the bits above them
    self.emit(f"{b2} = add {it} {b}, {ci(0x3f800000 - 0x3f3504f3)}")
    self.emit(f"{k} = lshr {it} {b2}, {ci(23)}")
    self.emit(f"{e} = sub {it} {k}, {bias}")
    self.emit(f"{ef} = sitofp {it} {e} to {t}")
    self.emit(f"{mb} = and {it} {b2}, {ci(0x7fffff)}")
    self.emit(f"{mb2} = add {it} {mb}, {ci(0x3f3504f3)}")
    self.emit(f"{m} = bitcast {it} {mb2} to {t}")
    self.emit(f"{fm} = fsub {t} {m}, {c(1.0)}")
    self.emit(f"{den} = fadd {t} {m}, {c(1.0)}")
    self.emit(f"{s_} = fdiv {t} {fm}, {den}")
    self.emit(f"{z} = fmul {t} {s_}, {s_}")
    # ln m = f - hfsq + s (hfsq + R), hfsq = f^2 / 2, R = 2 (z/3 + z^2/5 + .. + z^5/11) (musl's logf): the exact f
    # carries the leading term, so the rounding errors stay near 1 ulp
    p = c(2.0 / 11)
    for k_ in (9, 7, 5, 3):
      mz, q = self.fresh(), self.fresh()
      self.emit(f"{mz} = fmul contract {t} {p}, {z}")
      self.emit(f"{q} = fadd contract {t} {mz}, {c(2.0 / k_)}")
      p = q
    rz, hf, hf2, sum_, sr, d, ln, r, isinf = (self.fresh() for _ in range(9))
    self.emit(f"{rz} = fmul {t} {p}, {z}")
    self.emit(f"{hf} = fmul {t} {fm}, {fm}")
    self.emit(f"{hf2} = fmul {t} {hf}, {c(0.5)}")
    self.emit(f"{sum_} = fadd {t} {hf2}, {rz}")
    self.emit(f"{sr} = fmul {t} {s_}, {sum_}")
    self.emit(f"{d} = fsub {t} {hf2}, {sr}")
    self.emit(f"{ln} = fsub {t} {fm}, {d}")
    # (fmuladd: one fma where the target has it, no libcall where it has not: SSE)
    self.emit(f"{r} = call {t} @llvm.fmuladd.{_isuffix(dt)}({t} {ln}, {t} {c(1 / math.log(2))}, {t} {ef})")
    self.decls.add(f"declare {t} @llvm.fmuladd.{_isuffix(dt)}({t}, {t}, {t})")
    r1, iszero, r2, bad, out = (self.fresh() for _ in range(5))
    self.emit(f"{isinf} = fcmp oeq {t} {x}, {c(math.inf)}")
    self.emit(f"{r1} = select {bt} {isinf}, {t} {c(math.inf)}, {t} {r}")
    self.emit(f"{iszero} = fcmp oeq {t} {x}, {c(0.0)}")
    self.emit(f"{r2} = select {bt} {iszero}, {t} {c(-math.inf)}, {t} {r1}")
    self.emit(f"{bad} = fcmp ult {t} {x}, {c(0.0)}")  # below 0, or NaN
    self.emit(f"{out} = select {bt} {bad}, {t} {c(math.nan)}, {t} {r2}")
    return out

  def _exp2_bits(self, x: str, dt: DType) -> str:
    """exp2's 2^n from exponent bits, in two factors (so a result down to denormals rounds once); a NaN x is
    selected back at the end (the clamps turn it into a number)."""
    t, it = ltype(dt), ltype(dtypes.int32.vec(dt.count))
    c = lambda v: self.const_like(v, dt)  # noqa: E731
    ci = lambda v: self.const_like(v, dtypes.int32.vec(dt.count))  # noqa: E731
    lo = self.intrinsic("minnum", dt, [x, c(130.0)])
    xc = self.intrinsic("maxnum", dt, [lo, c(-160.0)])
    n = self.intrinsic("rint", dt, [xc])
    p = self._exp2_poly(xc, n, dt)
    ni, n1, n2, s1, s2, b1, b2, e1, e2, r1, r, isnan, out = (self.fresh() for _ in range(13))
    self.emit(f"{ni} = fptosi {t} {n} to {it}")
    self.emit(f"{n1} = ashr {it} {ni}, {ci(1)}")
    self.emit(f"{n2} = sub {it} {ni}, {n1}")
    self.emit(f"{e1} = add {it} {n1}, {ci(127)}")
    self.emit(f"{e2} = add {it} {n2}, {ci(127)}")
    self.emit(f"{b1} = shl {it} {e1}, {ci(23)}")
    self.emit(f"{b2} = shl {it} {e2}, {ci(23)}")
    self.emit(f"{s1} = bitcast {it} {b1} to {t}")
    self.emit(f"{s2} = bitcast {it} {b2} to {t}")
    self.emit(f"{r1} = fmul {t} {p}, {s1}")
    self.emit(f"{r} = fmul {t} {r1}, {s2}")
    self.emit(f"{isnan} = fcmp uno {t} {x}, {x}")
    self.emit(f"{out} = select {ltype(dtypes.bool.vec(dt.count))} {isnan}, {t} {x}, {t} {r}")
    return out

  def _divmod(self, u: UOp, t: str, a: list[str], uns: bool) -> str:
    op, dt = u.op, u.dtype
    d = u.src[1]
    name = ("u" if uns else "s") + ("div" if op is Ops.IDIV else "rem")
    out = self.fresh("dm")
    if d.op is Ops.CONST and d.arg != 0 and (uns or d.arg != -1):
      self.emit(f"{out} = {name} {t} {a[0]}, {a[1]}")
      return out
    # division by zero gives 0 and INT_MIN / -1 wraps (x86 would trap on both)
    zero, one = self.const_like(0, dt), self.const_like(1, dt)
    ct = ltype(dtypes.bool.vec(dt.count))
    isz = self.fresh()
    self.emit(f"{isz} = icmp eq {t} {a[1]}, {zero}")
    bad = isz
    if not uns:
      ism1, bad = self.fresh(), self.fresh()
      self.emit(f"{ism1} = icmp eq {t} {a[1]}, {self.const_like(-1, dt)}")
      self.emit(f"{bad} = or {ct} {isz}, {ism1}")
    safe = self.fresh()
    self.emit(f"{safe} = select {ct} {bad}, {t} {one}, {t} {a[1]}")
    q = self.fresh()
    self.emit(f"{q} = {name} {t} {a[0]}, {safe}")
    if uns or op is Ops.MOD:
      self.emit(f"{out} = select {ct} {bad}, {t} {zero}, {t} {q}")
      return out
    neg, tmp = self.fresh(), self.fresh()
    self.emit(f"{neg} = sub {t} {zero}, {a[0]}")
    self.emit(f"{tmp} = select {ct} {isz}, {t} {zero}, {t} {neg}")
    self.emit(f"{out} = select {ct} {bad}, {t} {tmp}, {t} {q}")
    return out

  def _shift(self, u: UOp, t: str, a: list[str], uns: bool) -> str:
    dt = u.dtype
    bits = 8 * dt.scalar().itemsize
    name = "shl" if u.op is Ops.SHL else ("lshr" if uns else "ashr")
    out = self.fresh("sh")
    sh = u.src[1]
    if sh.op is Ops.CONST and 0 <= sh.arg < bits:
      self.emit(f"{out} = {name} {t} {a[0]}, {a[1]}")
      return out
    # shifting by the width or more: 0 (or the sign for ashr), as Python's wrapped result
    ct = ltype(dtypes.bool.vec(dt.count))
    big, raw = self.fresh(), self.fresh()
    self.emit(f"{big} = icmp uge {t} {a[1]}, {self.const_like(bits, dt)}")
    self.emit(f"{raw} = {name} {t} {a[0]}, {a[1]}")
    if name == "ashr":
      sign = self.fresh()
      self.emit(f"{sign} = ashr {t} {a[0]}, {self.const_like(bits - 1, dt)}")
      self.emit(f"{out} = select {ct} {big}, {t} {sign}, {t} {raw}")
    else:
      self.emit(f"{out} = select {ct} {big}, {t} {self.const_like(0, dt)}, {t} {raw}")
    return out


@functools.lru_cache(None)
def host_features() -> frozenset[str]:
  """The features of the CPU the JIT compiles every kernel for (host_cpu: the host's, or TARGET_ISA's), as LLVM
  names them ("+avx512f", ...)."""
  return frozenset(f for f in host_cpu()[1].split(",") if f)


def _scalef_intrinsic(dt: DType) -> str | None:
  """AVX-512's p * 2^n (vscalefps) for a float32 vector of 16 lanes (8 and 4 with AVX-512VL) on a host with it."""
  feats = host_features()
  if dt.scalar() != dtypes.float32 or "+avx512f" not in feats:
    return None
  if dt.count == 16 or (dt.count in (4, 8) and "+avx512vl" in feats):
    return f"@llvm.x86.avx512.mask.scalef.ps.{32 * dt.count}"
  return None


def render_llvm(kname: str, fname: str, lin: Linear, nbufs: int, vars_: list[UOp], debug: bool = True) -> str:
  """LLVM IR text of one kernel function (see the module doc for the signature); `debug`: with the debug locations
  that map generated lines to UOps (_Renderer._debug_md), which leave the machine code as it is (tested)."""
  for u in lin.uops:
    if u.op not in _UNTYPED and u.dtype != dtypes.void:
      try:
        ltype(u.dtype)
      except TypeError as e:
        raise CodegenError(kname, str(e), u) from None
  return _Renderer(kname, fname, lin, nbufs, vars_, debug).render()
