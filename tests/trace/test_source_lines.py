"""Generated lines to nodes (issue 32): every line of a kernel's generated sources (uops, LLVM IR, optimized IR,
assembly) names the UOps it came from, through LLVM by debug locations (compiler.codegen.llvmir), and `show --source
KIND --json` gives each line with its trace node ids."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from support.codegen_helpers import UP, elementwise, matmul, split

from compiler.codegen import program
from compiler.codegen.errors import kernel_name
from compiler.codegen.linearizer import linearize
from compiler.codegen.llvmir import render_llvm, symbol
from compiler.codegen.program import format_uops, get_program, lower_ast
from compiler.dtype import dtypes
from compiler.runtime.llvm import get_jit
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import Ops, UOp
from vztrace.format import MAX_LINE_UOPS, TraceFormatError, clip_lists, validate_record
from vztrace.linemap import _is_instruction, record_lines, source_lines
from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("uops", "llvm_ir", "opt_ir", "asm")


@pytest.fixture(scope="module")
def matmul_relu(tmp_path_factory) -> tuple[Path, dict[int, str], list[dict]]:
  """A traced matmul + relu: (trace, node id -> op, the source records)."""
  path = tmp_path_factory.mktemp("lines") / "t.vztrace"
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
  recorder.enable(path, announce=False)
  try:
    out = (Tensor(x) @ Tensor(w)).contiguous().relu().numpy()  # (contiguous: two kernels, a reduce and an elementwise)
  finally:
    recorder.disable()
  np.testing.assert_allclose(out, np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-5)
  recs = list(TraceReader(path))
  ops = {r["id"]: r["op"] for r in recs if r.get("t") == "node"}
  return path, ops, [r for r in recs if r.get("t") == "source"]


def _lines(rec: dict, ops: dict[int, str]) -> list[tuple[str, list[str]]]:
  """(text, the ops of the nodes it maps to) of each line of a source record."""
  text, lines = rec["text"].split("\n"), record_lines(rec)
  assert len(lines) == len(text) and all(type(i) is int for i in rec["uops"])
  return [(t, [ops[rec["uops"][i]] for i in ln]) for t, ln in zip(text, lines)]


def test_every_asm_instruction_maps_to_a_node(matmul_relu):
  _, ops, srcs = matmul_relu
  asm = [s for s in srcs if s["kind"] == "asm"]
  assert len(asm) == 2  # the matmul and the relu
  for s in asm:
    lines = _lines(s, ops)
    instrs = [(t, o) for t, o in lines if _is_instruction(t)]
    assert len(instrs) > 10
    assert [t for t, o in instrs if not o] == []
    # directives and labels name no node
    assert all(not o for t, o in lines if t.strip().startswith(".") or t.endswith(":"))


@pytest.mark.parametrize("kind", ["llvm_ir", "opt_ir"])
def test_ir_lines_name_the_uop_they_came_from(matmul_relu, kind):
  _, ops, srcs = matmul_relu
  # (relu is a select of a compare)
  want = {" fmul ": {"MUL"}, " fadd ": {"ADD"}, " select ": {"WHERE"}, "store ": {"STORE"}, " load ": {"LOAD"}}
  seen = set()
  for s in (s for s in srcs if s["kind"] == kind):
    for t, o in _lines(s, ops):
      for key, allowed in want.items():
        if key in t and not t.startswith("declare"):
          # LLVM drops the location of an instruction it hoists out of a loop (a load of the matmul's row): the
          # optimized IR may leave such a line unmapped, never mapped to another op
          assert len(o) == 1 or (kind == "opt_ir" and not o), (t, o)
          if o:
            assert o[0] in allowed, (t, o)
            seen.add(key)
  assert seen == set(want)


def test_uops_listing_lines_are_their_uops(matmul_relu):
  _, ops, srcs = matmul_relu
  for s in (s for s in srcs if s["kind"] == "uops"):
    for t, o in _lines(s, ops):
      assert len(o) == 1 and t.split()[1] == o[0]


def test_the_trace_stores_no_map_its_texts_tell(matmul_relu):
  """Format 2.8: a recording writes no `lines` for the kinds whose text tells them (making them was ~0.065 s of the
  GPT training step's recording); a reader makes them from the text, and a record that has them keeps its own."""
  _, _, srcs = matmul_relu
  assert sorted(s["kind"] for s in srcs) == sorted(KINDS * 2) and all("lines" not in s for s in srcs)
  made = [record_lines(s) for s in srcs]
  assert all(len(m) == s["text"].count("\n") + 1 and any(m) for m, s in zip(made, srcs))
  # a trace before 2.8 (or an OpenCL kernel's record) has its own map: that one is read, whatever the text says
  assert record_lines({**srcs[0], "lines": [[5]]}) == [[5]]
  # before 2.4 no `uops`: no map; a kind whose text tells nothing: none either
  assert record_lines({k: v for k, v in srcs[0].items() if k != "uops"}) is None
  assert record_lines({**srcs[0], "kind": "opencl"}) is None


def test_the_map_names_the_kernel_graph_nodes(matmul_relu):
  # the positions resolve to the nodes of the kernel's graph as the trace shows it ("View Output AST")
  path, _, srcs = matmul_relu
  recs = list(TraceReader(path))
  for s in (s for s in srcs if s["kind"] == "asm"):
    rws = [r for r in recs if r.get("t") == "rw_begin" and r["ctx"] == s["ctx"] and r["name"] == "View Output AST"]
    assert len(rws) == 1
    shown = _below(recs, rws[0]["root"])
    mapped = {s["uops"][i] for ln in record_lines(s) for i in ln}
    assert mapped and mapped <= shown | _after(recs, rws[0]["root"])


def _below(recs: list[dict], root: int) -> set[int]:
  src = {r["id"]: r["src"] for r in recs if r.get("t") == "node"}
  seen, stack = set(), [root]
  while stack:
    x = stack.pop()
    if x not in seen:
      seen.add(x)
      stack.extend(src[x])
  return seen


def _after(recs: list[dict], root: int) -> set[int]:
  """Nodes the linearizer made (ids after the graph's root: END, ...)."""
  return {r["id"] for r in recs if r.get("t") == "node" and r["id"] > root}


KERNELS = {"elementwise": lambda: elementwise(3, 40), "matmul": lambda: split(matmul(32, 32, 32), 1, 8, UP)}


def _text_sections(obj: bytes) -> dict[str, bytes]:
  return {s.name(): s.data() for s in llvm.ObjectFileRef.from_data(obj).sections() if s.is_text()}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_debug_info_leaves_the_machine_code_unchanged(name):
  """An untraced compile's IR has no line tables (only a trace reads them), and they change no machine code."""
  ast = KERNELS[name]()
  prg = get_program(ast)
  kname = kernel_name(ast)
  lin = linearize(lower_ast(ast, wide_index=True), kname)  # (as get_program lowers for LLVM)
  dbg = render_llvm(kname, symbol(kname), lin, prg.nbufs, list(prg.vars), debug=True)
  assert "!dbg" in dbg and "!dbg" not in prg.src
  jit = get_jit()
  with_dbg, without = (_text_sections(jit.object_code(src, prg.fname, "k_dbg")) for src in (dbg, prg.src))
  assert without and any(without.values())
  assert with_dbg == without


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_uops_listing_spells_each_source_once(name, monkeypatch):
  """format_uops (a traced compile lists every kernel) spells an inlined source once, not once a use, and lists each
  UOp as one line: position, indent, op, dtype, sources (listed ones as %position), arg."""
  prg = get_program(KERNELS[name]())
  calls: list[UOp] = []
  inline, nest = program._inline, [0]

  def counted(s: UOp) -> str:  # (the calls format_uops makes, not a vector's own for its lanes)
    if nest[0] == 0:
      calls.append(s)
    nest[0] += 1
    try:
      return inline(s)
    finally:
      nest[0] -= 1
  monkeypatch.setattr(program, "_inline", counted)
  text = format_uops(prg.uops)
  assert calls and len(calls) == len(set(calls))  # (the old listing spelled a constant at every use)
  pos: dict[UOp, int] = {}
  depth = 0
  for i, (u, line) in enumerate(zip(prg.uops, text.split("\n"), strict=True)):
    depth -= u.op in (Ops.END, Ops.ENDIF)
    srcs = ", ".join(f"%{pos[s]}" if s in pos else inline(s) for s in u.src)
    dt, arg = "" if u.dtype == dtypes.void else str(u.dtype), "" if u.arg is None else f"  {u.arg!r}"
    assert line == f"{i:4d} {'  ' * depth}{u.op.name:<12s} {dt:<10s} ({srcs}){arg}"
    depth += u.op in (Ops.RANGE, Ops.IF)
    pos[u] = i


def test_line_zero_takes_the_location_before_it():
  asm = "f:\n\t.loc\t1 5 0\n\tmovq\t%rax, %rbx\n\t.loc\t1 0 0 is_stmt 0\n\taddq\t$1, %rax\n.LBB0_1:\n\tret"
  assert source_lines("asm", asm) == [[], [], [4], [], [4], [], [4]]
  # instructions before the first location take the first one
  assert source_lines("asm", "\tpushq\t%rbp\n\t.loc\t1 3 0\n\tret") == [[2], [], [2]]


def test_equal_lines_share_one_list():
  """A kernel's four sources name each position on many lines: one list a position (and one for no position a
  source), not one a line (120,000 lists the cycle collector tracked on the GPT training step), and equal values."""
  prg = get_program(KERNELS["matmul"]())
  jf, _ = get_jit().compile(prg.src, prg.fname, want_text=True)
  at: dict[int, list[int]] = {}
  texts = (("uops", format_uops(prg.uops)), ("llvm_ir", prg.src), ("opt_ir", jf.opt_ir), ("asm", jf.asm))
  lines = [source_lines(kind, text, at) for kind, text in texts]
  assert [source_lines(kind, text) for kind, text in texts] == lines  # sharing changes no value
  every = [x for per_kind in lines for x in per_kind]
  assert len(every) > 2 * len(prg.uops)
  assert all(x == [] or at[x[0]] is x for x in every)
  assert len({id(x) for x in every}) <= len(prg.uops) + len(texts)


def test_source_record_map_is_bounded_and_valid():
  rec = {"t": "source", "ctx": 1, "kind": "asm", "text": "a\nb", "compile_s": 0.0, "lines": [[0], list(range(40))],
         "uops": [7] * 40}
  with pytest.raises(TraceFormatError, match="more than 16"):
    validate_record(rec)
  clipped = clip_lists(rec)  # (what the writer writes)
  assert clipped["lines"] == [[0], list(range(MAX_LINE_UOPS))] and validate_record(clipped)


@pytest.mark.parametrize("kind", KINDS)
def test_show_source_json_gives_each_line_its_nodes(matmul_relu, kind):
  path, ops, srcs = matmul_relu
  out = subprocess.run([sys.executable, "-m", "compiler.trace", "show", str(path), "--kernel", "r_16_24_32",
                        "--source", kind, "--json"], cwd=ROOT, check=True, capture_output=True, text=True,
                       timeout=300).stdout
  (obj,) = [json.loads(x) for x in out.splitlines()]
  assert obj["type"] == "source" and obj["kind"] == kind and obj["name"] == "r_16_24_32"
  rec = next(s for s in srcs if s["kind"] == kind and s["ctx"] == obj["ctx"])
  assert [x["line"] for x in obj["lines"]] == list(range(1, len(obj["lines"]) + 1))
  assert "\n".join(x["text"] for x in obj["lines"]) == obj["text"] == rec["text"]
  assert [x["nodes"] for x in obj["lines"]] == [[rec["uops"][i] for i in ln] for ln in record_lines(rec)]
  assert sum(1 for x in obj["lines"] if x["nodes"]) > 10 and all(n in ops for x in obj["lines"] for n in x["nodes"])
