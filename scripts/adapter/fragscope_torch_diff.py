"""PyTorch's caching-allocator blocks as fragscope block events: a snapshot diff.

SnapshotForwarder diffs torch.cuda.memory_snapshot() against the blocks it forwarded before and
sends the difference to the agent's annotate API (interpose/include/fragscope/annotate.h)
through ctypes. Two users:
- the adapter's fallback path (sitecustomize.py), at marks, OOMs and exit;
- the agent injected by `fragscope attach` (interpose/src/python/python_state.cc), which imports
  PyTorch's state into its live table and then keeps this module's forwarder, primed with that
  same state, for PyTorch's OOM observer (at an OOM the blocks are brought up to date before the
  failure is judged) and for the detach's last sync.

Standalone on purpose: loaded by file path, it runs nothing at import (sitecustomize.py runs
the next `sitecustomize` on the path when imported, which a process must never see twice).
"""

import sys


def warn(message):
    sys.stderr.write("fragscope: %s\n" % message)


def pool_id(pool):
    """The annotate API's pool id for a snapshot's segment_pool_id, as the extension's PoolId:
    0 for the default pool; {capture id, 0} or {0, handle id}, the top bit telling them apart."""
    if not pool:
        return 0
    first, second = (tuple(pool) + (0, 0))[:2]
    if first:
        return (int(first) | (1 << 63)) & ((1 << 64) - 1)
    return int(second) & ((1 << 64) - 1)


def stack_frames(frame, limit=128):
    """(function, file, line) of `frame` and its callers, innermost first: at most `limit`
    (the agent keeps 128 frames of a source stack)."""
    frames = []
    while frame is not None and len(frames) < limit:
        frames.append((frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno or 0))
        frame = frame.f_back
    return frames


def request_frames():
    """For an OOM observer: the Python frames of the request it was called from, innermost
    first, as (function, file, line), without the observer's frame and this one's (torch calls
    the observer from the failing request)."""
    try:
        return stack_frames(sys._getframe(2))
    except Exception:
        return []


class AgentApi:
    """The agent's annotate functions through ctypes: `agent` is the process's global symbols
    (a preloaded agent) or a CDLL of the agent's own file (an injected one)."""

    def __init__(self, agent):
        import ctypes

        def fn(name, argtypes):
            f = getattr(agent, name)
            f.argtypes = argtypes
            f.restype = None
            return f

        p, size, dev, u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64
        # Blocks read from a snapshot are reported after the fact: without the caller's stack,
        # which would name this diff as their allocation site (agents before the late entry
        # have only the plain one).
        late = "fragscope_block_alloc_late"
        self.block_alloc = fn(late if hasattr(agent, late) else "fragscope_block_alloc",
                              [p, size, dev, p, u64])
        self.block_free = fn("fragscope_block_free", [p, dev, p])
        self.block_free_pending = fn("fragscope_block_free_pending", [p, dev, p])
        self.alloc_failed = fn("fragscope_alloc_failed", [size, dev, p])
        # Tells reports that the blocks are known at syncs only (agents before it: None).
        synced = "fragscope_blocks_synced"
        self.blocks_synced = fn(synced, [ctypes.c_char_p]) if hasattr(agent, synced) else None
        # Source-level sites (agents before format 1.4: None).
        self.block_site_frames = None
        self.alloc_failed_at = None
        if hasattr(agent, "fragscope_source_stack") and hasattr(agent, "fragscope_block_site"):
            class Frame(ctypes.Structure):
                _fields_ = [("function", ctypes.c_char_p), ("file", ctypes.c_char_p),
                            ("line", ctypes.c_uint32)]

            intern = agent.fragscope_source_stack
            intern.argtypes = [ctypes.POINTER(Frame), size]
            intern.restype = u64
            sites = {}  # frames -> id: equal stacks are interned once

            def site_of(frames):
                """The agent's id for `frames` ((function, file, line), innermost first); 0
                when there are none or its table is full."""
                key = tuple(frames)
                site = sites.get(key)
                if site is None and key:
                    array = (Frame * len(key))(*[
                        Frame(str(f).encode("utf-8", "replace"),
                              str(path).encode("utf-8", "replace"),
                              max(0, int(line or 0)) & 0xFFFFFFFF) for f, path, line in key])
                    site = sites[key] = intern(array, len(key))
                return site or 0

            block_site = fn("fragscope_block_site", [p, dev, u64])

            def block_site_frames(address, device, frames):
                site = site_of(frames)
                if site:
                    block_site(address, device, site)

            self.block_site_frames = block_site_frames
            failed_at = "fragscope_alloc_failed_at"
            if hasattr(agent, failed_at):
                failed = fn(failed_at, [size, dev, p, u64])

                def alloc_failed_at(nbytes, device, frames):
                    """A failure whose site is `frames` (the request's Python frames)."""
                    failed(nbytes, device, None, site_of(frames))

                self.alloc_failed_at = alloc_failed_at

    def report_oom(self, nbytes, device, frames):
        """An OOM seen by PyTorch's observer: with `frames` (the request's Python frames) as its
        site where the agent takes one, else with the caller's stack."""
        if self.alloc_failed_at is not None and frames:
            self.alloc_failed_at(nbytes, device, frames)
        else:
            self.alloc_failed(nbytes, device, None)


