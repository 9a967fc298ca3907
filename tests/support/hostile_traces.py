"""Generators of hostile trace files (issue 14), built with the format module's own framing so no binary trace is
committed: schema-valid records with values the viewer once could not take, and small files that ask for a lot of
work. Used by tests/*/test_hostile_*.py and bench/bench_hostile_crawl.py. (No tests here.)"""
from __future__ import annotations

import json
import os
import socket
import zlib
from pathlib import Path
from typing import Callable, Iterable

from vztrace.format import FRAME_HEADER, FRAME_MAGIC, HEADER, MAGIC, RECORD_LEN, VERSION, pack_column

Record = dict | bytes | str  # a dict is encoded with json; bytes/str are a record's JSON text as it is


def _text(rec: Record) -> bytes:
  if isinstance(rec, dict):
    return json.dumps(rec, separators=(",", ":")).encode()
  return rec.encode() if isinstance(rec, str) else rec


def frame(records: Iterable[Record]) -> bytes:
  """One frame holding these records."""
  raw = b"".join(RECORD_LEN.pack(len(t)) + t for t in map(_text, records))
  payload = zlib.compress(raw, 9)
  return FRAME_HEADER.pack(FRAME_MAGIC, len(payload), zlib.crc32(payload), len(raw)) + payload


def write(path: str | os.PathLike, frames: Iterable[Iterable[Record]]) -> Path:
  """A trace file: the header, then one frame per list of records."""
  p = Path(path)
  with open(p, "wb") as f:
    f.write(HEADER.pack(MAGIC, *VERSION))
    for recs in frames:
      f.write(frame(recs))
  return p


def meta(pid: int = 1) -> dict:
  """A meta record of a process that is not running here (a finished or foreign trace)."""
  return {"t": "meta", "version": "2.1", "argv": ["hostile.py"], "host": socket.gethostname() + "-elsewhere",
          "pid": pid, "python": "3", "started": 1.7e9, "cwd": "/"}


def ctx(cid: int, kind: str = "default", parent: int | None = None, name: str | None = None) -> dict:
  return {"t": "ctx_begin", "id": cid, "parent": parent, "name": name or f"ctx {cid}", "kind": kind, "ts": 1.7e9}


def node(nid: int, op: str = "CONST", src: list | None = None, arg: str = "1") -> dict:
  return {"t": "node", "id": nid, "op": op, "dtype": "dtypes.int", "arg": arg, "src": src or []}


def rw_begin(rid: int, root: int, cid: int = 0) -> dict:
  return {"t": "rw_begin", "id": rid, "ctx": cid, "name": "hostile", "file": "h.py", "line": 1, "bottom_up": False,
          "root": root, "ts": 1.7e9}


def rw_end(rid: int, root: int | None, matches: int) -> dict:
  return {"t": "rw_end", "id": rid, "root": root, "dt": 10, "matches": matches}


PATTERN = {"t": "pattern", "id": 0, "file": "h.py", "line": 1, "src": "x", "pat": "UPat()", "name": "f"}
END = {"t": "end", "ts": 1.7e9 + 1}


def small(path: str | os.PathLike) -> Path:
  """An ordinary, well-behaved trace: one rewrite of 2 matches over 3 nodes."""
  return write(path, [[meta(), ctx(0), node(0), node(1, "ADD", [0, 0]), node(2, arg="2"), PATTERN, rw_begin(0, 1),
                       {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5},
                       {"t": "match", "rw": 0, "pat": 0, "before": 2, "after": 0, "dt": 5}, rw_end(0, 0, 2), END]])


def big_int(path: str | os.PathLike, where: str = "node") -> Path:
  """A schema-valid int >= 2**63 in a node id, a match's before, a dt, or a ts/times."""
  big = 2 ** 64 + 5
  recs: list[Record] = [meta(), ctx(0), node(0), node(1, "ADD", [0, 0]), PATTERN, rw_begin(0, 1)]
  if where == "node":
    recs.append(node(big))
  elif where == "match":
    recs.append({"t": "match", "rw": 0, "pat": 0, "before": big, "after": 0, "dt": 1})
  elif where == "dt":
    recs.append(f'{{"t":"match","rw":0,"pat":0,"before":1,"after":0,"dt":1{"0" * 400}}}')
  elif where == "ts":
    recs += [{"t": "ctx_begin", "id": 1, "parent": 0, "name": "k", "kind": "kernel", "ts": big ** 8},
             {"t": "run", "ctx": 1, "kname": "k", "times": [big ** 9], "min": 1, "median": 1, "flops": 1, "bytes": 1,
              "gflops": 1, "gbs": 1, "ts": big ** 7}]
  return write(path, [recs, [rw_end(0, 0, 0), END]])


