"""Reading an exported page back (its embedded data), and a trace whose every step rebuilds the graph: shared by the
export tests of the viewer and the browser."""
from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

from support import hostile_traces as ht
from support.export_unpack import unpack


def embedded(page: str) -> dict:
  """The page's data as collect() made it (decoded as viz_server/export/unpack.js decodes it)."""
  return unpack(json.loads(inflated(page, "data")))


def rebuilding_chain(depth: int, steps: int, rw: int = 0) -> tuple[list[dict], int, list[dict]]:
  """(node records, the SINK's id, match records of rewrite rw): a SINK over a chain of `depth` NEGs above a CONST,
  each of `steps` matches replacing the CONST by a new one (nodes 0..depth+1+steps)."""
  nodes = [ht.node(0, arg="0")] + [ht.node(i, "NEG", [i - 1]) for i in range(1, depth + 1)]
  sink = depth + 1
  nodes.append({**ht.node(sink, "SINK", [depth]), "arg": "None"})
  nodes += [ht.node(sink + k, arg=str(k)) for k in range(1, steps + 1)]
  matches = [{"t": "match", "rw": rw, "pat": 0, "before": 0 if k == 1 else sink + k - 1, "after": sink + k, "dt": 1}
             for k in range(1, steps + 1)]
  return nodes, sink, matches


def _rebuilding(path: Path, depth: int, steps: int) -> Path:
  """One rewrite over a SINK of a chain of `depth` NEGs above a CONST, whose every step replaces the CONST by a new
  one: replay rebuilds the whole chain at each step (a gradient's rewrite does so above the node it matched)."""
  nodes, sink, matches = rebuilding_chain(depth, steps)
  return ht.write(path, [[ht.meta(), ht.ctx(0), *nodes, ht.PATTERN, ht.rw_begin(0, sink), *matches,
                          ht.rw_end(0, None, steps), ht.END]])


def moving_chains(path: Path, depth: int, steps: int) -> Path:
  """A SINK over two chains of `depth` NEGs, each NEG with a call site of the user's program, above a CONST each.
  The first half of the steps replace the first chain's bottom by a new CONST (replay rebuilds that chain in place,
  as fresh nodes: no call site), the others the second's by NEGs over a new CONST, 3 layers taller each time (its
  chain is rebuilt lower: moved; the new NEGs have a call site). Issue 30: rebuilt nodes that drop their old node's
  call site, and moved ones. (The steps on a chain continue each other: a top-down rewrite's result is rewritten
  again as a chain from the node replaced.)"""
  site = {"file": "/home/u/model.py", "function": "forward"}
  nodes, tops, b = [], [], 0
  for chain_no in range(2):
    nodes.append(ht.node(b, arg=f"c{chain_no}"))
    nodes += [{**ht.node(b + i, "NEG", [b + i - 1]), "site": {**site, "line": 10 + chain_no}}
              for i in range(1, depth + 1)]
    tops.append(b + depth)
    b += depth + 1
  sink = b
  nodes.append({**ht.node(sink, "SINK", tops), "arg": "None"})
  matches, nid, bottoms = [], sink + 1, [0, depth + 1]
  for k in range(1, steps + 1):
    which = int(k > steps // 2)
    nodes.append(ht.node(nid, arg=f"n{k}"))
    nid += 1
    for _ in range(3 * (k - steps // 2) if which else 0):  # (3 layers taller than the piece it replaces)
      nodes.append({**ht.node(nid, "NEG", [nid - 1]), "site": {**site, "line": 30}})
      nid += 1
    matches.append({"t": "match", "rw": 0, "pat": 0, "before": bottoms[which], "after": nid - 1, "dt": 1})
    bottoms[which] = nid - 1
  return ht.write(path, [[ht.meta(), ht.ctx(0), *nodes, ht.PATTERN, ht.rw_begin(0, sink), *matches,
                          ht.rw_end(0, None, steps), ht.END]])


def inflated(page: str, part: str) -> str:
  """A part ("ui", "data") of the page's embedded block as text (as viz_server/export/boot.js inflates it)."""
  m = re.search(r'<script type="application/json" id="tinyviz-export">(.*?)</script>', page, re.S)
  block = json.loads(m.group(1))
  assert block["encoding"] == "deflate+base85"
  got = block[part]
  raw = base64.b85decode(got["data"].translate(str.maketrans(",./:", "&<>`")))[:got["n"]]
  return zlib.decompress(raw).decode("utf-8")


def rebuilding_rewrites(path: Path, depth: int, steps: int, rewrites: int) -> Path:
  """`rewrites` rewrites as _rebuilding's, each over its own chain (its own CONSTs: no two graphs are equal), one
  context each: a trace that grows by rewrites while its largest graph stays the same."""
  records: list[dict] = [ht.meta()]
  for r in range(rewrites):
    b = r * (depth + 2 + steps)  # (this rewrite's ids)
    nodes = [ht.node(b, arg=f"{r}:0")] + [ht.node(b + i, "NEG", [b + i - 1]) for i in range(1, depth + 1)]
    sink = b + depth + 1
    nodes.append({**ht.node(sink, "SINK", [b + depth]), "arg": "None"})
    consts = [ht.node(sink + k, arg=f"{r}:{k}") for k in range(1, steps + 1)]
    matches = [{"t": "match", "rw": r, "pat": 0, "before": b if k == 1 else sink + k - 1, "after": sink + k, "dt": 1}
               for k in range(1, steps + 1)]
    records += [ht.ctx(r), *nodes, *consts, *([ht.PATTERN] if r == 0 else []), ht.rw_begin(r, sink, r), *matches,
                ht.rw_end(r, None, steps)]
  return ht.write(path, [[*records, ht.END]])


def long_edges(path: Path, depth: int, steps: int) -> Path:
  """A SINK over `steps` ADDs stacked over a chain of `depth` NEGs above a CONST, each ADD's other source that CONST
  (a long edge beside the chain, routed through points). Each step replaces the topmost ADD by the one under it (its
  long in-edge goes; replay rebuilds the SINK). Issue 30: a step back brings a removed node's long in-edges back (a
  GPT step's `add bufferize` step 1 -> 0 sent 126 KB of their points), which the page holds (`held`)."""
  nodes = [ht.node(0, arg="0")] + [ht.node(i, "NEG", [i - 1]) for i in range(1, depth + 1)]
  nodes += [ht.node(depth + j, "ADD", [depth + j - 1, 0]) for j in range(1, steps + 1)]
  sink = depth + steps + 1
  nodes.append({**ht.node(sink, "SINK", [sink - 1]), "arg": "None"})
  matches = [{"t": "match", "rw": 0, "pat": 0, "before": sink - k, "after": sink - k - 1, "dt": 1}
             for k in range(1, steps + 1)]
  return ht.write(path, [[ht.meta(), ht.ctx(0), *nodes, ht.PATTERN, ht.rw_begin(0, sink), *matches,
                          ht.rw_end(0, None, steps), ht.END]])
