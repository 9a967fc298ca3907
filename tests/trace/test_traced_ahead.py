"""Compile-ahead while tracing (compiler.realize._Ahead, traced): the next kernels' contexts begun ahead in run order,
their Python part (opts, codegen passes) recorded into them, LLVM on the worker thread and the sources, runs and ends
recorded at each kernel's turn. Read back by vztrace.reader, a trace made that way holds what COMPILE_AHEAD=0 gives:
the same contexts (names, kinds, parents, schedule links, in id order), each with the same rewrites (names, match
counts, matches, roots by structure), opts, sources and runs, and outputs bit for bit; the compiles ran on the worker,
which touched no recorder; a compile's error shows in its kernel's context as it does without ahead."""
from __future__ import annotations

import threading
from typing import Any

import pytest
from support.codegen_helpers import process_libcalls
from support.tensor_values import conv_grads_and_softmax

from compiler import Tensor, engine, realize
from compiler.runtime import llvm
from compiler.runtime.llvm import LLVMCompileError, LLVMJit
from compiler.schedule.cache import SCHEDULES
from compiler.trace import recorder
from compiler.trace.recorder import Recorder
from vztrace.reader import TraceReader

WORKER = "tinyviz-compile"


class _Canon:
  """Node ids of several traces as numbers that follow structure (op, dtype, arg, sources): equal in two traces where
  the nodes are equal, whatever ids each trace gave them."""

  def __init__(self) -> None:
    self.keys: dict[tuple, int] = {}

  def add(self, nodes: dict[int, int], rec: dict, arg: Any) -> None:
    """A node record's number (its sources come before it)."""
    key = (rec["op"], rec["dtype"], arg, tuple(nodes[s] for s in rec["src"]))
    nodes[rec["id"]] = self.keys.setdefault(key, len(self.keys))


def _read(path: Any, canon: _Canon) -> dict:
  """A trace as the viewer rebuilds it, ids and times left out: contexts in id order, each with its parent's and
  schedule's positions, rewrites, opts, sources and runs."""
  nodes: dict[int, int] = {}  # id -> its canon number
  pats: dict[int, str] = {}
  ctxs: dict[int, dict] = {}
  rws: dict[int, dict] = {}
  buffers: dict[str, int] = {}
  with TraceReader(str(path)) as r:
    for rec in r:
      t = rec["t"]
      if t == "node":
        arg = rec["arg"]
        if rec["op"] == "BUFFER":  # (a buffer's number counts the process's buffers: numbered here by appearance)
          num, _, rest = arg.partition(",")
          arg = (buffers.setdefault(num, len(buffers)), rest)
        canon.add(nodes, rec, arg)
      elif t == "pattern":
        pats[rec["id"]] = rec["name"] or rec["pat"]
      elif t == "ctx_begin":
        assert rec["id"] not in ctxs
        name = rec["name"]  # (a schedule's number counts the process's schedules: numbered here by appearance)
        name = f"schedule #{sum(c['kind'] == 'schedule' for c in ctxs.values())}" if rec["kind"] == "schedule" else name
        ctxs[rec["id"]] = {"name": name, "kind": rec["kind"], "parent": rec["parent"],
                           "schedule": rec.get("schedule"), "callsites": rec.get("callsites"), "rw": [], "opt": [],
                           "source": [], "run": [], "end": None}
      elif t == "ctx_end":
        assert ctxs[rec["id"]]["end"] is None, "a context ended twice"
        ctxs[rec["id"]]["end"] = ("ended", rec.get("error"))
      elif t == "rw_begin":
        assert ctxs[rec["ctx"]]["end"] is None, "a rewrite in an ended context"
        rws[rec["id"]] = rw = {"name": rec["name"], "bottom_up": rec["bottom_up"],
                               "root": nodes.get(rec["root"]), "matches": []}
        ctxs[rec["ctx"]]["rw"].append(rw)
      elif t == "match":
        rws[rec["rw"]]["matches"].append((pats[rec["pat"]], nodes.get(rec["before"]),
                                          nodes.get(rec["after"]), rec.get("error")))
      elif t == "rw_end":
        rws[rec["id"]].update(end=nodes.get(rec["root"]), count=rec["matches"], error=rec.get("error"))
      elif t in ("opt", "source", "run"):
        c = ctxs[rec["ctx"]]
        assert c["end"] is None, f"a {t} record in an ended context"
        if t == "opt":
          c["opt"].append({k: v for k, v in rec.items() if k not in ("t", "ctx")})
        elif t == "source":
          c["source"].append((rec["kind"], rec["text"], rec["compile_s"] > 0,
                              tuple(nodes.get(u) for u in rec.get("uops", ()))))
        else:
          c["run"].append((rec["kname"], rec["flops"], rec["bytes"], len(rec["times"])))
  order = {cid: i for i, cid in enumerate(sorted(ctxs))}
  out = []
  for cid in sorted(ctxs):
    c = ctxs[cid]
    out.append({**c, "parent": order.get(c["parent"]), "schedule": order.get(c["schedule"])})
  return {"contexts": out}