def deep(path: str | os.PathLike, depth: int = 980) -> Path:
  """Lists nested `depth` deep in an opt's arg (a field of type any) and in a field beyond the schema."""
  nest = "[" * depth + "]" * depth
  return write(path, [[meta(), {"t": "ctx_begin", "id": 0, "parent": None, "name": "k", "kind": "kernel", "ts": 1.0},
                       f'{{"t":"opt","ctx":0,"op":"UPCAST","axis":0,"arg":{nest},"ok":true,"reason":null,'
                       f'"shape":[4],"colors":["blue"],"kname":"k","extra":{nest}}}', END]])


def header_only(path: str | os.PathLike) -> Path:
  """A header and nothing else (a recording killed before its first flush)."""
  return write(path, [])


def killed(path: str | os.PathLike) -> Path:
  """Intact frames but no end record: a recording killed mid-way (its writer, pid 1 elsewhere, is not ours)."""
  return write(path, [[meta(), ctx(0), node(0)]])


def junk_after_header(path: str | os.PathLike, size: int = 1 << 16) -> Path:
  """A header followed by junk: no intact record."""
  p = write(path, [])
  with open(p, "ab") as f:
    f.write(os.urandom(size))
  return p


def _batch(first: int, strs: list[str], op: list[int], arg: list[int], nsrc: list[int], src: list[int],
           matches: tuple[list[int], ...] = ([], [], [], [], []), recs: list[dict] | None = None,
           at: list[int] | None = None) -> dict:
  rw, pat, before, after, dt = matches
  n = len(op)
  return {"t": "batch", "id": first, "strs": strs, "op": pack_column(op).decode(),
          "dtype": pack_column([1] * n).decode(), "arg": pack_column(arg).decode(),
          "nsrc": pack_column(nsrc).decode(), "src": pack_column(src).decode(), "rw": pack_column(rw).decode(),
          "pat": pack_column(pat).decode(), "before": pack_column(before).decode(),
          "after": pack_column(after).decode(), "dt": pack_column(dt, "i64s").decode(),
          "at": pack_column(at or []).decode(), "recs": recs or []}


def many_matches(path: str | os.PathLike, matches: int = 300_000) -> Path:
  """One rewrite with `matches` matches that swap two nodes back and forth (a small file: columns compress)."""
  strs = ["CONST", "dtypes.int", "1", "2", "SINK"]
  b = _batch(0, strs, [0, 0, 4], [2, 3, 2], [0, 0, 1], [0],
             ([0] * matches, [0] * matches, [i % 2 for i in range(matches)], [(i + 1) % 2 for i in range(matches)],
              [1] * matches),
             recs=[meta(), ctx(0), PATTERN, rw_begin(0, 2)], at=[0, 0, 0, 0, 0, 0, 3, 0])
  return write(path, [[b], [rw_end(0, 2, matches), END]])


def chain(path: str | os.PathLike, n: int = 100_000) -> Path:
  """A rewrite whose input graph is a chain of n nodes (each node the one source of the next)."""
  strs = ["CONST", "dtypes.int", "1", "NEG"]
  b = _batch(0, strs, [0] + [3] * (n - 1), [2] * n, [0] + [1] * (n - 1), list(range(n - 1)),
             recs=[meta(), ctx(0), rw_begin(0, n - 1)], at=[0, 0, 0, 0, n, 0])
  return write(path, [[b], [rw_end(0, n - 1, 0), END]])


def tiny_records(path: str | os.PathLike, n: int = 1 << 20, batches: int = 2) -> Path:
  """`batches` batches of n nodes each, no sources (a small file that expands to millions of records)."""
  strs = ["CONST", "dtypes.int", "1"]
  frames = [[meta()]]
  for i in range(batches):
    frames.append([_batch(i * n, strs if i == 0 else [], [0] * n, [2] * n, [0] * n, [])])
  frames.append([END])
  return write(path, frames)


