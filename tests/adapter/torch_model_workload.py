"""Small real models trained with PyTorch on the fake CUDA device, for
tests/adapter/torch_nvidia_runtime_test.py: a two-block transformer (embedding, LayerNorm,
scaled_dot_product_attention, GELU MLP, dropout) and a CNN (Conv2d, BatchNorm2d, pooling), both
with AdamW, then randn, sort and an fp16 autocast forward. PyTorch runs on its own NVIDIA runtime,
cuBLAS, cuDNN and cuRAND; kernels are accepted and not run, so values are zeros and nothing here
depends on them.

After each step it calls fragscope's mark (sitecustomize.mark) and records what PyTorch says at
that point: torch.cuda.memory_reserved() and memory_allocated(). Writes the JSON file named by
argv[1]: {"marks": [[label, reserved, allocated], ...], "cudart": path of the libcudart.so the
process loaded, "torch": version, "cuda": torch.version.cuda}.
"""
import json
import sys

import sitecustomize
import torch
import torch.nn as nn
import torch.nn.functional as F

marks = []


def mark(label):
    torch.cuda.synchronize()
    sitecustomize.mark(label)
    marks.append([label, torch.cuda.memory_reserved(), torch.cuda.memory_allocated()])


class Block(nn.Module):
    def __init__(self, width=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = [y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v)]
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.out(attended.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp(self.norm2(x)))


def loaded_cudart():
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    return sorted(paths)


torch.manual_seed(0)
vocab = 100
transformer = nn.Sequential(nn.Embedding(vocab, 64), Block(), Block(),
                            nn.Linear(64, vocab)).cuda()
optimizer = torch.optim.AdamW(transformer.parameters(), lr=1e-3)
mark("transformer")
for step in range(3):
    tokens = torch.randint(0, vocab, (8, 32), device="cuda")
    logits = transformer(tokens)
    loss = F.cross_entropy(logits.view(-1, vocab), tokens.view(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    mark("transformer_step%d" % step)

cnn = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                    nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).cuda()
cnn_optimizer = torch.optim.AdamW(cnn.parameters())
for step in range(3):
    images = torch.randn(16, 3, 32, 32, device="cuda")
    labels = torch.randint(0, 10, (16,), device="cuda")
    loss = F.cross_entropy(cnn(images), labels)
    loss.backward()
    cnn_optimizer.step()
    cnn_optimizer.zero_grad()
    mark("cnn_step%d" % step)

values, order = torch.sort(torch.randn(4096, device="cuda"))
mark("sort")
with torch.autocast("cuda", dtype=torch.float16):
    half = transformer(torch.randint(0, vocab, (4, 16), device="cuda"))
mark("autocast")
del values, order, half, logits, loss, images, labels, tokens
mark("end")
with open(sys.argv[1], "w") as f:
    json.dump({"marks": marks, "cudart": loaded_cudart(), "torch": torch.__version__,
               "cuda": torch.version.cuda}, f)
