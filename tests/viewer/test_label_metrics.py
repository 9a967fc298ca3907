"""The label metrics the server sizes node boxes by are published in /api/boot, so the UI can draw by the same ones."""
import random

from support.server_helpers import rand_expr, write_rewrites

from viz_server.app import create_app
from viz_server.layout import NODE_GAP


def test_boot_publishes_the_metrics_the_boxes_are_sized_by(tmp_path):
  path = tmp_path / "r.vztrace"
  write_rewrites(path, [rand_expr(random.Random(5), 40, width=5)])
  client = create_app([path], follow=False).test_client()
  boot = client.get("/api/boot").get_json()
  m = boot["metrics"]
  assert client.get("/api/metrics").get_json() == m
  assert set(m) == {"char_w", "line_h", "pad_w", "pad_h", "max_arg_chars", "node_gap", "layer_gap"}
  assert m["node_gap"] == NODE_GAP and all(type(v) in (int, float) and v > 0 for v in m.values())
  nodes = boot["graph"]["nodes"]
  assert len(nodes) > 10 and any("\n" in n["label"] for n in nodes) and any("\n" not in n["label"] for n in nodes)
  for n in nodes:  # every box is what the published metrics make of its label
    lines = n["label"].split("\n")
    assert n["w"] == round(max(map(len, lines)) * m["char_w"] + m["pad_w"], 1), n
    assert n["h"] == round(len(lines) * m["line_h"] + m["pad_h"], 1), n
    assert all(len(s) <= 2 * m["max_arg_chars"] + 1 for s in lines)


def test_boot_without_traces_still_has_the_metrics(tmp_path):
  boot = create_app([tmp_path], follow=False).test_client().get("/api/boot").get_json()
  assert boot["trace"] is None and boot["metrics"]["char_w"] > 0
