"""One valid record of each kind of the trace format, and `batch` records built from columns: the format tests' samples,
also used by the store's tests."""
from __future__ import annotations

from vztrace.format import pack_column

SAMPLES: dict[str, dict] = {
  "meta": {"t": "meta", "version": "1.0", "argv": ["x.py", "-v"], "host": "h", "pid": 42, "python": "3.11.7",
           "started": 1700000000.25, "cwd": "/tmp", "user": "extra fields are allowed"},
  "node": {"t": "node", "id": 3, "op": "ADD", "dtype": "dtypes.int", "arg": "None", "src": [1, 2]},
  "pattern": {"t": "pattern", "id": 0, "file": "compiler/symbolic.py", "line": 12, "src": "lambda x: x",
              "pat": "UPat(Ops.ADD)", "name": "<lambda>"},
  "ctx_begin": {"t": "ctx_begin", "id": 1, "parent": 0, "name": "schedule", "kind": "schedule", "ts": 1.5},
  "ctx_end": {"t": "ctx_end", "id": 1, "ts": 2.5, "error": "ValueError: boom"},
  "rw_begin": {"t": "rw_begin", "id": 0, "ctx": 1, "name": "symbolic", "file": "a.py", "line": 3, "bottom_up": False,
               "root": 3, "ts": 1.75},
  "match": {"t": "match", "rw": 0, "pat": 0, "before": 3, "after": 1, "dt": 1234},
  "rw_end": {"t": "rw_end", "id": 0, "root": 1, "dt": 99999, "matches": 1},
  "opt": {"t": "opt", "ctx": 2, "op": "UPCAST", "axis": 0, "arg": 4, "ok": True, "reason": None, "shape": [4, 8, 4],
          "colors": ["blue", "blue", "magenta"], "kname": "r_4_8_4"},
  "beam": {"t": "beam", "ctx": 2, "round": 1, "opts": [["UPCAST", 0, 4]], "time": 1e-5, "chosen": True},
  "source": {"t": "source", "ctx": 2, "kind": "llvm_ir", "text": "define void @k() {\n  ret void\n}\n\u00e9\u2603",
             "compile_s": 0.01},
  "run": {"t": "run", "ctx": 2, "kname": "r_4", "times": [1e-5, 2e-5], "min": 1e-5, "median": 1.5e-5, "flops": 100,
          "bytes": 64, "gflops": 10.0, "gbs": 6.4},
  "mem": {"t": "mem", "ctx": 2, "op": "alloc", "buf": 5, "bytes": 4000, "ts": 2.5, "dtype": "float32", "size": 1000},
  "error": {"t": "error", "ctx": 2, "text": "Traceback ..."},
  "end": {"t": "end", "ts": 3.0},
}


def batch(first: int, strs: list[str], nodes: list[tuple[int, int, int, list[int]]],
          matches: list[tuple[int, int, int, int, int]], recs: list[tuple[int, int, dict]]) -> dict:
  """A `batch` record: nodes as (op, dtype, arg) string codes + source ids, matches as rows, recs with the number of
  nodes and matches before each."""
  col = lambda v, kind="u32s": pack_column(v, kind).decode()  # noqa: E731
  return {"t": "batch", "id": first, "strs": strs, "op": col([n[0] for n in nodes]),
          "dtype": col([n[1] for n in nodes]), "arg": col([n[2] for n in nodes]),
          "nsrc": col([len(n[3]) for n in nodes]), "src": col([s for n in nodes for s in n[3]]),
          "rw": col([m[0] for m in matches]),
          "pat": col([m[1] for m in matches]), "before": col([m[2] for m in matches]),
          "after": col([m[3] for m in matches]), "dt": col([m[4] for m in matches], "i64s"),
          "at": col([x for r in recs for x in r[:2]]), "recs": [r[2] for r in recs]}


# a batch and the records a reader makes of it: nodes 0-2 and one match, the rw_begin after node 1, the rw_end last
BATCH = batch(0, ["CONST", "ADD", "int", "1", "None"], [(0, 2, 3, []), (1, 2, 4, [0, 0]), (0, 2, 3, [])],
              [(0, 0, 1, 2, 1500)], [(0, 0, SAMPLES["meta"]), (2, 0, {**SAMPLES["rw_begin"], "root": 1}),
                                     (3, 1, {**SAMPLES["rw_end"], "root": 2})])


BATCH_RECORDS = [SAMPLES["meta"], {"t": "node", "id": 0, "op": "CONST", "dtype": "int", "arg": "1", "src": []},
                 {"t": "node", "id": 1, "op": "ADD", "dtype": "int", "arg": "None", "src": [0, 0]},
                 {**SAMPLES["rw_begin"], "root": 1},
                 {"t": "node", "id": 2, "op": "CONST", "dtype": "int", "arg": "1", "src": []},
                 {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 1500},
                 {**SAMPLES["rw_end"], "root": 2}]


SAMPLES["batch"] = BATCH
