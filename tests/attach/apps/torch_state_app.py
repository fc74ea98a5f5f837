"""A Python program for `fragscope attach` to inject into (tests/attach/torch_import_test.cc).

usage: torch_state_app.py fake|plain|expandable|fallback|real

- fake: allocates device memory through the fake CUDA runtime (ctypes; LD_LIBRARY_PATH holds
  tests/fakecuda's libraries), some of it "PyTorch's": a stand-in `torch` module in
  sys.modules whose cuda.memory_snapshot() describes those segments and blocks inside them, as
  torch 2.x does; the rest is outside any allocator (it must stay `untracked`).
- plain: the same allocations, no `torch` module.
- fallback: fake, run with the agent preloaded (dormant): the PyTorch adapter's fallback as
  sitecustomize.py installs it, its snapshot diff (fragscope_torch_diff.py from
  $FRAGSCOPE_ADAPTER_DIR) forwarding the stand-in's blocks to the agent at the start and kept
  as sitecustomize._FORWARDER.
- expandable: the stand-in `torch` module with expandable segments: 2 MiB pages of four
  handles mapped (cuMemCreate + cuMemMap through the fake driver) into one reservation, with a
  hole, so memory_snapshot() lists two mapped runs of one expandable segment, as torch 2.x
  does; one block spans two pages.
- real: real PyTorch (the fake runtime preloaded, see tests/fakecuda/README.md) with cached and
  allocated blocks.

Prints one `state {json}` line (what the attach must find), then `ready`, then serves stdin
lines, one answer each:
  alloc  -> cudaMalloc of 2 MiB outside the snapshot (after the attach: seen by the hooks):
            `at ADDRESS`, then `allocated`
  hold S -> `holding`, then sleeps S seconds in C while holding the GIL (ctypes.PyDLL does not
            release it), then `held`
  churn  -> fake: changes the stand-in snapshot's blocks (no driver call): `churned`
  oom    -> fake: the churn, then calls the OOM observers torch was given (`observers N`
            first); real: a request too large for the device, caught (`allocated N` first);
            then `oomed`
  ping   -> `pong`
  grow   -> expandable: maps a new page into the hole, as torch grows a segment; real: allocates
            a 30 MiB tensor (`reserved N` and `allocated N`, torch's figures, first); then
            `grown`
  shrink -> expandable: unmaps and releases the last page, mapped before the attach; real:
            frees every tensor and empties the cache (`reserved N` first); then `shrunk`
and exits at the end of stdin.
"""

import ctypes
import json
import sys
import types

MIB = 1 << 20


def runtime():
    """The fake CUDA runtime, and cudaMalloc through it."""
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMalloc.restype = ctypes.c_int

    def malloc(size):
        p = ctypes.c_void_p()
        rc = rt.cudaMalloc(ctypes.byref(p), size)
        if rc != 0:
            raise SystemExit("cudaMalloc(%d) failed: %d" % (size, rc))
        return p.value

    return rt, malloc


OBSERVERS = []  # what torch._C._cuda_attach_out_of_memory_observer was given
SEGMENTS = []  # the fake mode's stand-in snapshot


def churn():
    """The fake mode's blocks change (no driver call): segment 2's 8 MiB block is freed and
    segment 3 filled."""
    s2, s3 = SEGMENTS[1], SEGMENTS[2]
    s2["blocks"] = [{"address": s2["address"], "size": 20 * MIB, "state": "inactive"}]
    s3["blocks"] = [{"address": s3["address"], "size": 4 * MIB, "state": "active_allocated"}]


def install_stand_in_torch(segments):
    """A `torch` in sys.modules whose memory_snapshot() lists `segments` (changed in place by
    the `oom` command) and that keeps the OOM observers it is given."""
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        get_allocator_backend=lambda: "native",
        memory_snapshot=lambda include_traces=True: segments,
        memory_stats=lambda device=None: {"num_device_free": 0, "num_device_alloc": 4},
    )
    torch._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=OBSERVERS.append)
    sys.modules["torch"] = torch


