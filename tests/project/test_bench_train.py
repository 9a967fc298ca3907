"""bench_train's own check that tinyviz trained like the numpy reference: a loss near zero is compared at float32's
resolution (60 Adam steps passed only by luck, if at all, with a purely relative tolerance), and a real difference
in the training (a wrong update) is still caught."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import bench_train  # noqa: E402


def test_sixty_adam_steps_agree_with_numpy(capsys):
  kernels, *_ = bench_train.measure("Adam", steps=60, warmup=3)
  # forward, backward and the fused updates (two more with a 0 * mean term in the loss); relu's masked gradient
  # (64 x 256), read through an expand by W1's gradient matmul, is a kernel of its own (bufferize's
  # _broadcast_operands); the first matmul stores relu'd values, which that mask reads (no relu kernel: _one_expression)
  assert kernels == 15
  assert "Adam: losses agree over 63 steps" in capsys.readouterr().out


def test_a_wrong_update_is_caught(monkeypatch):
  real = bench_train.NumpySGD.update

  def off(self, grads):  # a learning rate 1% off: what the check must not let through
    real(self, [g * 1.01 for g in grads])
  monkeypatch.setattr(bench_train.NumpySGD, "update", off)
  with pytest.raises(AssertionError):
    bench_train.measure("SGD", steps=20, warmup=3)


def test_the_float64_loss_of_float32_weights():
  rng = np.random.default_rng(0)
  x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (5, 2)))
  y = np.array([0, 1, 1, 0], np.int32)
  got = bench_train.loss64(x, y, w1, w2)
  z = np.maximum(x.astype(np.float64) @ w1, 0) @ w2
  want = float(np.mean(np.log(np.exp(z).sum(-1)) - z[np.arange(4), y]))
  assert got == pytest.approx(want, rel=1e-12)