class _Threads:
  """The threads that ran each LLVM compile and each recorder entry point (a worker must touch no recorder)."""

  def __init__(self, monkeypatch, fail_at: int | str | None = None) -> None:
    self.compiles: list[tuple[str, str]] = []
    self.recording: set[str] = set()
    spy = self
    for name in ("compile", "compile_traced"):  # (compile_traced's: a kernel's first compile, maybe two at once)
      inner = getattr(LLVMJit, name)

      def compile_spy(jit, ir, fname, *args, _inner=inner, **kw):
        spy.compiles.append((fname, threading.current_thread().name))
        if fail_at in (len(spy.compiles) - 1, fname):
          raise LLVMCompileError(f"LLVM rejected kernel {fname!r}: made to fail")
        return _inner(jit, ir, fname, *args, **kw)
      monkeypatch.setattr(LLVMJit, name, compile_spy)
    for name in ("_enqueue", "node_id", "match", "ctx_begin", "ctx_end", "record"):
      method = getattr(Recorder, name)

      def entry(rec, *a, _method=method, **kw):
        spy.recording.add(threading.current_thread().name)
        return _method(rec, *a, **kw)
      monkeypatch.setattr(Recorder, name, entry)


def _traced(monkeypatch, tmp_path, depth: int, fail: str | None = None, fail_kernel: str | None = None
            ) -> tuple[dict, list[bytes] | str, _Threads]:
  """The program run traced with COMPILE_AHEAD=depth, every kernel compiled anew (no runner, schedule or LLVM cache
  from before: a new JIT, so the symbols are numbered alike): its trace, its outputs' bytes (or the error) and its
  threads. `fail`: the third LLVM compile ("worker"; `fail_kernel`: that kernel's, by its function's name) or the
  third optimize ("python") raises."""
  monkeypatch.undo()
  monkeypatch.setenv("BACKEND", "llvm")
  monkeypatch.setenv("COMPILE_AHEAD", str(depth))
  monkeypatch.setattr(realize, "_runners", {})
  monkeypatch.setattr(llvm, "_JIT", None)
  monkeypatch.setattr(realize, "_cores", lambda: 2)  # (ahead on a one-core runner too)
  SCHEDULES.clear()
  threads = _Threads(monkeypatch, fail_at=(fail_kernel or 2) if fail == "worker" else None)
  if fail == "python":
    optimize, calls = engine.optimize, []

    def failing(ast, *a, **kw):
      calls.append(ast)
      if len(calls) == 3:
        raise ValueError("the optimizer failed on the third kernel")
      return optimize(ast, *a, **kw)
    monkeypatch.setattr(engine, "optimize", failing)
  path = tmp_path / f"d{depth}-{fail}.vztrace"
  recorder.enable(path, announce=False)
  try:
    outs = conv_grads_and_softmax(seed=3, out_channels=4)
    try:
      Tensor.realize(*outs)
      got: list[bytes] | str = [t.numpy().tobytes() for t in outs]
    except (LLVMCompileError, ValueError) as e:
      got = f"{type(e).__name__}: {e}"
  finally:
    recorder.disable()
    SCHEDULES.clear()
    _JITS.append(llvm._JIT)
  return _read(path, canon), got, threads


