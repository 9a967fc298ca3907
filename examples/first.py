import numpy as np

from compiler import Tensor

x = Tensor(np.random.default_rng(0).standard_normal((8, 16), dtype=np.float32))
w1, w2 = Tensor.randn(16, 32), Tensor.randn(32, 10)
probs = x.linear(w1).relu().linear(w2).softmax()        # an MLP forward: (8, 16) -> (8, 10)
img = Tensor.rand(1, 3, 16, 16)
feat = img.conv2d(Tensor.randn(4, 3, 3, 3)).relu().max_pool2d()  # (1, 3, 16, 16) -> (1, 4, 7, 7)
print(probs.numpy().sum(axis=1))                         # each row sums to 1
print(feat.shape, feat.numpy().max())
