"""place.Rows.free_x when several rows are within reach of the box being placed (a tall box, or a spot between two
bands): the spot it finds is the free x nearest the target that a search over every candidate x finds, and a search
reads the boxes near the spot, not the rest of each row (a far jump's derive runs ~1,300 such searches)."""
import random

import pytest

from viz_server.place import NODE_GAP, Rows


class CountingRow(list):
  """A row that counts the boxes read from it (an index one box, a slice its length)."""

  reads = 0

  def __getitem__(self, i):
    got = super().__getitem__(i)
    CountingRow.reads += len(got) if isinstance(i, slice) else 1
    return got


def _rows(boxes: dict[float, list[tuple[float, float, float]]], row=list) -> Rows:
  hh = max(b[2] for bs in boxes.values() for b in bs)
  wmax = max(b[1] - b[0] for bs in boxes.values() for b in bs)
  return Rows(sorted(boxes), {y: row(sorted(bs)) for y, bs in boxes.items()}, hh, wmax)


def _nearest_free(rows: Rows, y: float, w: float, h: float, target: float) -> float:
  """The free x nearest target (ties: the right one) among every x a box's clearance ends at, target and w/2."""
  pad = NODE_GAP + w / 2 - 1e-9
  xs = {target, w / 2}
  for bs in rows.rows.values():
    for left, right, _ in bs:
      xs.update((right + pad + 1e-9, left - pad - 1e-9))
  free = [x for x in xs if rows.is_free(x, y, w, h)]
  return min(free, key=lambda x: (abs(x - target), -x))


@pytest.mark.parametrize("seed", range(40))
def test_free_x_over_several_rows_is_the_nearest_free_x(seed):
  rng = random.Random(seed)
  boxes: dict[float, list[tuple[float, float, float]]] = {}
  for y in (0.0, 30.0, 60.0):
    x = rng.uniform(0, 40)
    boxes[y] = []
    for _ in range(rng.randrange(5, 30)):
      w, hh = rng.choice((20.0, 40.0, 90.0)), rng.choice((10.0, 10.0, 25.0))
      boxes[y].append((x, x + w, hh))
      x += w + rng.uniform(0, 80)
  rows = _rows(boxes)
  for _ in range(20):
    y, w, h = rng.choice((15.0, 30.0, 45.0)), rng.choice((20.0, 60.0)), rng.choice((20.0, 50.0))
    target = rng.uniform(-50, 1500)
    got = rows.free_x(y, w, h, target)
    assert rows.is_free(got, y, w, h)
    assert got == pytest.approx(_nearest_free(rows, y, w, h, target), abs=1e-6)


def test_a_search_over_two_long_rows_reads_the_boxes_near_its_spot():
  # two rows of 2,000 boxes each whose clearances cover every x but a gap after the 10th box; the box placed between
  # the rows reaches both: its spot is that gap, found after a few boxes of each row
  skip = range(10, 13)
  boxes = {0.0: [(100.0 * i, 100.0 * i + 40, 10.0) for i in range(2000) if i not in skip],
           30.0: [(100.0 * i + 50, 100.0 * i + 90, 10.0) for i in range(2000) if i not in skip]}
  rows = _rows(boxes, CountingRow)
  CountingRow.reads = 0
  got = rows.free_x(15.0, 40.0, 20.0, 500.0)
  assert got == pytest.approx(100.0 * 9 + 90 + NODE_GAP + 20, abs=1e-6)  # right of row 30's 10th box, in the gap
  assert CountingRow.reads < 200  # (100; a heapq.merge of the rows read 4,086: their rest, sliced)
