"""`python -m compiler.trace info|validate FILE`: summarize or check a trace file."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from typing import Any

from vztrace.counts import TraceCounts
from vztrace.format import HEADER, MAGIC, TraceFormatError, exit_summary, exit_traceback_lines
from vztrace.memory import MAX_EVENTS, MemoryProfile, event
from vztrace.reader import STALE_S, TraceReader, unfinished
from vztrace.term import safe

KERNEL_RECORDS = ("opt", "beam", "source", "run")


def summarize(path: str, top: int = 10) -> dict[str, Any]:
  """Read a whole trace (streaming) and return the counts `info` prints; raises TraceFormatError/OSError."""
  counts: Counter[str] = Counter()
  kinds: Counter[str] = Counter()
  rw_names: dict[int, str] = {}
  rw_matches: Counter[int] = Counter()
  rw_ns: dict[int, float] = {}
  compile_s = run_s = 0.0
  tc = TraceCounts()  # contexts, kernels and runs as the viewer counts them (vztrace.counts)
  mem: list[tuple] = []
  meta = ended = None
  with TraceReader(path) as r:
    for rec in (r if not no_header_yet(path) else ()):  # an empty file: a trace with no records yet (no_header_yet)
      t = rec["t"]
      counts[t] += 1
      tc.add(rec)
      if t == "match":
        rw_matches[rec["rw"]] += 1
      elif t == "node" or t == "pattern":
        pass
      elif t == "rw_begin":
        rw_names[rec["id"]] = rec["name"]
      elif t == "rw_end":
        rw_ns[rec["id"]] = _seconds(rec["dt"])
      elif t == "ctx_begin":
        kinds[rec["kind"]] += 1
      elif t in KERNEL_RECORDS:
        if t == "source" and rec["kind"] == "llvm_ir":  # (opt_ir and asm name the same compile)
          compile_s += _seconds(rec["compile_s"])
        elif t == "run":
          run_s += sum(map(_seconds, rec["times"]))
      elif t == "mem":
        if len(mem) < MAX_EVENTS and (e := event(rec, counts[t])) is not None:
          mem.append(e)
      elif t == "meta" and meta is None:
        meta = rec
      elif t == "end" and "exit" in rec:
        ended = exit_summary(rec["exit"])
    size = os.path.getsize(path)
  if tc.all_contexts > tc.contexts:  # the recording's empty root, which no surface counts (vztrace.counts)
    kinds["default"] -= tc.all_contexts - tc.contexts
    kinds = +kinds
  calls: Counter[str] = Counter(rw_names.values())
  by_name: Counter[str] = Counter()
  for rw, n in rw_matches.items():
    by_name[rw_names.get(rw, f"<rewrite {rw}>")] += n
  ns_by_name: Counter[str] = Counter()
  for rw, ns in rw_ns.items():
    ns_by_name[rw_names.get(rw, f"<rewrite {rw}>")] += ns
  top_rw = [{"name": name, "matches": n, "calls": calls[name], "time_s": ns_by_name[name] / 1e9}
            for name, n in by_name.most_common(top)]
  return {
    "file": path, "bytes": size, "frames": r.frames, "version": ".".join(map(str, r.version or ())),
    "records": r.records, "skipped_unknown": r.skipped_unknown, "meta": meta,
    "contexts": tc.contexts, "context_kinds": dict(kinds), "rewrites": counts["rw_begin"],
    "matches": counts["match"], "nodes": counts["node"], "patterns": counts["pattern"], "kernels": tc.kernels,
    "opts": counts["opt"], "beam": counts["beam"], "sources": counts["source"], "runs": tc.runs,
    "errors": counts["error"], "types": dict(counts), "top_rewrites": top_rw,
    "time": {"rewrites_s": sum(rw_ns.values()) / 1e9, "compile_s": compile_s, "runs_s": run_s},
    "memory": MemoryProfile(mem).summary(),
    "damaged": r.damaged, "stopped_at": r.stopped_at, "stopped_frame": r.frames if r.damaged else None,
    "stopped_record": r.stopped_record, "reason": r.reason, "complete": r.complete, "exit": ended,
  }


def no_header_yet(path: str) -> bool:
  """An empty file, or the start of a trace header: the same case as a header-only file (a trace whose writer has
  written no record yet, or stopped first), not "no trace" (the viewer lists it too; docs/architecture.md)."""
  try:
    with open(path, "rb") as f:
      head = f.read(HEADER.size)
  except OSError:
    return False
  return len(head) < HEADER.size and head[:len(MAGIC)] == MAGIC[:len(head)]


def _damage(at: int | None, frame: int, reason: str | None) -> str:
  """Where the damage is: a frame (the reader's unit; a frame holds many records), counted from 0 as the reader's
  reasons count it."""
  before = "the first" if frame == 0 else "counting from 0; frame 0 is intact" if frame == 1 else \
    f"counting from 0; frames 0-{frame - 1} are intact"
  return f"at byte {at}, in frame {frame} ({before}): {reason}"


def _seconds(x: Any) -> float:
  """A recorded duration, or 0 where the trace holds null (a non-finite time) instead."""
  return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 else 0.0


def _ms(s: float) -> str:
  return f"{s * 1e3:.1f} ms"


def _size(n: int) -> str:
  for unit in ("B", "KiB", "MiB"):
    if n < 1024 or unit == "MiB":
      return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024
  return str(n)


def _status(s: dict[str, Any]) -> str:
  if s["damaged"]:
    return f"DAMAGED {_damage(s['stopped_at'], s['stopped_frame'], s['reason'])}"
  if not s["version"]:
    return "no records: an empty file, no trace header yet (still being created, or the writer died)"
  if not s["complete"]:
    return "intact, no end record (still being written, or the writer died)"
  return "intact, ended cleanly" if s["exit"] is None else f"intact, {s['exit']['text']}"


def _when(ts: Any) -> str:
  """A recorded wall-clock time as local date and time; "?" where it is none a clock could give (1e300, 2**62)."""
  if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not ts:
    return "?"
  try:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
  except (OverflowError, OSError, ValueError):
    return "?"


def _print_info(s: dict[str, Any]) -> None:
  m = s["meta"] or {}
  started = _when(m.get("started"))
  kinds = ", ".join(f"{k} {n}" for k, n in sorted(s["context_kinds"].items()))
  unknown = f" (+{s['skipped_unknown']} of unknown types skipped)" if s["skipped_unknown"] else ""
  lines = [
    f"trace     {s['file']}  ({_size(s['bytes'])}, {s['frames']} frames, format {s['version']})",
    f"status    {_status(s)}",
    f"command   {' '.join(m.get('argv') or []) or '?'}",
    f"process   pid {m.get('pid', '?')} on {m.get('host', '?')}, python {m.get('python', '?')}, started {started}",
    f"cwd       {m.get('cwd', '?')}",
    f"records   {s['records']}{unknown}",
    f"contexts  {s['contexts']}" + (f" ({kinds})" if kinds else ""),
    f"rewrites  {s['rewrites']}, matches {s['matches']}, nodes {s['nodes']}, patterns {s['patterns']}",
    f"kernels   {s['kernels']} (opts {s['opts']}, beam {s['beam']}, sources {s['sources']}, runs {s['runs']})",
    f"errors    {s['errors']}",
    f"time      rewrites {_ms(s['time']['rewrites_s'])}, LLVM compiles {_ms(s['time']['compile_s'])}, "
    f"kernel runs {_ms(s['time']['runs_s'])}",
  ]
  if isinstance(off := m.get("off"), dict):  # the switches the run was made with (compiler.rewrite.Switches)
    def names(v: Any) -> str:
      return ", ".join(str(x) for x in v) if isinstance(v, list) and v else (v if isinstance(v, str) and v else "-")
    lines.append(f"off       rules {names(off.get('rules'))}; matches {names(off.get('matches'))}; "
                 f"opts {names(off.get('opts'))} (switches: not a plain run)")
  if s["memory"]["allocs"]:
    lines.append(_memory_line(s["memory"]))
  if s["exit"] is not None:
    lines += ["", *exit_traceback_lines(s["exit"])]
  if s["top_rewrites"]:
    lines += ["", "top rewrites by matches:", f"{'matches':>9} {'calls':>7} {'time':>10}  name"]
    lines += [f"{r['matches']:>9} {r['calls']:>7} {_ms(r['time_s']):>10}  {r['name']}" for r in s["top_rewrites"]]
  print("\n".join(map(safe, lines)))  # every line holds the trace's texts (a stranger's file)


def _memory_line(m: dict[str, Any]) -> str:
  p = m["peak"]
  what = f"{p['dtype']} x{p['size']}" if p["dtype"] is not None and p["size"] is not None else _size(p["buf_bytes"])
  ctx = f", context #{p['ctx']}" if p["ctx"] is not None else ""
  return (f"memory    peak {_size(p['bytes'])} ({p['bytes']} B) at buffer {p['buf']}'s allocation ({what}{ctx}); "
          f"{m['allocs']} allocs, {m['frees']} frees, {_size(m['end_bytes'])} in use at the end")


def cmd_info(args: argparse.Namespace) -> int:
  try:
    s = summarize(args.file, args.top)
  except (TraceFormatError, OSError) as e:
    print(safe(f"{args.file}: not a readable trace: {e}"), file=sys.stderr)  # (the reason quotes the file)
    return 2
  if args.json:
    print(json.dumps(s, indent=1))
  else:
    _print_info(s)
  return 1 if s["damaged"] else 0


def cmd_validate(args: argparse.Namespace) -> int:
  meta = ended = None
  try:
    with TraceReader(args.file) as r:
      for rec in (r if not no_header_yet(args.file) else ()):
        if meta is None and rec["t"] == "meta":
          meta = rec
        elif rec["t"] == "end" and "exit" in rec:
          ended = exit_summary(rec["exit"])
  except (TraceFormatError, OSError) as e:
    print(safe(f"{args.file}: not a readable trace: {e}"), file=sys.stderr)
    return 2
  summary = f"{r.records} records in {r.frames} frame{'' if r.frames == 1 else 's'} ({r.offset} bytes)"
  if r.version is None:
    summary = "no records: an empty file, no trace header yet"
  if r.damaged:
    print(safe(f"{args.file}: DAMAGED {_damage(r.stopped_at, r.frames, r.reason)}; recovered {summary}"))
    return 1
  if r.complete:  # (a program that ended with an error left an intact trace all the same)
    how = "ended cleanly" if ended is None else f"the program {ended['text']}"
    print(safe(f"{args.file}: OK: {summary}; {how}"))
    return 0
  if unfinished(args.file, meta):  # the viewer's rule too (docs/architecture.md, "Live viewing")
    print(safe(f"{args.file}: UNFINISHED: {summary}; no end record, and the writer is gone or the file has not grown "
               f"for {STALE_S:.0f} s (truncated: the recording stopped without finishing the trace)"))
  else:
    print(safe(f"{args.file}: NOT FINISHED YET: {summary}; no end record yet (still being written)"))
  return 1


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m compiler.trace", description="Inspect tinyviz trace files (.vztrace).")
  sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
  info = sub.add_parser("info", help="summarize a trace: meta, counts, damage, top rewrites",
                        description="Summarize a trace. Exit status: 0 intact (also where the program it recorded "
                                    "ended with an error: the status line says so), 1 damaged, 2 not a readable "
                                    "trace.")
  info.add_argument("file", metavar="FILE", help="a .vztrace file")
  info.add_argument("--json", action="store_true", help="print the summary as a JSON object")
  info.add_argument("--top", type=int, default=10, metavar="N", help="how many rewrites to list (default 10)")
  info.set_defaults(fn=cmd_info)
  val = sub.add_parser("validate", help="check every frame and record",
                       description="Check a trace. Exit status: 0 intact and ended cleanly, 1 damaged (records "
                                   "before the damage are readable) or without an end record (unfinished, or still "
                                   "being written), 2 not a readable trace.")
  val.add_argument("file", metavar="FILE", help="a .vztrace file")
  val.set_defaults(fn=cmd_validate)
  sub.add_parser("bisect", help="which rewrite broke my values: run a script compiled and against the oracle, and "
                 "bisect its optional transformations (bisect [--json] -- python script.py ARGS)", add_help=False)
  for name, what in TOOLS.items():  # listed here, run by viz_server.tools (main() hands their arguments over)
    sub.add_parser(name, help=what, add_help=False)
  return p


# Commands that need the viewer's modules: the compiler never imports viz_server (both sit on vztrace), so it runs them
# as a separate process instead (docs/architecture.md, "Trace tools").
TOOLS = {"show": "print a trace in the terminal", "compare": "the first divergence between two traces",
         "export": "a self-contained HTML file of a trace, or its timeline for Perfetto (--perfetto)"}


def run_tool(argv: list[str]) -> int:
  import subprocess
  return subprocess.call([sys.executable, "-m", "viz_server.tools", *argv])


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv and argv[0] in TOOLS:
    return run_tool(argv)
  if argv and argv[0] == "bisect":  # (its own parser: everything after `--` is the user's command)
    from compiler.trace.bisect import main as bisect_main
    return bisect_main(argv[1:])
  args = build_parser().parse_args(argv)
  try:
    return args.fn(args)
  except BrokenPipeError:  # `info ... | head`: stop quietly, and keep the interpreter's final flush quiet too
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
