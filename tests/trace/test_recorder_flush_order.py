"""A flush writes every pattern record it takes with its texts, even one queued by the recording thread while the
flush runs (the texts are made in the flush, off the compiling thread)."""
from __future__ import annotations

from compiler import symbolic
from compiler.trace import recorder
from vztrace.reader import TraceReader


def test_a_pattern_queued_during_a_flush_keeps_its_texts(tmp_path):
  path = tmp_path / "race.vztrace"
  rules = symbolic.symbolic.rules
  recorder.enable(path, announce=False)
  try:
    rec = recorder.RECORDER
    queue = rec._queue
    fill = queue._fill_patterns
    met = iter(rules[1:4])

    def fill_then_meet_a_rule() -> None:
      fill()
      rule = next(met, None)
      if rule is not None:  # what the recording thread may do while a flush is between filling and counting
        rec.pattern_id(rule)
    queue._fill_patterns = fill_then_meet_a_rule
    rec.pattern_id(rules[0])
    for _ in range(4):
      rec.writer.flush()
  finally:
    recorder.disable()
  pats = [r for r in TraceReader(path).poll() if r["t"] == "pattern"]
  assert len(pats) == 4
  for p, rule in zip(pats, rules[:4]):
    assert p["name"] == rule.name and p["file"] and p["line"] and p["src"], p