def big_kernel(path: str | os.PathLike, sources: int = 40, text_bytes: int = 4 << 20) -> Path:
  """A kernel context with `sources` source records of `text_bytes` each (a small file: the text compresses)."""
  line = "  %x = add i32 %a, %b\n"
  text = (line * (text_bytes // len(line) + 1))[:text_bytes]
  recs: list[Record] = [meta(), {"t": "ctx_begin", "id": 0, "parent": None, "name": "r_4", "kind": "kernel",
                                 "ts": 1.7e9}]
  frames = [recs] + [[{"t": "source", "ctx": 0, "kind": "llvm_ir", "text": text, "compile_s": 0.1}]
                     for _ in range(sources)]
  frames.append([END])
  return write(path, frames)


def long_strings(path: str | os.PathLike, size: int = 2 << 20) -> Path:
  """A node whose arg, op and dtype are each `size` characters, and a pattern whose source is too."""
  s = "x" * size
  return write(path, [[meta(), ctx(0), {"t": "node", "id": 0, "op": "CONST" + s, "dtype": s, "arg": s, "src": []},
                       node(1, "ADD", [0, 0]), {**PATTERN, "src": s}, rw_begin(0, 1),
                       {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 0, "dt": 1}, rw_end(0, 0, 1), END]])


GENERATORS: dict[str, Callable[[str | os.PathLike], Path]] = {
  "small": small, "big_int_node": lambda p: big_int(p, "node"), "big_int_match": lambda p: big_int(p, "match"),
  "big_int_dt": lambda p: big_int(p, "dt"), "big_int_ts": lambda p: big_int(p, "ts"), "deep": deep,
  "header_only": header_only, "killed": killed, "junk": junk_after_header, "many_matches": many_matches,
  "chain": chain, "tiny_records": tiny_records, "big_kernel": big_kernel, "long_strings": long_strings,
}


def mem(op: str, buf, nbytes, ts=1.7e9 + 0.5, **more) -> dict:
  return {"t": "mem", "ctx": 0, "op": op, "buf": buf, "bytes": nbytes, "ts": ts, **more}


# bad_memory's records the timeline must skip, and what the good ones peak at (buffer 7: 300 + 500 bytes in use)
BAD_MEMORY_SKIPPED = 6
BAD_MEMORY_PEAK = {"bytes": 800, "buf": 7}


def bad_memory(path: str | os.PathLike, schema_break: bool = False) -> Path:
  """Schema-valid mem records that make no sense (a free of a buffer never allocated, a second allocation of a live
  buffer, a double free, negative bytes, an unknown op, no time) among good ones; schema_break: then one whose bytes
  is a string (damage: the reader stops there)."""
  recs: list[Record] = [meta(), ctx(0),
                        mem("free", 99, 10), mem("alloc", 3, 300, ts=1.7e9 + 0.1), mem("alloc", 3, 5000),
                        mem("alloc", 7, 500, ts=1.7e9 + 0.2, dtype="float32", size=125), mem("alloc", 8, -40),
                        mem("grow", 7, 1 << 62), mem("alloc", 9, 1 << 40, ts=None), mem("free", 7, 1, ts=1.7e9 + 0.3),
                        mem("free", 7, 500, ts=1.7e9 + 0.4), mem("alloc", 10, 100, ts=1.7e9 + 0.6, dtype="<b>x</b>")]
  if schema_break:
    recs.append(mem("alloc", 11, "lots"))
  return write(path, [recs, [END]])


def chain_under_sink(path: str | os.PathLike, n: int = 100_000, arg: str = "1") -> Path:
  """A SINK of a chain of n nodes (CONSTs `arg`, then NEGs) and a CONST 2, and one match replacing the CONST 2 by a
  CONST 3: the two steps' graphs share the whole chain and differ in two nodes (a big graph, a small change)."""
  strs = ["CONST", "dtypes.int", arg, "NEG", "2", "3", "SINK", "None"]
  ops, args = [0] + [3] * (n - 1) + [0, 0, 6, 6], [2] * n + [4, 5, 7, 7]
  nsrc, src = [0] + [1] * (n - 1) + [0, 0, 2, 2], list(range(n - 1)) + [n - 1, n, n - 1, n + 1]
  b = _batch(0, strs, ops, args, nsrc, src, ([0], [0], [n], [n + 1], [1]),
             recs=[meta(), ctx(0), PATTERN, rw_begin(0, n + 2)], at=[0, 0, 0, 0, 0, 0, n + 4, 0])
  return write(path, [[b], [rw_end(0, n + 3, 1), END]])


def many_rewrites(path: str | os.PathLike, rewrites: int = 24, n: int = 2000) -> Path:
  """`rewrites` rewrites of one graph (a SINK over a chain of n nodes and a CONST 2), each with one match replacing
  the CONST 2 by a CONST 3: a small file whose every rewrite, opened in the viewer, holds a view of n nodes."""
  strs = ["CONST", "dtypes.int", "1", "NEG", "2", "3", "SINK", "None"]
  ops, args = [0] + [3] * (n - 1) + [0, 0, 6, 6], [2] * n + [4, 5, 7, 7]
  nsrc, src = [0] + [1] * (n - 1) + [0, 0, 2, 2], list(range(n - 1)) + [n - 1, n, n - 1, n + 1]
  recs = [meta(), ctx(0), PATTERN]
  b = _batch(0, strs, ops, args, nsrc, src, recs=recs, at=[0, 0] * len(recs))
  frames: list[list[Record]] = [[b]]
  for r in range(rewrites):
    frames.append([rw_begin(r, n + 2), {"t": "match", "rw": r, "pat": 0, "before": n, "after": n + 1, "dt": 1},
                   rw_end(r, n + 3, 1)])
  frames.append([END])
  return write(path, frames)


def big_frame(path: str | os.PathLike, records: int = 300_000, text: str = "") -> Path:
  """One frame of `records` error records (a small file: they compress to almost nothing), between two frames of a
  meta and an end record."""
  rec = json.dumps({"t": "error", "ctx": None, "text": text}, separators=(",", ":")).encode()
  return write(path, [[meta()], [rec] * records, [END]])


def long_lists(path: str | os.PathLike, field: str = "shape", n: int = 1 << 20) -> Path:
  """A kernel context with an opt record whose `field` (shape or colors), or a run record whose times, hold n
  elements (a small file: they compress to almost nothing)."""
  k = {"t": "ctx_begin", "id": 1, "parent": 0, "name": "r_4", "kind": "kernel", "ts": 1.7e9}
  if field == "times":
    bad = {"t": "run", "ctx": 1, "kname": "r_4", "times": [1e-6] * n, "min": 1e-6, "median": 1e-6, "flops": 1,
           "bytes": 1, "gflops": 1, "gbs": 1}
  else:
    bad = {"t": "opt", "ctx": 1, "op": "UPCAST", "axis": 0, "arg": 4, "ok": True, "reason": None, "shape": [4],
           "colors": ["blue"], "kname": "r_4", field: [4 if field == "shape" else "blue"] * n}
  return write(path, [[meta(), ctx(0), k], [bad], [END]])


# the private strings of private_strings(): the user, host, working directory and folders outside it
PRIVATE = {"user": "zqxuser", "host": "zqxhost.example.org", "cwd": "/home/zqxuser/zqxproj",
           "lib": "/opt/zqxvenv/lib", "data": "/srv/zqxdata/set", "notes": "~/zqxnotes"}


def private_strings(path: str | os.PathLike, p: dict[str, str] = PRIVATE) -> Path:
  """A trace whose every kind of string names private paths (PRIVATE) as a traced program's do: argv, cwd, host and
  user in the meta, call sites, a rule's file and source, the rewrite's file, a match's, a rewrite's and a context's
  error, an opt's reason, a BEAM candidate's error, generated code, an error record, a node's arg and the exit's
  message and traceback; most inside longer texts, one a `file://` URL."""
  cwd, lib, data, notes, host = p["cwd"], p["lib"], p["data"], p["notes"], p["host"]
  k = {"t": "ctx_begin", "id": 1, "parent": 0, "name": "r_4", "kind": "kernel", "ts": 1.7e9,
       "callsites": [{"file": f"{cwd}/model.py", "line": 3, "function": "forward"},
                     {"file": f"{lib}/site.py", "line": 9, "function": "wrap"}], "callsites_more": 0}
  ir = f'; ModuleID = "{cwd}/model.py"\nsource_filename = "{lib}/gen.c"\ndefine void @r_4() {{\n  ret void\n}}\n'
  exit_ = {"kind": "exception", "type": "FileNotFoundError",
           "message": f"[Errno 2] No such file or directory: '{data}/x.npy' (on {host}, user {p['user']})",
           "file": f"{cwd}/train.py", "line": 7, "function": "main",
           "traceback": [{"file": f"{cwd}/train.py", "line": 7, "function": "main", "text": f"open('{notes}/a.txt')"},
                         {"file": f"{lib}/io.py", "line": 2, "function": "open", "text": f"load(\"{data}/x.npy\")"}]}
  return write(path, [[
    {**meta(), "argv": [f"{cwd}/train.py", f"--data={data}", f"--notes={notes}/b.txt"], "host": host,
     "cwd": cwd, "user": p["user"]},
    ctx(0), k, node(0, arg=f"'{data}/weights.bin'"), node(1, "ADD", [0, 0]),
    {**PATTERN, "file": f"{lib}/rules.py", "src": f"lambda x: x.load('file://{data}/cfg.json')  # {notes}/n.txt"},
    {**rw_begin(0, 1), "file": f"{lib}/rules.py"},
    {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": None, "dt": 5,
     "error": f'Traceback:\n  File "{lib}/rules.py", line 1\nOSError: {data}/cfg.json'},
    {**rw_end(0, 1, 1), "error": f"ValueError: {lib}/rules.py:1: bad rule"},
    {"t": "opt", "ctx": 1, "op": "UPCAST", "axis": 0, "arg": 4, "ok": False, "reason": f"cache {notes}/c failed",
     "shape": [4], "colors": ["blue"], "kname": "r_4"},
    {"t": "beam", "ctx": 1, "round": 0, "opts": [], "chosen": False, "error": f"compile failed in {lib}/cc.py"},
    {"t": "source", "ctx": 1, "kind": "llvm_ir", "text": ir, "compile_s": 0.1},
    {"t": "error", "ctx": 1, "text": f"RuntimeError at {cwd}/model.py:3 reading {data}/x.npy on {host}"},
    {"t": "ctx_end", "id": 1, "ts": 1.7e9, "error": f"KeyError: '{notes}/k' in {lib}/k.py"},
    {"t": "end", "ts": 1.7e9 + 1, "exit": exit_}]])


# what a terminal must never get raw: a clipboard write (OSC 52), a bidi mark, line separators, C1 CSI, a surrogate
LURE = "\x1b]52;c;aGk=\x07\u061c\u2028\u2029\u202e\x9b\ud800"


def lures(path: str | os.PathLike, lure: str = LURE) -> Path:
  """A trace whose every string the terminal tools print holds `lure`."""
  m = {**meta(), "argv": [lure], "host": lure, "python": lure, "cwd": lure}
  return write(path, [[m, ctx(0, kind=lure, name=lure), node(0, arg=lure), node(1, "ADD", [0, 0]), node(2, arg="2"),
                       {**PATTERN, "name": lure, "src": lure, "file": lure, "pat": lure},
                       {**rw_begin(0, 1), "name": lure, "file": lure},
                       {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5}, rw_end(0, 2, 1), END]])


def chain_rewrites(path: str | os.PathLike, n: int = 20_000, rewrites: int = 70, steps: int = 1) -> Path:
  """`rewrites` rewrites of one chain of n nodes, each of `steps` matches replacing the root by its source (each
  step's graph ~n nodes): `show --rewrite` and /origin once cost steps x graph size."""
  b = _batch(0, ["CONST", "dtypes.int", "1", "NEG"], [0] + [3] * (n - 1), [2] * n, [0] + [1] * (n - 1),
             list(range(n - 1)), recs=[meta(), ctx(0), PATTERN], at=[0, 0, 0, 0, 0, 0])
  rws = [[rw_begin(r, n - 1), *({"t": "match", "rw": r, "pat": 0, "before": n - 1 - i, "after": n - 2 - i, "dt": 1}
                                for i in range(steps)), rw_end(r, n - 1 - steps, steps)] for r in range(rewrites)]
  return write(path, [[b], *rws, [END]])


def safetensors_header(path: str | os.PathLike, size: int = 100 << 20) -> Path:
  """A safetensors file whose header is `size` bytes of nested `[]`/`{}` (json takes GBs to parse it whole)."""
  body = b'{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":[' + b"[],{}," * (size // 6) + b"[]]}"
  p = Path(path)
  p.write_bytes(len(body).to_bytes(8, "little") + body + b"\0" * 4)
  return p