class SnapshotForwarder:
    """The fallback's block events: PyTorch's allocator snapshot, diffed against what was
    forwarded before, sent to the agent as the extension sends its trace events.

    sync() takes torch.cuda.memory_snapshot() and forwards, in this order:
    1. block_free for each forwarded block that is gone, changed (size, stream or pool) or was
       pending and is not any more (it completed; the address may hold a new block);
    2. block_alloc (the block's own size, its segment's stream and pool) for each active block
       not forwarded yet, with its Python frames as its site when torch's memory history has
       them (block_site_frames), then block_free_pending if it is already active_pending_free;
       block_free_pending for a forwarded block that became active_pending_free;
    3. for a segment fragscope has never seen a block in and that holds none now (all inactive),
       a zero-byte block at its start, freed at once: the segment is PyTorch's, all of it free
       (annotated, not opaque).
    Frees come first because a new block may take bytes an old one held.

    When the device both gave memory back and took new memory since the previous sync
    (memory_stats' num_device_free and num_device_alloc both moved), a segment may have been
    given back and another taken at the same address, which fragscope saw as a new, opaque
    segment: everything of that device is forwarded again (freed, then allocated), so the state
    after the sync is exact either way.

    What it cannot see: blocks allocated and freed between two syncs (no event at all), and the
    order of events between syncs. The state is exact at marks, OOMs and exit only. Each sync
    ends with fragscope_blocks_synced, a mark that tells reports so.
    """

    @staticmethod
    def python_frames(block):
        """A snapshot block's Python frames as (function, file, line), innermost first: what
        torch's memory history recorded when the block was allocated (C++ frames left out: the
        Python line that made the tensor is the site a user acts on). Empty when none."""
        frames = []
        for f in block.get("frames") or ():
            filename = str(f.get("filename", ""))
            if filename.endswith(".py"):
                frames.append((str(f.get("name", "")), filename, int(f.get("line") or 0)))
        return frames

    def __init__(self, torch, api):
        import threading

        self.torch = torch
        self.api = api
        self.blocks = {}  # (device, address) -> (size, stream, pool, pending)
        self.carved = set()  # (device, segment address): annotated in fragscope's model
        self.device_frees = {}  # device -> num_device_free at the previous sync
        self.lock = threading.Lock()
        self.syncs = 0
        self.events = 0

    def _snapshot(self):
        memory = self.torch.cuda
        try:
            return memory.memory_snapshot(include_traces=False)  # torch >= 2.10: no trace copy
        except TypeError:
            return memory.memory_snapshot()

    def _device_frees(self, device):
        """(memory given back, memory taken) counts of the device (cudaFree/cuMemUnmap,
        cudaMalloc/cuMemMap); None when torch does not say."""
        try:
            stats = self.torch.cuda.memory_stats(device)
        except Exception:
            return None
        frees, allocs = stats.get("num_device_free"), stats.get("num_device_alloc")  # >= 2.1
        if frees is None:
            frees, allocs = stats.get("segment.all.freed"), stats.get("segment.all.allocated")
        return None if frees is None else (frees, allocs)

    def sync(self, why=""):
        """Forwards the difference between PyTorch's blocks now and the last sync. Never raises:
        a failure is reported on stderr once and the program goes on."""
        if not self.lock.acquire(blocking=False):
            return  # another sync is running (or this thread is inside one): it covers this
        try:
            self._sync(self._snapshot(), why)
        except Exception as error:
            if not getattr(self, "_warned", False):
                self._warned = True
                warn("PyTorch snapshot diff failed (%s): %r" % (why, error))
        finally:
            self.lock.release()

    def prime(self, segments, marked=True):
        """Takes `segments` (a memory_snapshot()) as already forwarded: for a forwarder that
        starts where an import of the same snapshot left the agent. With `marked`, every segment
        without an active block holds a zero-byte block at its start, as the import enters one
        (so a block that later starts there first frees it)."""
        new, segment_blocks, devices, _ = self._parse(segments)
        if marked:
            for (device, address), (live, stream, pool) in segment_blocks.items():
                if live == 0:
                    new[(device, address)] = (0, stream, pool, False)
        self.blocks = new
        self.carved = set(segment_blocks)
        self.device_frees = {device: self._device_frees(device) for device in devices}

    @staticmethod
    def _parse(segments):
        """(blocks, segments, devices, frames) of a snapshot: (device, address) -> (size,
        stream, pool, pending) of its active blocks, (device, segment address) -> (active
        blocks, stream, pool), the devices named, and (device, address) -> Python frames of the
        active blocks that have some."""
        new = {}
        segment_blocks = {}
        devices = set()
        frames = {}
        for seg in segments:
            device = int(seg.get("device", 0))
            devices.add(device)
            stream = int(seg.get("stream") or 0)
            pool = pool_id(seg.get("segment_pool_id"))
            address = int(seg["address"])
            live = 0
            offset = address
            for block in seg.get("blocks", ()):
                start = int(block.get("address", offset))
                size = int(block["size"])
                offset = start + size
                state = block.get("state")
                if state == "inactive":
                    continue
                new[(device, start)] = (size, stream, pool, state != "active_allocated")
                python = SnapshotForwarder.python_frames(block)
                if python:
                    frames[(device, start)] = python
                live += 1
            segment_blocks[(device, address)] = (live, stream, pool)
        return new, segment_blocks, devices, frames

    def _sync(self, segments, why=""):
        new, segment_blocks, devices, frames = self._parse(segments)
        devices.update(device for device, _ in self.blocks)
        devices.update(device for device, _ in self.carved)

        # A segment replaced by another at the same address needs memory given back and memory
        # taken since the last sync; an OOM's release of cached segments alone is no reason.
        reset = set()
        for device in devices:
            counts = self._device_frees(device)
            before = self.device_frees.get(device, counts)
            if (counts is None or before is None
                    or (counts[0] != before[0] and counts[1] != before[1])):
                reset.add(device)
            self.device_frees[device] = counts
        if reset:
            self.carved = {key for key in self.carved if key[0] not in reset}

        api = self.api
        events = 0
        for key, (size, stream, pool, pending) in list(self.blocks.items()):
            now = new.get(key)
            if (now is None or now[:3] != (size, stream, pool) or (pending and not now[3])
                    or key[0] in reset):
                api.block_free(key[1], key[0], stream)
                del self.blocks[key]
                events += 1
        for key, now in new.items():
            size, stream, pool, pending = now
            before = self.blocks.get(key)
            if before is None:
                api.block_alloc(key[1], size, key[0], stream, pool)
                events += 1
                # Reported after the fact, without a stack: its Python frames are its site.
                if key in frames and api.block_site_frames is not None:
                    api.block_site_frames(key[1], key[0], frames[key])
                    events += 1
                if pending:
                    api.block_free_pending(key[1], key[0], stream)
                    events += 1
            elif pending and not before[3]:
                api.block_free_pending(key[1], key[0], stream)
                events += 1
            self.blocks[key] = now
        carved = set()
        for key, (live, stream, pool) in segment_blocks.items():
            if live == 0 and key not in self.carved:
                device, address = key
                api.block_alloc(address, 0, device, stream, pool)
                api.block_free(address, device, stream)
                events += 2
            carved.add(key)
        self.carved = carved
        self.syncs += 1
        self.events += events
        # After the block events: the mark says they brought the blocks up to date.
        if api.blocks_synced is not None:
            label = "PyTorch blocks synced (%s)" % why if why else "PyTorch blocks synced"
            api.blocks_synced(label.encode("utf-8", "replace"))
