"""`python -m viz_server.tools show|compare|export ...`: read, compare and share trace files without a server.

`python -m compiler.trace show|compare|export` runs this same entry as a separate process (the compiler never
imports viz_server; see "Trace tools" in docs/architecture.md)."""
from __future__ import annotations

import argparse
import os
import sys

from compiler.trace.format import TraceFormatError


def build_parser(prog: str = "python -m viz_server.tools") -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog=prog, description="Read, compare and share tinyviz traces (.vztrace).")
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
  show.add_argument("--kernel", metavar="NAME|CTX", help="with --kernels/--source: only this kernel")
  show.add_argument("--json", action="store_true", help="one JSON object per line")
  show.set_defaults(fn=_show)
  return p


def _show(args: argparse.Namespace) -> int:
  from viz_server import show
  return show.run(args)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
  args = build_parser(prog or "python -m viz_server.tools").parse_args(argv)
  try:
    return args.fn(args)
  except BrokenPipeError:  # `show ... | head`: stop quietly, and keep the interpreter's final flush quiet too
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
  except (TraceFormatError, OSError) as e:
    print(f"{getattr(args, 'file', '')}: not a readable trace: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
