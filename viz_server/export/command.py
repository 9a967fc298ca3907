"""The `export FILE -o OUT.html` command (viz_server/tools.py runs it; so does GET /api/traces/<t>/export, in a
child process: viz_server/share.py)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from viz_server.export import ExportError, workers
from viz_server.export.collect import Work, collect_packed
from viz_server.export.page import write
from viz_server.export.redact import Redactor
from viz_server.offline import OfflineApi


def export(path: str | os.PathLike, out: str | os.PathLike, names: list[str] | None = None,
           redact: Iterable[str] = (), progress: Callable[[Work], None] | None = None, jobs: int | None = None) -> dict:
  """Write the export of the trace at path to out; returns {bytes, trace_bytes, redacted}. progress: see collect, and
  told once more when every rewrite is packed (the count at its total: the last line collect told may be short of
  it), before the page is written; jobs: the worker processes that lay out the rewrites (export/workers.py; None:
  workers.default_jobs)."""
  work = Work()
  with OfflineApi(path) as api:
    jobs = workers.default_jobs(len(api.trace.rewrites)) if jobs is None else jobs
    packed = collect_packed(api, names, redact, work=work, progress=progress, jobs=jobs)
    name = Redactor(packed["redacted"], api.trace.meta).string(Path(path).name)  # (the user's name, say)
  if progress is not None:  # (a training step's page takes seconds to write: said, not a silence after "28 of 30")
    work.writing = True
    progress(work)
  size = write(out, packed, name)
  return {"bytes": size, "trace_bytes": os.path.getsize(path), "redacted": packed["redacted"]}


def _progress(work: Work) -> None:
  print(f"export: {work.rewrites} of {work.rewrites_total} rewrites, {work.steps} of {work.total} steps packed "
        f"({work.nodes} nodes, {work.edges} edges){'; writing the page' if work.writing else ''}", file=sys.stderr,
        flush=True)


def progress_file(path: str) -> Callable[[Work], None]:
  """A progress callback that keeps `{steps} {total}` in the file at path, replaced whole each time (the viewer's
  Export button reads it while its child exports: viz_server/share.py)."""
  tmp = f"{path}.part"

  def note(work: Work) -> None:
    with open(tmp, "w") as f:
      f.write(f"{work.steps} {work.total}\n")
    os.replace(tmp, path)  # (atomic: a reader sees the old line or the new, never a part)
  return note


def run(args: Any) -> int:
  """The `export` command (progress lines on stderr when it is a terminal or with --progress; with --progress-file,
  the count in that file)."""
  what = [w.strip() for w in (args.redact or "").split(",") if w.strip()]
  notes = [_progress] if getattr(args, "progress", False) or sys.stderr.isatty() else []
  if getattr(args, "progress_file", None):
    notes.append(progress_file(args.progress_file))
  progress = (lambda work: [note(work) for note in notes]) if notes else None
  try:
    got = export(args.file, args.output, args.context, what, progress=progress, jobs=getattr(args, "jobs", None))
  except ExportError as e:
    print(f"export: {e}")
    return 2
  print(f"{args.output}: {got['bytes']} bytes ({got['bytes'] / max(1, got['trace_bytes']):.2f}x the trace); "
        f"redacted: {', '.join(got['redacted']) or 'nothing'}")
  return 0
