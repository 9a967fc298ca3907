"""bench/table.py: the benchmarks' fixed-width tables."""
import pytest

from bench.table import format_table


def test_headers_take_their_columns_alignment_and_width():
  out = format_table([("name", "<8"), ("ms", ">7.2f"), ("n", ">4d")], [("a", 1.5, 3), ("longer", 12.345, 1024)])
  assert out.splitlines() == ["name          ms    n",
                              "a           1.50    3",
                              "longer     12.35 1024"]


def test_a_column_without_a_width_is_as_wide_as_its_values_and_trailing_blanks_go():
  assert format_table([("x", ">3"), ("names", "")], [(1, "a b"), (22, "")]) == "  x names\n  1 a b\n 22"


def test_a_row_of_the_wrong_length_is_an_error():
  with pytest.raises(ValueError, match="a row of 1 values for 2 columns"):
    format_table([("a", ""), ("b", "")], [(1,)])


def test_bench_kernels_rows_have_the_jitted_call_next_to_the_plain_one(capsys):
  import time

  from bench import bench_kernels
  from bench.workloads import WORKLOADS
  row = bench_kernels._measure(WORKLOADS["softmax"](scale=0.05), reps=1, clock=time.process_time, threads=1)
  assert row["ok"] and row["jit"] > 0 and row["e2e"] > 0  # ok: the jitted calls' answers are numpy's too
  bench_kernels._print({"threads": 1, "blas": "", "spin_ms_per_s": 0.0, "rows": [{"name": "softmax", **row}]}, None)
  header = capsys.readouterr().out.strip().splitlines()[1]
  assert 0 < header.index("e2e ms") < header.index("jit e2e ms") and "jit e2e/kernel" in header


def test_bench_ab_reads_bench_kernels_columns_by_name(capsys):
  # bench_ab compares runs of bench_kernels: a column added to that table once made it read jit e2e as the kernel
  from bench import bench_ab, bench_kernels
  row = {"ok": True, "kernels": 2, "first_s": 0.25, "e2e": 3e-3, "jit": 2e-3, "kernel": 1e-3, "numpy": 4e-3}
  bench_kernels._print({"threads": 1, "blas": "", "spin_ms_per_s": 0.0, "rows": [{"name": "softmax", **row}]}, None)
  assert bench_ab._rows(capsys.readouterr().out) == {"softmax": (3.0, 1.0, 4.0)}
