"""A training-like step for tests/adapter/torch_fake_test.py: weights that stay, then a forward
pass whose activations and a large temporary reach the peak of reserved memory, all freed
before anything else happens. It never marks, so the adapter names the activations' Python line only if it
reports sites on its own at the peak. Runs with real torch on the fake CUDA device.

Writes {"peak_reserved": ..., "peak_allocated": ...} (torch.cuda's maxima) to argv[1].
"""
import json
import sys
import time

import sitecustomize
import torch

MiB = 1 << 20


def weights(nbytes):
    return torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")


def activation(nbytes):
    return torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")


def forward(count):
    acts = [activation(6 * MiB) for _ in range(count)]
    time.sleep(0.5)  # the step's kernels: the GIL is free meanwhile, as in a real step
    return acts


def loss():
    # The step's largest temporary (logits, say): a segment of its own, the peak of reserved,
    # and freed at once. The adapter's thread, woken by the peak, names it while it is live or,
    # when the free comes first, as a freed block (the order is the threads' race).
    logits = torch.empty(30 * MiB // 4, dtype=torch.float32, device="cuda")
    del logits


w = weights(40 * MiB)
# The adapter readies its site reports while CUDA initialises (the tensor above): the step
# below needs no pause for it.
sites_ready = sitecustomize.SITES_READY.is_set()
acts = forward(20)
loss()
time.sleep(0.5)  # the backward pass
result = {"sites_ready": sites_ready,
          "peak_reserved": torch.cuda.max_memory_reserved(),
          "peak_allocated": torch.cuda.max_memory_allocated()}
del acts  # the backward pass frees them
later = activation(6 * MiB)  # from the cache: no new segment, no new peak
torch.cuda.synchronize()
with open(sys.argv[1], "w") as f:
    json.dump(result, f)
