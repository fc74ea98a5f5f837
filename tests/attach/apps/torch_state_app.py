"""A Python program for `fragscope attach` to inject into (tests/attach/torch_import_test.cc).

usage: torch_state_app.py fake|plain|real

- fake: allocates device memory through the fake CUDA runtime (ctypes; LD_LIBRARY_PATH holds
  tests/fakecuda's libraries), some of it "PyTorch's": a stand-in `torch` module in
  sys.modules whose cuda.memory_snapshot() describes those segments and blocks inside them, as
  torch 2.x does; the rest is outside any allocator (it must stay `untracked`).
- plain: the same allocations, no `torch` module.
- real: real PyTorch (the fake runtime preloaded, see tests/fakecuda/README.md) with cached and
  allocated blocks.

Prints one `state {json}` line (what the attach must find), then `ready`, then serves stdin
lines, one answer each:
  alloc  -> cudaMalloc of 2 MiB outside the snapshot (after the attach: seen by the hooks):
            `at ADDRESS`, then `allocated`
  hold S -> `holding`, then sleeps S seconds in C while holding the GIL (ctypes.PyDLL does not
            release it), then `held`
  ping   -> `pong`
and exits at the end of stdin.
"""

import ctypes
import json
import sys
import types

MIB = 1 << 20


def fake_mode(with_torch):
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMalloc.restype = ctypes.c_int

    def malloc(size):
        p = ctypes.c_void_p()
        rc = rt.cudaMalloc(ctypes.byref(p), size)
        if rc != 0:
            raise SystemExit("cudaMalloc(%d) failed: %d" % (size, rc))
        return p.value

    s1, s2, s3 = malloc(2 * MIB), malloc(20 * MIB), malloc(4 * MIB)
    outside = malloc(3 * MIB)  # not PyTorch's: before the attach, so untracked

    # As torch.cuda.memory_snapshot() lists them (torch 2.x field names). Segment 1 is a small
    # pool segment with a block pending its stream's free, segment 3 is all free.
    stream = 0
    segments = [
        {"device": 0, "address": s1, "total_size": 2 * MIB, "stream": stream,
         "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False,
         "blocks": [
             {"address": s1, "size": 512, "state": "active_allocated"},
             {"address": s1 + 512, "size": 1024, "state": "inactive"},
             {"address": s1 + 1536, "size": 4096, "state": "active_pending_free"},
             {"address": s1 + 5632, "size": 2 * MIB - 5632, "state": "inactive"},
         ]},
        {"device": 0, "address": s2, "total_size": 20 * MIB, "stream": stream,
         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
         "blocks": [
             {"address": s2, "size": 8 * MIB, "state": "active_allocated"},
             {"address": s2 + 8 * MIB, "size": 12 * MIB, "state": "inactive"},
         ]},
        {"device": 0, "address": s3, "total_size": 4 * MIB, "stream": stream,
         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
         "blocks": [{"address": s3, "size": 4 * MIB, "state": "inactive"}]},
    ]
    if with_torch:
        cuda = types.SimpleNamespace(
            is_initialized=lambda: True,
            get_allocator_backend=lambda: "native",
            memory_snapshot=lambda include_traces=True: segments,
        )
        torch = types.ModuleType("torch")
        torch.cuda = cuda
        sys.modules["torch"] = torch
    blocks = [b for s in segments for b in s["blocks"] if b["state"] != "inactive"]
    return rt, malloc, {
        "segments": [s["address"] for s in segments],
        "reserved": sum(s["total_size"] for s in segments),
        "allocated": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "pending": sum(b["size"] for b in blocks if b["state"] == "active_pending_free"),
        "blocks": len(blocks),
        "outside": [outside],
        "outside_bytes": 3 * MIB,
    }


def real_mode():
    import torch

    keep = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (3 * MIB, 512, 7 * MIB, 4096)]
    gone = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (5 * MIB, 1024)]
    del gone  # cached: reserved but not allocated
    torch.cuda.synchronize()
    segments = torch.cuda.memory_snapshot()
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]

    def malloc(size):
        p = ctypes.c_void_p()
        if rt.cudaMalloc(ctypes.byref(p), size) != 0:
            raise SystemExit("cudaMalloc(%d) failed" % size)
        return p.value

    outside = malloc(3 * MIB)
    return keep, malloc, {
        "segments": [int(s["address"]) for s in segments],
        "reserved": torch.cuda.memory_reserved(),
        "allocated": torch.cuda.memory_allocated(),
        "pending": 0,
        "blocks": sum(1 for s in segments for b in s["blocks"] if b["state"] != "inactive"),
        "outside": [outside],
        "outside_bytes": 3 * MIB,
    }


def main():
    mode = sys.argv[1]
    if mode == "real":
        keep, malloc, state = real_mode()
    else:
        keep, malloc, state = fake_mode(mode == "fake")
    print("state " + json.dumps(state), flush=True)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "alloc":
            print("at %d" % malloc(2 * MIB), flush=True)
            print("allocated", flush=True)
        elif words[0] == "hold":
            print("holding", flush=True)
            ctypes.PyDLL(None).sleep(int(words[1]))  # in C, the GIL held
            print("held", flush=True)
        elif words[0] == "ping":
            print("pong", flush=True)
    del keep


if __name__ == "__main__":
    main()
