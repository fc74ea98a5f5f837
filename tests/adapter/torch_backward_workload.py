"""A training step for tests/adapter/torch_fake_test.py: the gradient of its backward pass is
allocated by the autograd engine on a thread of its own, without Python frames. Runs with real
torch on the fake CUDA device (kernels do nothing there; only the memory matters).

    torch_backward_workload.py RESULT [oom]

Writes {"grad_bytes": the gradient's size} to RESULT. With `oom`, the device is filled after the
forward pass, so the gradient's allocation fails in the backward pass: writes {"oom": the
message} instead.
"""
import json
import sys

import torch


def train_step(weights, fill):
    loss = (weights * 2).sum()
    if fill is not None:
        torch.cuda.empty_cache()  # the forward's temporary is not there to take
        free, _ = torch.cuda.mem_get_info()
        fill.append(torch.empty(free - (1 << 20), dtype=torch.uint8, device="cuda"))
    loss.backward()


if sys.argv[2:] == ["oom"]:
    # 16 MiB: a segment of its own, exactly full, so the gradient cannot be carved from it.
    weights = torch.empty(1 << 22, dtype=torch.float32, device="cuda", requires_grad=True)
    try:
        train_step(weights, [])
        result = {"oom": None}
    except torch.cuda.OutOfMemoryError as error:
        result = {"oom": str(error)}
else:
    weights = torch.empty(1 << 20, dtype=torch.float32, device="cuda", requires_grad=True)
    train_step(weights, None)
    torch.cuda.synchronize()
    result = {"grad_bytes": weights.grad.numel() * weights.grad.element_size()}
with open(sys.argv[1], "w") as f:
    json.dump(result, f)
