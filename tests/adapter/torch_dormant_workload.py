"""A long-running job for tests/adapter/torch_fake_test.py, started with its agent dormant:
weights made before any attach, then it says "ready" and waits; each line on stdin makes one
more tensor and answers "made", until stdin closes. Runs with real torch on the fake CUDA
device.
"""
import sys

import torch

MiB = 1 << 20


def weights():
    return torch.empty(24 * MiB // 4, dtype=torch.float32, device="cuda")


def activation():
    return torch.empty(6 * MiB // 4, dtype=torch.float32, device="cuda")


kept = weights()
torch.cuda.synchronize()
print("ready", flush=True)
made = []
for line in sys.stdin:
    made.append(activation())
    torch.cuda.synchronize()
    print("made", flush=True)
