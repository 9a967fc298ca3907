"""Diffs between two graphs from traces: a unified text diff of their printed forms and a structural node diff.

A graph is printed one line per node, sources before users, in depth-first order from the root:

  3f2a9c01 ADD            int32      (a1b2c3d4, 0e9f8a7b)  arg

Each node is labelled by a short structural hash (of op, dtype, arg and its sources' hashes) instead of a running
number, so inserting or removing a node changes only the lines of that node and of the nodes above it, and the same
subgraph prints the same in any trace, rewrite or kernel.
"""
from __future__ import annotations

import difflib
import hashlib
from typing import Callable

from viz_server.nodes import Node

NodeGetter = Callable[[int], "Node | None"]
HASH_CHARS = 8
MAX_DIFF_NODES = 100_000


class DiffError(ValueError):
  """A graph that cannot be diffed (too big, or it names nodes the trace does not define)."""


def toposort(root: int, get: NodeGetter) -> list[int]:
  """Ids reachable from root, sources first (iterative depth-first, sources in order)."""
  out: list[int] = []
  done: set[int] = set()
  stack: list[tuple[int, bool]] = [(root, False)]
  while stack:
    x, expanded = stack.pop()
    if x in done:
      continue
    if expanded:
      done.add(x)
      out.append(x)
      if len(out) > MAX_DIFF_NODES:
        raise DiffError(f"graph has more than {MAX_DIFF_NODES} nodes")
      continue
    node = get(x)
    if node is None:
      raise DiffError(f"node {x} is not defined in the trace")
    stack.append((x, True))
    stack.extend((s, False) for s in reversed(node[3]) if s not in done)
  return out


def structural_hashes(order: list[int], get: NodeGetter) -> dict[int, str]:
  """A hex digest per node that depends only on its structure (not on ids)."""
  out: dict[int, str] = {}
  for x in order:
    op, dtype, arg, src = get(x)  # type: ignore[misc]
    h = hashlib.blake2b(digest_size=16)
    for part in (op, dtype, arg):
      b = part.encode("utf-8", "surrogatepass")
      h.update(len(b).to_bytes(8, "little"))
      h.update(b)
    for s in src:
      h.update(bytes.fromhex(out[s]))
    out[x] = h.hexdigest()
  return out


def print_graph(order: list[int], get: NodeGetter, hashes: dict[int, str]) -> list[str]:
  lines = []
  for x in order:
    op, dtype, arg, src = get(x)  # type: ignore[misc]
    srcs = ", ".join(hashes[s][:HASH_CHARS] for s in src)
    tail = "" if arg == "None" else "  " + arg.replace("\n", "\\n")
    lines.append(f"{hashes[x][:HASH_CHARS]} {op:<14s} {dtype:<10s} ({srcs}){tail}")
  return lines


def diff_graphs(a: tuple[int, NodeGetter, str], b: tuple[int, NodeGetter, str], context: int = 3) -> dict:
  """{text, lines, graph} for two graphs given as (root, node getter, label)."""
  (ra, ga, la), (rb, gb, lb) = a, b
  oa, ob = toposort(ra, ga), toposort(rb, gb)
  ha, hb = structural_hashes(oa, ga), structural_hashes(ob, gb)
  pa, pb = print_graph(oa, ga, ha), print_graph(ob, gb, hb)
  udiff = list(difflib.unified_diff(pa, pb, fromfile=la, tofile=lb, lineterm="", n=context))
  lines = []
  for i, line in enumerate(udiff):
    if i < 2 and (line.startswith("---") or line.startswith("+++")):
      continue
    kind = line[:1] if line[:1] in ("+", "-", "@") else " "
    lines.append({"kind": kind, "text": line if kind == "@" else line[1:]})
  set_a, set_b = set(ha.values()), set(hb.values())

  def nodes(order: list[int], get: NodeGetter, hashes: dict[int, str], other: set[str]) -> list[dict]:
    out = []
    for x in order:
      if hashes[x] not in other:
        op, dtype, arg, _ = get(x)  # type: ignore[misc]
        out.append({"id": x, "op": op, "dtype": dtype, "arg": arg, "hash": hashes[x][:HASH_CHARS]})
    return out

  return {"text": "\n".join(udiff), "lines": lines,
          "graph": {"only_a": nodes(oa, ga, ha, set_b), "only_b": nodes(ob, gb, hb, set_a),
                    "both": len(set_a & set_b)}}
