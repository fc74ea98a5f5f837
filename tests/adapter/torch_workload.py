"""A PyTorch program that fragments the CUDA caching allocator's cache and then runs out of
memory, for tests/adapter/torch_fake_test.py. Runs with real torch on the fake CUDA device.

At each step it calls fragscope's mark (sitecustomize.mark) and records what PyTorch itself says
at that point: torch.cuda.memory_reserved() and memory_allocated(). Writes them to the JSON file
named by argv[1] as {"marks": [[label, reserved, allocated], ...], "oom": {...}}.
"""
import json
import sys

import sitecustomize
import torch

MiB = 1 << 20
marks = []


def mark(label):
    torch.cuda.synchronize()
    sitecustomize.mark(label)
    marks.append([label, torch.cuda.memory_reserved(), torch.cuda.memory_allocated()])


def floats(nbytes):
    return torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")


result = {"state_at_start": sitecustomize.STATE}
small = floats(1000)  # small pool: a 2 MiB segment, a 1024-byte block (rounded from 1000)
mark("small")
result["state"] = sitecustomize.STATE
odd = floats(7 * MiB + 100)  # large pool, 20 MiB segment, block rounded up to 512 bytes
mark("odd")
whole = floats(19 * MiB + 512 * 1024)  # own 20 MiB segment; the 512 KiB remainder stays in it
mark("whole")
# Six MiB tensors, three to a 20 MiB segment; then free the first and last of each three: every
# segment keeps its middle tensor, so its free bytes (6 + 8 MiB) cannot be given back or merged.
tensors = [floats(6 * MiB) for _ in range(30)]
mark("filled")
kept = [t for i, t in enumerate(tensors) if i % 3 == 1]
del tensors
mark("holes")
del whole
mark("freed_whole")
# A tensor that comes and goes between two marks: its own 40 MiB segment, cached and empty at
# the next mark. The fallback never sees a block in it and must still not leave it opaque.
transient = floats(40 * MiB)
del transient
mark("transient")
try:
    big = floats(300 * MiB)
    result["oom"] = None
except torch.OutOfMemoryError as error:
    result["oom"] = {"message": str(error).splitlines()[0]}
mark("after_oom")
try:
    result["snapshot_segments"] = len(torch.cuda.memory_snapshot())
except RuntimeError:  # backend:cudaMallocAsync keeps no snapshot
    result["snapshot_segments"] = None
# Every tensor goes back to PyTorch's cache before exit, so the state at exit is known: CPython
# need not free module globals when it exits (with torch 2.15 on CPython 3.11 it did when numpy
# was installed and did not without it), and the tests read the state at exit.
del small, odd, kept
mark("end")
result["marks"] = marks
with open(sys.argv[1], "w") as f:
    json.dump(result, f)
