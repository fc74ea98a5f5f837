#!/usr/bin/env python3
"""Reads a `fragscope export --torch-snapshot` pickle for export_end_to_end_test.cc and prints
one JSON object: its structure (read with every global refused), whether its history leads to
its segments, and with --torch what PyTorch's own torch.cuda._memory_viz makes of it.

usage: torch_snapshot_check.py SNAPSHOT.pickle [--torch OUT_DIR]
Exits 77 with --torch when this python cannot import torch.
"""
import io
import json
import os
import pickle
import sys


class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError("global %s.%s refused" % (module, name))


path = sys.argv[1]
torch_dir = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--torch" else None
if torch_dir is not None:
    try:
        import torch
        from torch.cuda import _memory_viz as viz
    except ImportError as error:
        print("SKIP: %s cannot import torch (%s)" % (sys.executable, error))
        sys.exit(77)

with open(path, "rb") as f:
    data = Restricted(io.BytesIO(f.read())).load()

out = {"segments": len(data["segments"]), "devices": []}
active = {}  # addr -> state, over all segments
for seg in data["segments"]:
    for b in seg["blocks"]:
        if b["state"] != "inactive":
            active[b["address"]] = b["state"]
problems = []
for trace in data["device_traces"]:
    counts = {}
    last = {}  # addr -> last block action
    previous_time = 0
    for e in trace:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
        if e["time_us"] < previous_time:
            problems.append("time goes back at %s" % e)
        previous_time = e["time_us"]
        if e["action"] in ("alloc", "free_requested", "free_completed"):
            last[e["addr"]] = e["action"]
    # Every block the history leaves allocated is in the segments, and every block it freed
    # for good is not.
    for addr, action in last.items():
        if (action != "free_completed") != (addr in active):
            problems.append("0x%x: last %s but %s in the segments"
                            % (addr, action, active.get(addr, "absent")))
    out["devices"].append({"counts": counts,
                           "last": trace[-1]["action"] if trace else None,
                           "entries": len(trace)})
out["problems"] = problems[:10]

if torch_dir is not None:
    out["torch"] = torch.__version__
    out["trace"] = viz.trace(data)
    out["segsum"] = viz.segsum(data)
    page = viz.trace_plot(data)
    page_path = os.path.join(torch_dir, "torch_trace_plot.html")
    with open(page_path, "w") as f:
        f.write(page)
    out["trace_plot_bytes"] = len(page)
print(json.dumps(out))
