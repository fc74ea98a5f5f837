#!/usr/bin/env python3
"""Writes small PyTorch-snapshot-shaped pickles as seeds for the pickle and torch fuzz targets.

The real snapshots (tests/torch/data) are ~110 KB each: too slow for the fuzzer to mutate well.
These are a few hundred bytes each and cover every branch of the importer's schema: current and
legacy (history) blocks, expandable segments, pool ids, oom trace entries, shared (memoized)
frame lists. Builtin types only, like the real ones.

Usage: make_pickle_seeds.py <repo>/tests/fuzz/corpus   (run by hand; the output is committed)
"""
import os
import pickle
import sys

MiB = 1 << 20
BASE = 0x7F0000000000


def frames(fn, line):
    return [{"name": fn, "filename": "model.py", "line": line},
            {"name": "<module>", "filename": "train.py", "line": 1}]


def current():
    shared = frames("forward", 10)  # one list object in several places: memo references
    return {
        "segments": [
            {"device": 0, "address": BASE, "total_size": 20 * MiB, "allocated_size": 6 * MiB,
             "active_size": 6 * MiB, "requested_size": 6 * MiB, "stream": 0,
             "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
             "frames": shared,
             "blocks": [
                 {"address": BASE, "size": 4 * MiB, "requested_size": 4 * MiB,
                  "state": "active_allocated", "frames": shared},
                 {"address": BASE + 4 * MiB, "size": 2 * MiB, "state": "active_pending_free",
                  "frames": frames("backward", 20)},
                 {"address": BASE + 6 * MiB, "size": 14 * MiB, "state": "inactive",
                  "frames": []},
             ]},
            {"device": 1, "address": BASE + (1 << 30), "total_size": 4 * MiB, "stream": 7,
             "segment_pool_id": (1, 2), "is_expandable": True,
             "blocks": [
                 {"address": BASE + (1 << 30), "size": 2 * MiB, "state": "active_allocated"},
                 {"address": BASE + (1 << 30) + 2 * MiB, "size": 2 * MiB, "state": "weird"},
             ]},
        ],
        "device_traces": [
            [{"action": "alloc", "addr": BASE, "size": 4 * MiB, "stream": 0, "time_us": 5,
              "frames": shared},
             {"action": "oom", "addr": 1 * MiB, "size": 64 * MiB, "stream": 0, "time_us": 9,
              "frames": frames("step", 30)}],
            [{"action": "oom", "device_free": 0, "size": 8 * MiB}],
        ],
        "allocator_settings": {"expandable_segments": False},
    }


def legacy():
    return {
        "segments": [
            {"device": 0, "address": BASE, "total_size": 8 * MiB, "stream": 0,
             "blocks": [
                 {"size": 2 * MiB, "state": "active_allocated",
                  "history": [{"addr": BASE, "real_size": 2 * MiB,
                               "frames": frames("old", 3)}]},
                 {"size": 6 * MiB, "state": "inactive",
                  "history": [{"addr": BASE + 4 * MiB, "real_size": 1}]},
             ]},
        ],
        "device_traces": [[{"action": "oom", "addr": 0, "size": 1 << 40}]],
    }


def minimal():
    return {"segments": []}


def main():
    root = sys.argv[1]
    docs = {"current": current(), "legacy": legacy(), "minimal": minimal()}
    for target in ("torch_import_fuzzer", "pickle_reader_fuzzer"):
        os.makedirs(os.path.join(root, target), exist_ok=True)
        for name, doc in docs.items():
            for proto in (2, 4, 5):
                path = os.path.join(root, target, f"{name}-p{proto}.pickle")
                with open(path, "wb") as f:
                    pickle.dump(doc, f, protocol=proto)


if __name__ == "__main__":
    main()
