"""`index_given_valid`: an index's div/mod pinned by its load's valid (a pool's windows read back through their padded,
reshaped repeat, as a conv's input gradient does) become linear forms, equal wherever the valid holds, and the valid
itself keeps its value everywhere; a clause whose remainder can leave [m - d, d) is left alone."""
import itertools

from support.opt_helpers import G, R, buf, sink

from compiler.dtype import dtypes
from compiler.opt import Kernel
from compiler.opt.kernel import access_strides
from compiler.symbolic import index_given_valid
from compiler.uop import Ops, UOp, toposort

Y, I = UOp.variable("y", 0, 23), UOp.variable("i", 0, 5)


def _value(u: UOp, y: int, i: int) -> int | bool:
  out = u.substitute({Y: UOp.const(dtypes.int32, y), I: UOp.const(dtypes.int32, i)}).simplify()
  assert out.op is Ops.CONST, out
  return out.arg


def _window_index(coeff: int) -> UOp:
  """MNIST's col2im: element ((y + c*i) // 25, (y + c*i) % 25) of a 5 x 20 row, valid where the remainder is < 20."""
  t = Y + I * coeff
  valid = (t % 25).alu(Ops.CMPLT, 20) & t.alu(Ops.CMPLT, 125)
  return buf(0, 5 * 20).index((t // 25) * 20 + t % 25, valid)


def test_div_and_mod_under_the_valid_become_linear():
  ix = _window_index(24)
  got = index_given_valid(ix)
  assert got is not None and not any(u.op in (Ops.IDIV, Ops.MOD) for u in toposort(got))
  for y, i in itertools.product(range(24), range(6)):
    valid = _value(ix.src[2], y, i)
    assert _value(got.src[2], y, i) == valid, (y, i)
    if valid:
      assert _value(got.src[1], y, i) == _value(ix.src[1], y, i) == i * 20 + y - i, (y, i)


def test_a_remainder_that_can_wrap_keeps_its_div_and_mod():
  # y + 23*i = (y - 2*i) + 25*i: y - 2*i reaches -10, below 20 - 25, where (y + 23*i) % 25 >= 20 does not rule it out
  assert index_given_valid(_window_index(23)) is None


def test_the_optimizer_sees_the_load_walk_its_axes():
  # a kernel reading such an index: Kernel's normalization rewrites it, so the load's strides are known (a vector
  # along x for the heuristics), where they were not before: (i*20 + y - i)*24 + x = 24y + x + 456i
  r_y, r_x, r_i = UOp.range(24, 0, G), UOp.range(24, 1, G), UOp.range(6, 2, R)
  t = r_y + r_i * 24
  valid = (t % 25).alu(Ops.CMPLT, 20) & t.alu(Ops.CMPLT, 125)
  ld = buf(1, 5 * 20 * 24).index(((t // 25) * 20 + t % 25) * 24 + r_x, valid).load()
  k = Kernel(sink(buf(0, 24 * 24).index(r_y * 24 + r_x).store(ld.reduce(r_i))))
  load = next(a for a in k.accesses if a.src[0].arg == 1)
  assert access_strides(k, load) == [24, 1, 456]
