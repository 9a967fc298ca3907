"""The README's first program is examples/first.py, and it runs as the README says (recording a trace with VIZ=-1)."""
import os
import re
import subprocess
import sys
from pathlib import Path

from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]


def _readme_blocks(lang: str) -> list[str]:
  return re.findall(rf"```{lang}\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_the_readme_first_program_is_the_example_file():
  first = next(b for b in _readme_blocks("python") if "from compiler import Tensor" in b)
  assert first == (ROOT / "examples" / "first.py").read_text()


def test_the_first_program_runs_and_records_its_kernels(tmp_path):
  trace = tmp_path / "first.vztrace"
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  p = subprocess.run([sys.executable, str(ROOT / "examples" / "first.py")], capture_output=True, text=True,
                     timeout=300, cwd=tmp_path, env={**env, "VIZ": "-1", "VIZ_TRACE": str(trace)})
  assert p.returncode == 0, p.stderr
  sums, shape = p.stdout.replace("\n ", " ").splitlines()[:2]
  assert all(abs(float(v) - 1) < 1e-5 for v in sums.strip("[]").split())
  assert shape.startswith("(1, 4, 7, 7) ")
  assert f"recording trace to {trace}" in p.stderr
  kernels = [r for r in TraceReader(trace) if r["t"] == "ctx_begin" and r["kind"] == "kernel"]
  assert len(kernels) >= 3


def test_the_readme_commands_use_the_venv_python():
  using = (ROOT / "README.md").read_text().split("## Using it", 1)[1].split("\n## ", 1)[0]
  cmds = [line for b in re.findall(r"```sh\n(.*?)```", using, flags=re.S) for line in b.splitlines() if line.strip()]
  assert cmds and all(re.search(r"(^|\s)python\s", c) is None for c in cmds), cmds  # never a bare `python`
