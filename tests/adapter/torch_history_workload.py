"""A program that records PyTorch's memory history itself, before its first CUDA use, as PyTorch's
memory-snapshot guide shows, for tests/adapter/torch_fake_test.py. The adapter's own setting must
not take it away. Runs with real torch on the fake CUDA device, with or without fragscope.

Writes {"state": sitecustomize's STATE or null, "actions": the trace's actions} to argv[1].
"""
import json
import sys

import torch

torch.cuda.memory._record_memory_history(max_entries=1000)


def tensor(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")


kept = tensor(4 << 20)
gone = tensor(4 << 20)
del gone
snapshot = torch.cuda.memory._snapshot()
try:
    import sitecustomize

    state = getattr(sitecustomize, "STATE", None)
except ImportError:
    state = None
with open(sys.argv[1], "w") as f:
    json.dump({"state": state,
               "actions": [e["action"] for trace in snapshot["device_traces"] for e in trace]}, f)
