"""Comparing recorded traces by what the format promises (docs/architecture.md, "batch"), not by flush timing."""
from __future__ import annotations

from collections.abc import Iterable

RUN_TO_RUN = ("ts", "dt", "started", "pid", "argv")  # fields that differ between two recordings of one program


def promised_order(records: Iterable[dict], drop: tuple[str, ...] = RUN_TO_RUN) -> list[dict]:
  """The records with the order the format keeps, and only that: between two records that are neither node nor
  match, the nodes come first, then the matches (where a flush fell decides how they interleave). Fields in `drop`
  are removed. Checks on the way that every node comes before the first record that names it."""
  out: list[dict] = []
  run: list[dict] = []
  seen: set[int] = set()

  def close_run() -> None:
    out.extend(sorted(run, key=lambda r: r["t"] != "node"))  # stable: nodes, then matches, each in their order
    run.clear()

  for r in records:
    if r["t"] == "node":
      assert set(r["src"]) <= seen, f"node {r['id']} comes before its sources {r['src']}"
      seen.add(r["id"])
    elif r["t"] == "match":
      assert {r["before"], r["after"]} <= seen | {None}, f"match names a node not written yet: {r}"
    r = {k: v for k, v in r.items() if k not in drop}
    if r["t"] in ("node", "match"):
      run.append(r)
    else:
      close_run()
      out.append(r)
  close_run()
  return out
