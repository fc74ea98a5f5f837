#!/usr/bin/env python3
"""Reads a fragscope `export --torch-snapshot` pickle with PyTorch's own snapshot tooling,
torch.cuda._memory_viz (the module behind `python -m torch.cuda._memory_viz`), for
torch_viz_test.cc. Prints one JSON object: what each reader made of the file.

usage: torch_viz_check.py SNAPSHOT.pickle OUT_DIR
Exits 77 when this python cannot import torch.
"""
import json
import os
import pickle
import sys

try:
    import torch
    from torch.cuda import _memory_viz as viz
except ImportError as error:
    print("SKIP: %s cannot import torch (%s)" % (sys.executable, error))
    sys.exit(77)

snapshot_path, out_dir = sys.argv[1], sys.argv[2]
with open(snapshot_path, "rb") as f:
    data = pickle.load(f)  # as _memory_viz's own command line reads it


def flame_lines(lines):  # instead of downloading flamegraph.pl
    return lines


out = {"torch": torch.__version__}
# segsum checks that every segment's blocks add up to its size and that allocated + free adds
# up to reserved, and raises when not.
out["segsum"] = viz.segsum(data)
out["segments"] = viz.segments(data, format_flamegraph=flame_lines)
out["memory"] = viz.memory(data, format_flamegraph=flame_lines)
out["trace"] = viz.trace(data)
# The pages `python -m torch.cuda._memory_viz trace_plot|segment_plot` write.
for name in ("trace_plot", "segment_plot"):
    page = getattr(viz, name)(data)
    path = os.path.join(out_dir, "torch_" + name + ".html")
    with open(path, "w") as f:
        f.write(page)
    out[name] = path
print(json.dumps(out))