@pytest.fixture(autouse=True)
def _libcalls_back():
  """The runs make JITs of their own, each registering its runtime functions as the process's symbols: after each
  test they point at the process JIT's again."""
  with process_libcalls():
    yield


canon = _Canon()  # (one numbering for every trace of this module)
# the JITs the runs made, kept for the process: code in them stays referenced (the thread pool's entries, a cached
# kernel), and a freed engine frees its code
_JITS: list[Any] = []


def _kernels(trace: dict) -> list[dict]:
  return [c for c in trace["contexts"] if c["kind"] == "kernel"]


def test_a_trace_compiled_ahead_holds_what_one_compiled_at_each_turn_does(monkeypatch, tmp_path):
  seq, seq_out, seq_threads = _traced(monkeypatch, tmp_path, 0)
  ahead, ahead_out, ahead_threads = _traced(monkeypatch, tmp_path, 8)
  assert ahead_out == seq_out
  assert {t for _, t in seq_threads.compiles} == {"MainThread"}
  # (the thread that would wait for a compile runs a queued one itself: which starts first may differ)
  threads = {t for _, t in ahead_threads.compiles}
  assert len(ahead_threads.compiles) >= 6 and f"{WORKER}_0" in threads and threads <= {f"{WORKER}_0", "MainThread"}, \
    "the traced compiles did not run on the worker"
  assert sorted(f for f, _ in ahead_threads.compiles) == sorted(f for f, _ in seq_threads.compiles)
  assert ahead_threads.recording == {"MainThread"}, "a worker touched the recorder"
  kernels = _kernels(seq)
  assert len(kernels) >= 6 and all(len(k["source"]) == 4 and len(k["run"]) == 1 and k["rw"] for k in kernels)
  assert all(k["schedule"] is not None and k["parent"] is not None for k in kernels)
  for a, b in zip(ahead["contexts"], seq["contexts"]):  # (one by one first: a difference named by its context)
    assert a == b, f"context {a['name']} differs"
  assert ahead == seq


@pytest.mark.parametrize("where", ["worker", "python"])
def test_an_error_in_a_traced_compile_shows_in_its_kernel_context(monkeypatch, tmp_path, where):
  """The third kernel's compile fails: the same error, in that kernel's context (its opts and passes before it, no
  sources, its end naming the error), after the same contexts. Past it: nothing begun after a failed optimize; the
  kernels begun ahead of a failed LLVM compile end as not run."""
  seq, seq_out, seq_threads = _traced(monkeypatch, tmp_path, 0, where)
  # (by name: a compile the waiting thread takes from the worker's queue may start before the one ahead of it)
  third = seq_threads.compiles[2][0] if where == "worker" else None
  ahead, ahead_out, threads = _traced(monkeypatch, tmp_path, 8, where, third)
  assert isinstance(seq_out, str) and ahead_out == seq_out
  n = len(seq["contexts"])
  assert ahead["contexts"][:n] == seq["contexts"]
  failed = seq["contexts"][-1]
  assert failed["kind"] == "kernel" and failed["end"] == ("ended", seq_out) and failed["source"] == []
  assert sum(c["kind"] == "kernel" for c in seq["contexts"]) == 3
  rest = ahead["contexts"][n:]
  if where == "python":
    assert rest == []
  else:
    not_run = ("ended", getattr(realize, "NOT_RUN", "?"))
    assert rest and all(c["kind"] == "kernel" and c["end"] == not_run and c["rw"] and not c["run"] and not c["source"]
                        for c in rest)
  assert threads.compiles and f"{WORKER}_0" in {t for _, t in threads.compiles} <= {f"{WORKER}_0", "MainThread"}, \
    "nothing was compiled ahead"
  assert threads.recording == {"MainThread"}
