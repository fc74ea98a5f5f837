#!/usr/bin/env python3
"""`fragscope torch-setup` with a real torch: it builds the adapter's C++ extension into the cache
the adapter loads it from at run time, names that folder, and finds it built the second time.

usage: torch_setup_test.py FRAGSCOPE_CLI CACHE_DIR   (run by the python whose torch to build
for; exit 77, reported skipped, when that python has no torch)
"""
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print("skipped: %s has no torch" % sys.executable)
    sys.exit(77)

cli, cache = sys.argv[1], os.path.abspath(sys.argv[2])
env = {k: v for k, v in os.environ.items() if not k.startswith("FRAGSCOPE_")}
env["FRAGSCOPE_CACHE_DIR"] = cache


def setup():
    r = subprocess.run([cli, "torch-setup", "--python", sys.executable], env=env,
                       capture_output=True, text=True, timeout=1700)
    sys.stdout.write(r.stderr)
    return r


built = os.path.join(cache, "torch-" + "".join(c if c.isalnum() else "_"
                                               for c in torch.__version__))
first = setup()
assert first.returncode == 0, first.returncode
assert ("built in %s" % built) in first.stderr, first.stderr
assert any(name.endswith(".so") for name in os.listdir(built)), os.listdir(built)
second = setup()
assert second.returncode == 0, second.returncode
assert ("already built in %s" % built) in second.stderr, second.stderr
print("ok")