def fake_mode(with_torch):
    rt, malloc = runtime()
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
             # With torch's memory history on: the frames that made it (C++ ones left out).
             {"address": s2, "size": 8 * MIB, "state": "active_allocated",
              "frames": [{"name": "at::empty", "filename": "EmptyTensor.cpp", "line": 3},
                         {"name": "build_model", "filename": "/app/model.py", "line": 10}]},
             {"address": s2 + 8 * MIB, "size": 12 * MIB, "state": "inactive"},
         ]},
        {"device": 0, "address": s3, "total_size": 4 * MIB, "stream": stream,
         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
         "blocks": [{"address": s3, "size": 4 * MIB, "state": "inactive"}]},
    ]
    if with_torch:
        install_stand_in_torch(segments)
    SEGMENTS[:] = segments
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


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class Pages:
    """2 MiB pages mapped into one reservation, as torch's expandable segments do."""

    PAGE = 2 * MIB

    def __init__(self, pages):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.va = ctypes.c_uint64()
        self.check("cuMemAddressReserve", self.cu.cuMemAddressReserve(
            ctypes.byref(self.va), ctypes.c_size_t(pages * self.PAGE), ctypes.c_size_t(0),
            ctypes.c_uint64(0), ctypes.c_ulonglong(0)))
        self.handles = {}  # page -> handle

    @staticmethod
    def check(what, rc):
        if rc != 0:
            raise SystemExit("%s failed: %d" % (what, rc))

    def address(self, page):
        return self.va.value + page * self.PAGE

    def map(self, page):
        prop = _AllocationProp()
        prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = 1  # CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = 0
        handle = ctypes.c_uint64()
        self.check("cuMemCreate", self.cu.cuMemCreate(
            ctypes.byref(handle), ctypes.c_size_t(self.PAGE), ctypes.byref(prop),
            ctypes.c_ulonglong(0)))
        self.check("cuMemMap", self.cu.cuMemMap(
            ctypes.c_uint64(self.address(page)), ctypes.c_size_t(self.PAGE), ctypes.c_size_t(0),
            handle, ctypes.c_ulonglong(0)))
        access = _AccessDesc()
        access.location.type = 1
        access.location.id = 0
        access.flags = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self.check("cuMemSetAccess", self.cu.cuMemSetAccess(
            ctypes.c_uint64(self.address(page)), ctypes.c_size_t(self.PAGE),
            ctypes.byref(access), ctypes.c_size_t(1)))
        self.handles[page] = handle.value

    def unmap(self, page):
        self.check("cuMemUnmap", self.cu.cuMemUnmap(
            ctypes.c_uint64(self.address(page)), ctypes.c_size_t(self.PAGE)))
        self.check("cuMemRelease", self.cu.cuMemRelease(ctypes.c_uint64(self.handles.pop(page))))


def expandable_mode():
    _, malloc = runtime()
    outside = malloc(3 * MIB)  # not PyTorch's: before the attach, so untracked
    pages = Pages(32)
    for page in (0, 1, 2, 4):  # page 3 unmapped: two runs, [0, 3) and [4, 5)
        pages.map(page)
    # As torch.cuda.memory_snapshot() lists an expandable segment: one entry per mapped run.
    run1, run2 = pages.address(0), pages.address(4)
    segments = [
        {"device": 0, "address": run1, "total_size": 6 * MIB, "stream": 0,
         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": True,
         "blocks": [
             {"address": run1, "size": 1 * MIB, "state": "inactive"},
             {"address": run1 + 1 * MIB, "size": 3 * MIB, "state": "active_allocated"},
             {"address": run1 + 4 * MIB, "size": 2 * MIB, "state": "inactive"},
         ]},
        {"device": 0, "address": run2, "total_size": 2 * MIB, "stream": 0,
         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": True,
         "blocks": [{"address": run2, "size": 2 * MIB, "state": "inactive"}]},
    ]
    install_stand_in_torch(segments)
    return pages, malloc, {
        "segments": [run1, run2],
        "pages": {str(pages.address(p)): h for p, h in pages.handles.items()},
        "reserved": 8 * MIB,
        "allocated": 3 * MIB,
        "pending": 0,
        "blocks": 1,
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


def install_fallback_diff():
    """What the adapter's fallback leaves in a process started with the agent: a snapshot diff
    over the agent's annotate functions, synced once, as sitecustomize._FORWARDER."""
    import importlib.util
    import os

    path = os.path.join(os.environ["FRAGSCOPE_ADAPTER_DIR"], "fragscope_torch_diff.py")
    spec = importlib.util.spec_from_file_location("fragscope_torch_diff", path)
    diff = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(diff)
    forwarder = diff.SnapshotForwarder(sys.modules["torch"], diff.AgentApi(ctypes.CDLL(None)))
    forwarder.sync("start")
    site = types.ModuleType("sitecustomize")
    site._FORWARDER = forwarder
    sys.modules["sitecustomize"] = site


def main():
    mode = sys.argv[1]
    if mode == "real":
        keep, malloc, state = real_mode()
    elif mode == "expandable":
        keep, malloc, state = expandable_mode()
    else:
        keep, malloc, state = fake_mode(mode in ("fake", "fallback"))
        if mode == "fallback":
            install_fallback_diff()
    torch = sys.modules.get("torch") if mode == "real" else None  # imported by real_mode
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
        elif words[0] == "grow":
            if mode == "real":
                keep.append(torch.empty(30 * MIB, dtype=torch.uint8, device="cuda"))
                torch.cuda.synchronize()
                print("reserved %d" % torch.cuda.memory_reserved(), flush=True)
                print("allocated %d" % torch.cuda.memory_allocated(), flush=True)
            else:
                keep.map(3)
            print("grown", flush=True)
        elif words[0] == "shrink":
            if mode == "real":
                del keep[:]
                torch.cuda.empty_cache()
                print("reserved %d" % torch.cuda.memory_reserved(), flush=True)
            else:
                keep.unmap(4)
            print("shrunk", flush=True)
        elif words[0] == "oom":
            if mode == "real":
                try:
                    torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
                except torch.cuda.OutOfMemoryError:
                    pass
                print("allocated %d" % torch.cuda.memory_allocated(), flush=True)
            else:
                # A 30 MiB request fails after the churn, and torch calls its OOM observers.
                churn()
                for observer in OBSERVERS:
                    observer(0, 30 * MIB, 16 << 30, 0)
                print("observers %d" % len(OBSERVERS), flush=True)
            print("oomed", flush=True)
        elif words[0] == "churn":
            churn()
            print("churned", flush=True)
        elif words[0] == "ping":
            print("pong", flush=True)
    del keep


if __name__ == "__main__":
    main()
