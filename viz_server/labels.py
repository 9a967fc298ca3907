"""Node text as the viewer shows it: an op's color class, a node's label and box size (by the label metrics the page
draws with), its fields cut for answers, a node as graph answers send it, and a view's table of labels and sizes made
once per node (`Looks`)."""
from __future__ import annotations

import functools
import os
from typing import Callable

from viz_server.layout import LAYER_GAP, NODE_GAP
from viz_server.nodes import Node, Site

CHAR_W, LINE_H, PAD_W, PAD_H = 6.6, 13.0, 16.0, 10.0  # label metrics (sent in /api/boot: static/graph.js draws by them)
MAX_ARG_CHARS = 40
MAX_SITE_CHARS = 160  # of a node's call site as graph answers send it (a group's label on the page)
MAX_FIELD_CHARS = 4096  # of a node's op, dtype or arg in graph and diff answers (a MB-sized one froze the UI for s)

_CATEGORY: dict[str, str] = {}
for _cat, _ops in {
  "const": "CONST VCONST DEFINE_VAR",
  "buffer": "BUFFER DEFINE_GLOBAL DEFINE_LOCAL DEFINE_REG DEFINE_ACC BUFFERIZE",
  "alu": "EXP2 LOG2 SIN SQRT RECIP NEG TRUNC ADD SUB MUL IDIV MOD FDIV MAX CMPLT CMPNE CMPEQ AND OR XOR SHL SHR POW "
         "WHERE MULACC",
  "load": "LOAD", "store": "STORE ASSIGN", "range": "RANGE END SPECIAL", "reduce": "REDUCE REDUCE_AXIS",
  "movement": "RESHAPE PERMUTE EXPAND PAD SHRINK FLIP", "sink": "SINK", "cast": "CAST BITCAST",
  "index": "INDEX GEP VECTORIZE UNROLL CONTRACT",
}.items():
  for _op in _ops.split():
    _CATEGORY[_op] = _cat


def category(op: str) -> str:
  """The color class of an op (by name, so ops added later fall into `other`)."""
  return _CATEGORY.get(op, "other")


def short_arg(arg: str, chars: int = MAX_ARG_CHARS) -> str:
  return arg if len(arg) <= chars else arg[:chars - 1] + "…"


def label(op: str, dtype: str, arg: str) -> str:
  """Display text: the op, then dtype and short arg (plain text: the UI puts it in text nodes); each cut to
  MAX_ARG_CHARS, so a hostile trace's MB-sized op cannot make a MB-wide box."""
  parts = (short_arg(dtype) if dtype != "void" else "", short_arg(arg) if arg != "None" else "")
  second = " ".join(x for x in parts if x)
  return f"{short_arg(op)}\n{second}" if second else short_arg(op)


def label_metrics() -> dict[str, float]:
  """The label metrics the layouts size boxes by (node_size), and the layout's gaps, for the UI to draw with
  (GET /api/boot's `metrics`)."""
  return {"char_w": CHAR_W, "line_h": LINE_H, "pad_w": PAD_W, "pad_h": PAD_H, "max_arg_chars": MAX_ARG_CHARS,
          "node_gap": NODE_GAP, "layer_gap": LAYER_GAP}


_BOXES: dict[tuple[int, int], tuple[float, float]] = {}  # (longest line, lines) -> box size; labels are cut, so few


def node_size(text: str) -> tuple[float, float]:
  """A box's (width, height) for a label: its longest line's characters and its lines by the label metrics."""
  lines = text.count("\n") + 1
  key = (len(text) if lines == 1 else max(map(len, text.split("\n"))), lines)
  got = _BOXES.get(key)
  if got is None:
    got = _BOXES[key] = (round(key[0] * CHAR_W + PAD_W, 1), round(lines * LINE_H + PAD_H, 1))
  return got


@functools.lru_cache(maxsize=4096)
def site_label(site: Site) -> str:
  """A call site as a graph node and its group show it: the file's name, the line and the function (a module's
  top level: none), cut to MAX_SITE_CHARS (GET /nodes/<n> sends it whole: path and all)."""
  file, line, fn = site
  text = f"{os.path.basename(file)}:{line}" + ("" if fn == "<module>" else f" {fn}")
  return text if len(text) <= MAX_SITE_CHARS else text[:MAX_SITE_CHARS - 1] + "\u2026"


def clip_fields(op: str, dtype: str, arg: str) -> dict:
  """A node's texts as graph and diff answers send them: each cut to MAX_FIELD_CHARS; `cut` (only when one was)
  names the cut fields with their full lengths, which GET /nodes/<n> sends whole (the node card's "show all")."""
  out: dict = {"op": op, "dtype": dtype, "arg": arg}
  cut = {k: len(v) for k, v in out.items() if len(v) > MAX_FIELD_CHARS}
  if cut:
    out.update({k: out[k][:MAX_FIELD_CHARS] for k in cut}, cut=cut)
  return out


def node_json(nid: int, node: tuple[str, str, str, tuple[int, ...]], look: tuple[str, tuple[float, float]] | None = None
              ) -> dict:
  """A node as graph answers send it; look: its label and box size where the caller has them already."""
  op, dtype, arg, src = node
  if look is None:
    lab = label(op, dtype, arg)
    w, h = node_size(lab)
  else:
    lab, (w, h) = look
  if len(op) <= MAX_FIELD_CHARS and len(dtype) <= MAX_FIELD_CHARS and len(arg) <= MAX_FIELD_CHARS:
    return {"id": nid, "op": op, "dtype": dtype, "arg": arg, "label": lab, "cat": category(op), "w": w, "h": h,
            "src": list(src)}
  return {"id": nid, **clip_fields(op, dtype, arg), "label": lab, "cat": category(op), "w": w, "h": h,
          "src": list(src)}


class Looks:
  """A view's labels and box sizes, each made once per node (a layout sizes a box by its label, the answers send
  it); `size` is what the layouts (viz_server.layout, place) are handed."""

  def __init__(self, node: Callable[[int], Node | None]) -> None:
    self.node = node  # node id -> (op, dtype, arg, src): the view's replay's
    self.labels: dict[int, str] = {}
    self.sizes: dict[int, tuple[float, float]] = {}
    self._made: dict[tuple[str, str, str], tuple[str, tuple[float, float]]] = {}  # (op, dtype, arg) -> (label, size)

  def est_bytes(self) -> int:
    """About the bytes the tables hold (a part of what viz_server.views budgets by)."""
    return 150 * len(self.labels) + 180 * len(self.sizes) + 300 * len(self._made)

  def size(self, nid: int) -> tuple[float, float]:
    got = self.sizes.get(nid)
    return got if got is not None else self.look(nid, self.node(nid))[1]  # type: ignore[arg-type]

  def look(self, nid: int, node: Node) -> tuple[str, tuple[float, float]]:
    """A node's label and box size."""
    lab = self.labels.get(nid)
    if lab is None:
      # made once per (op, dtype, arg): a rewrite step rebuilds ~2,000 nodes of a GPT step's `add bufferize`, each
      # with its old version's look
      key = (node[0], node[1], node[2])
      got = self._made.get(key)
      if got is None:
        lab = label(*key)
        got = self._made[key] = (lab, node_size(lab))
      lab = self.labels[nid] = got[0]
      return lab, self.sizes.setdefault(nid, got[1])
    got = self.sizes.get(nid)
    if got is None:
      got = self.sizes[nid] = node_size(lab)
    return lab, got
