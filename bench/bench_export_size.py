"""Size of `python -m compiler.trace export`'s page against its trace: every graph edge embedded as it was (before)
and with the edges the page derives from the nodes' sources left out (after, viz_server/export.py's
leave_out_derived_edges), from one collection of the API's answers.

  python bench/bench_export_size.py [TRACE ...]   (default: the demo's workloads recorded at --scale, --only)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.table import format_table  # noqa: E402
from viz_server import export  # noqa: E402
from viz_server.offline import OfflineApi  # noqa: E402


def record_demo(path: Path, scale: float, only: list[str]) -> Path:
  cmd = [sys.executable, str(ROOT / "examples" / "demo.py"), "--scale", str(scale)]
  cmd += ["--only", *only] if only else []
  subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT,
                 env={**os.environ, "VIZ": "-1", "VIZ_TRACE": str(path), "PYTHONPATH": str(ROOT)})
  return path


def sizes(trace: Path) -> tuple[int, int, int]:
  """(trace bytes, page bytes before, page bytes after)."""
  with OfflineApi(trace) as api:
    data = export.collect(api, derive_edges=False)
  before = len(export.render(data, trace.name).encode("utf-8"))
  after = len(export.render(export.leave_out_derived_edges(data), trace.name).encode("utf-8"))
  return trace.stat().st_size, before, after


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("traces", nargs="*", type=Path)
  ap.add_argument("--scale", type=float, default=0.25, help="the demo's --scale when no trace is given")
  ap.add_argument("--only", nargs="*", default=["elementwise", "softmax"], help="the demo's --only")
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as d:
    traces = args.traces or [record_demo(Path(d) / "demo.vztrace", args.scale, args.only)]
    rows = []
    for t in traces:
      tb, before, after = sizes(t)
      rows.append((t.name, tb, before, before / tb, after, after / tb, after / before))
  print(format_table([("trace", "<24"), ("trace B", ">9"), ("before B", ">10"), ("ratio", ">6.2f"),
                      ("after B", ">10"), ("ratio", ">6.2f"), ("after/before", ">12.2f")], rows))


if __name__ == "__main__":
  main()
