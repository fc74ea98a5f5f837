"""A training step for tests/adapter/torch_fake_test.py: the gradient of its backward pass is
allocated by the autograd engine on a thread of its own, without Python frames. Runs with real
torch on the fake CUDA device (kernels do nothing there; only the memory matters).

Writes {"grad_bytes": the gradient's size} to argv[1].
"""
import json
import sys

import torch


def train_step(weights):
    loss = (weights * 2).sum()
    loss.backward()


weights = torch.empty(1 << 20, dtype=torch.float32, device="cuda", requires_grad=True)
train_step(weights)
torch.cuda.synchronize()
with open(sys.argv[1], "w") as f:
    json.dump({"grad_bytes": weights.grad.numel() * weights.grad.element_size()}, f)
