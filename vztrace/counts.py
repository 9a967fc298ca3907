"""A trace's counts, defined once: the viewer's header and trace list (viz_server.store), the sidebar, `info`
(compiler.trace.cli), `show` and the program summary (viz_server.summary) all take them from a `TraceCounts` fed the
trace's records in order, so they agree (issue 30: the header said 34 contexts and the sidebar 33, the header 48
kernels and `info` 27). Standard library only, as the rest of vztrace: both the compiler's CLI and the viewer use it.

- contexts: every context but the recording's own root (a `default` context without a parent that holds no
  rewrite: the sidebar does not show it);
- kernels: distinct kernels, the rows of the viewer's runs per kernel: those that ran, by the name their run records
  give (`kernel_key`; the scheduler makes a name unique per AST, so a schedule cache hit runs the same kernel again),
  and those compiled in a context where none ran;
- runs: kernel executions, every time of every `run` record (a program's call records one, `CompiledKernel.time`
  its repeats)."""
from __future__ import annotations

from typing import Any

KERNEL_RECORDS = ("opt", "beam", "source", "run")


def kernel_key(rec: dict) -> str:
  """The kernel a run record is of: its name (`kname`), or its context where a damaged record has none."""
  k = rec.get("kname")
  return k if isinstance(k, str) else f"<context {rec.get('ctx')}>"


def run_times(rec: dict) -> list[float]:
  """A run record's times in seconds, leaving out what is not one (the reader gives a non-finite time as null)."""
  times = rec.get("times")
  if not isinstance(times, list):
    return []
  return [float(t) for t in times if type(t) in (int, float) and t >= 0]


class TraceCounts:
  """The counts of the records fed so far (context, rw_begin and kernel records; the others need no call), each in
  O(1). `as_dict()` is what every surface shows."""
  __slots__ = ("all_contexts", "runs", "run_records", "_roots", "_knames", "_compiled", "_ran")

  def __init__(self) -> None:
    self.all_contexts = 0
    self.runs = 0
    self.run_records = 0
    self._roots: dict[int, bool] = {}  # parentless default contexts -> whether a rewrite ran in them
    self._knames: set[str] = set()
    self._compiled: set[Any] = set()  # contexts with a kernel's source
    self._ran: set[Any] = set()  # contexts with a run record

  def add(self, rec: dict) -> None:
    """Count one record (any type)."""
    t = rec.get("t")
    if t == "ctx_begin":
      self.context(rec)
    elif t == "rw_begin":
      self.rewrite(rec)
    elif t in KERNEL_RECORDS:
      self.kernel_record(t, rec)

  def context(self, rec: dict) -> None:
    self.all_contexts += 1
    if rec.get("parent") is None and rec.get("kind") == "default":
      self._roots.setdefault(rec.get("id"), False)  # type: ignore[arg-type]

  def rewrite(self, rec: dict) -> None:
    if rec.get("ctx") in self._roots:
      self._roots[rec["ctx"]] = True

  def kernel_record(self, t: str, rec: dict) -> None:
    if t == "source":
      self._compiled.add(rec.get("ctx"))
    elif t == "run":
      self.run_records += 1
      self.runs += len(run_times(rec))
      self._knames.add(kernel_key(rec))
      self._ran.add(rec.get("ctx"))

  @property
  def contexts(self) -> int:
    return self.all_contexts - sum(1 for used in self._roots.values() if not used)

  @property
  def kernels(self) -> int:
    return len(self._knames) + len(self._compiled - self._ran)

  def as_dict(self) -> dict[str, int]:
    return {"contexts": self.contexts, "kernels": self.kernels, "runs": self.runs}
