"""Train an MLP and a small CNN on scikit-learn's bundled digits (8x8 images, 10 classes) and report test accuracy.

  python examples/train.py                      # both models on digits (pip install -e .[train])
  python examples/train.py --data synthetic     # generated digits-like data: no scikit-learn needed
  VIZ=1 python examples/train.py --steps 3      # a trace: forward, the gradient rewrite, backward and update kernels
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler import Tensor, nn  # noqa: E402


def load_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """scikit-learn's digits, scaled to [0, 1], split 80/20 with a fixed permutation."""
  try:
    from sklearn.datasets import load_digits as sk_digits
  except ImportError:
    raise SystemExit("examples/train.py: the digits data set needs scikit-learn (pip install -e .[train]); "
                     "--data synthetic runs without it") from None
  d = sk_digits()
  return _split(d.data.astype(np.float32) / 16.0, d.target.astype(np.int32), seed)


def synthetic_digits(n: int = 1200, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Ten random 8x8 prototypes, each sample one of them with noise and a random shift of brightness."""
  rng = np.random.default_rng(seed)
  protos = (rng.random((10, 64)) > 0.6).astype(np.float32)
  y = rng.integers(0, 10, n).astype(np.int32)
  x = protos[y] * rng.uniform(0.6, 1.0, (n, 1)) + rng.normal(0, 0.25, (n, 64))
  return _split(np.clip(x, 0, 1).astype(np.float32), y, seed)


def _split(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  perm = np.random.default_rng(seed).permutation(len(x))
  cut = int(len(x) * 0.8)
  return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


class MLP:
  def __init__(self):
    self.l1, self.l2 = nn.Linear(64, 128), nn.Linear(128, 10)

  def __call__(self, x: Tensor) -> Tensor:
    return self.l2(self.l1(x).relu())


class CNN:
  def __init__(self):
    self.c1, self.c2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
    self.l1 = nn.Linear(16 * 4 * 4, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.c1(x.reshape(-1, 1, 8, 8)).relu().max_pool2d(2)
    x = self.c2(x).relu()
    return self.l1(x.flatten(1))


def _progress(i: int, n: int, loss: float, width: int = 24) -> None:
  done = width * (i + 1) // n
  sys.stdout.write(f"\r  [{'#' * done}{'.' * (width - done)}] {i + 1}/{n} loss {loss:.4f}")
  sys.stdout.flush()


def accuracy(model, x: np.ndarray, y: np.ndarray) -> float:
  return float((model(Tensor(x)).argmax(-1).numpy() == y).mean())


def train(name: str, model, data, epochs: int, batch: int, lr: float, max_steps: int | None) -> float:
  """Adam on the cross-entropy; prints loss and accuracy per epoch; returns the final test accuracy."""
  x_train, y_train, x_test, y_test = data
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=lr)
  rng = np.random.default_rng(1)
  steps_per_epoch = len(x_train) // batch  # whole batches only: every step has the same kernels
  step, acc = 0, 0.0
  print(f"{name}: {sum(p.numel() for p in opt.params)} parameters, {steps_per_epoch} steps per epoch")
  for epoch in range(epochs):
    perm = rng.permutation(len(x_train))
    t0, losses = time.perf_counter(), []
    for i in range(steps_per_epoch):
      idx = perm[i * batch:(i + 1) * batch]
      with Tensor.train():
        opt.zero_grad()
        loss = model(Tensor(x_train[idx])).sparse_categorical_crossentropy(Tensor(y_train[idx]))
        loss.backward()
        opt.step()
      losses.append(loss.item())  # the loss of the weights before the step
      _progress(i, steps_per_epoch, losses[-1])
      step += 1
      if max_steps is not None and step >= max_steps:
        break
    acc = accuracy(model, x_test, y_test)
    print(f"\r  epoch {epoch + 1}: loss {np.mean(losses):.4f}  test accuracy {acc:.2%}  "
          f"({time.perf_counter() - t0:.1f} s)")
    if max_steps is not None and step >= max_steps:
      break
  return acc


def main(argv: list[str] | None = None) -> dict[str, float]:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
  ap.add_argument("--data", choices=["digits", "synthetic"], default="digits")
  ap.add_argument("--epochs", type=int, default=None, help="default: 20 (MLP), 15 (CNN)")
  ap.add_argument("--steps", type=int, default=None, help="stop each model after this many steps")
  ap.add_argument("--batch", type=int, default=64)
  ap.add_argument("--lr", type=float, default=1e-2)
  args = ap.parse_args(argv)
  Tensor.manual_seed(0)
  data = load_digits() if args.data == "digits" else synthetic_digits()
  results = {}
  for name, make, epochs in (("mlp", MLP, 20), ("cnn", CNN, 15)):
    if args.model in (name, "both"):
      results[name] = train(name, make(), data, args.epochs or epochs, args.batch, args.lr, args.steps)
  print("  ".join(f"{k}: {v:.2%}" for k, v in results.items()))
  return results


if __name__ == "__main__":
  main()
