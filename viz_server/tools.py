"""`python -m viz_server.tools show|compare|export ...`: read, compare and share trace files without a server.

`python -m compiler.trace show|compare|export` runs this same entry as a separate process (the compiler never
imports viz_server; see "Trace tools" in docs/architecture.md)."""
from __future__ import annotations

import argparse
import os
import signal
import sys

from vztrace.format import TraceFormatError
from vztrace.term import safe

PR_SET_PDEATHSIG = 1  # prctl(2) option: a signal this process gets when the thread that started it ends


def bound_child(parent: int, cpu_s: int, memory: int) -> None:
  """This process as a child the viewer started (viz_server/share.py): its own CPU-time and address-space limits,
  no core file, and SIGKILL from the kernel when the viewer goes, so that it stays bounded and ends even where the
  viewer was SIGKILLed before it could kill it. Exits at once where the viewer is gone already."""
  import resource
  resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
  resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))  # soft: SIGXCPU; hard: SIGKILL
  resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
  if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  if os.getppid() != parent:  # the viewer ended before the death signal was asked for
    os._exit(3)


def build_parser(prog: str = "python -m viz_server.tools") -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog=prog, description="Read, compare and share tinyviz traces (.vztrace).")
  # the viewer's children (viz_server/share.py) bound themselves first thing: bound_child
  p.add_argument("--child-of", type=int, metavar="PID", help=argparse.SUPPRESS)
  p.add_argument("--max-cpu-s", type=int, default=0, help=argparse.SUPPRESS)
  p.add_argument("--max-memory", type=int, default=0, help=argparse.SUPPRESS)
  sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
  show = sub.add_parser("show", help="print a trace in the terminal",
                        description="Print a trace: contexts and rewrites (default), the matches of rewrites, "
                                    "kernels or their sources. Colors only on a terminal without NO_COLOR.")
  show.add_argument("file", metavar="FILE")
  what = show.add_mutually_exclusive_group()
  what.add_argument("--rewrite", metavar="NAME|ID", help="print each match of the rewrite(s) with this id or name")
  what.add_argument("--kernels", action="store_true", help="each kernel's opts, shape, runtime and GFLOP/s")
  what.add_argument("--source", metavar="KIND", help="kernels' generated source of this kind (uops, llvm_ir, "
                                                     "opt_ir, asm)")
  what.add_argument("--debug", type=int, metavar="N", help="the lines DEBUG=N printed while the program ran (1 kernel "
                                                          "counts, 2 runs, 3 opts, 4 LLVM IR)")
  show.add_argument("--kernel", metavar="NAME|CTX", help="with --kernels/--source: only this kernel")
  show.add_argument("--json", action="store_true", help="one JSON object per line")
  show.set_defaults(fn=_show)
  cmp = sub.add_parser("compare", help="align two traces of one program and report where they first diverge",
                       description="Align two traces of the same program and report the first rewrite whose input or "
                                   "output graph differs, the first differing step in it, kernels whose opts, "
                                   "sources or runtime differ, and what exists in only one trace. Exit status: 0 "
                                   "same, 1 different, 2 not a readable trace.")
  cmp.add_argument("a", metavar="A")
  cmp.add_argument("b", metavar="B")
  cmp.add_argument("--json", action="store_true", help="print the report as one JSON object")
  cmp.add_argument("--tolerance", type=float, default=1.25, metavar="X",
                   help="report a kernel whose best time changed by more than this factor (default 1.25)")
  cmp.set_defaults(fn=_compare)
  exp = sub.add_parser("export", help="write one self-contained HTML file showing a trace, or its timeline for "
                                       "Perfetto (--perfetto)",
                       description="Write one HTML file that shows the trace read-only from disk (file://): no "
                                   "server, no network request. With --perfetto, write the trace's timeline as Chrome "
                                   "trace-event JSON instead (ui.perfetto.dev, chrome://tracing). Exit status: 0 "
                                   "written, 1 written from a damaged trace (--perfetto: what was read before the "
                                   "damage), 2 bad trace or option.")
  exp.add_argument("file", metavar="FILE")
  exp.add_argument("-o", "--output", required=True, metavar="OUT.html|OUT.json")
  exp.add_argument("--progress", action="store_true", help="print progress to stderr (a terminal gets it anyway)")
  exp.add_argument("--progress-file", metavar="PATH", help="keep 'STEPS TOTAL' (the steps packed so far) in this file")
  exp.add_argument("-j", "--jobs", type=int, metavar="N",
                   help="processes laying out the rewrites' graphs (default: one per CPU, at most 8; 1: none forked)")
  exp.add_argument("--perfetto", action="store_true",
                   help="the timeline (contexts, passes, compiles, kernel runs; memory as a counter) as Chrome "
                        "trace-event JSON, which ui.perfetto.dev and chrome://tracing open")
  exp.add_argument("--context", action="append", metavar="NAME",
                   help="only this context (with its sub-contexts); repeat for more")
  exp.add_argument("--redact", metavar="WHAT", default="",
                   help="comma-separated: paths (relative or hashed), source (rule and generated source), argv, host "
                        "(host, pid, user, cwd)")
  exp.set_defaults(fn=_export)
  return p


def _export(args: argparse.Namespace) -> int:
  if args.perfetto:
    from viz_server import perfetto
    return perfetto.run(args)
  from viz_server.export import command
  return command.run(args)


def _compare(args: argparse.Namespace) -> int:
  from viz_server import compare
  return compare.run(args)


def _show(args: argparse.Namespace) -> int:
  from viz_server import show
  return show.run(args)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
  args = build_parser(prog or "python -m viz_server.tools").parse_args(argv)
  if args.child_of is not None:
    bound_child(args.child_of, args.max_cpu_s, args.max_memory)
  try:
    return args.fn(args)
  except BrokenPipeError:  # `show ... | head`: stop quietly, and keep the interpreter's final flush quiet too
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
  except (TraceFormatError, OSError) as e:
    print(safe(f"{getattr(args, 'file', None) or f'{args.a} or {args.b}'}: not a readable trace: {e}"),
          file=sys.stderr)  # (the reason quotes the file)
    return 2


def exit_now(code: int) -> None:
  """End the tool's process with code once its output is flushed, without the interpreter's teardown: freeing every
  module and object one by one was ~0.07 s after an export of the demo (~0.2 s after a training step's), serial at
  the end of the command. What the teardown would still do for a tool is done by then: its files are written and
  closed by their `with` blocks, an export's workers joined (export/workers.py). Where a flush fails (a closed pipe)
  the interpreter's own exit reports it as before."""
  try:
    for out in (sys.stdout, sys.stderr):
      if out is not None:  # (None: started with that descriptor closed)
        out.flush()
  except (OSError, ValueError):
    sys.exit(code)
  os._exit(code)


if __name__ == "__main__":
  exit_now(main())
