#!/usr/bin/env python3
"""Real PyTorch on its OWN NVIDIA runtime, cuBLAS, cuDNN and cuRAND, over the fake CUDA driver.

Nothing of the fake runtime is loaded: the library path holds only the fake libcuda.so.1 and
libnvidia-ml.so.1, and PyTorch's libraries find NVIDIA's libcudart.so.13, cuBLAS and cuDNN from
its nvidia-* wheels through their RPATH. tests/adapter/torch_model_workload.py trains a small
transformer and a small CNN under `fragscope run` with the adapter; at every mark fragscope's
reserved and allocated (replayed from the trace), less the memory cuBLAS and cuDNN allocate for
themselves (exact segments, outside PyTorch's cache), must equal torch.cuda.memory_reserved()
and memory_allocated() at the same point, with no opaque segment. Also with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.

Needs a python that imports torch (a CUDA build; CMake: -DFRAGSCOPE_TORCH_PYTHON=/path/to/python).
Without one it exits 77, which CTest reports as skipped, and says why.

usage: torch_nvidia_runtime_test.py FRAGSCOPE_CLI TRACE_MARKS DRIVER_DIR FAKECUDA_LIB_DIR
                                    ADAPTER_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys
import unittest

import torch_fake_test as common

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER_DIR = None


def environment(extra):
    env = common.environment(extra)
    # No fake runtime: only the fake driver and NVML on the library path.
    env["LD_PRELOAD"] = os.environ.get("FRAGSCOPE_TEST_ABORT_BACKTRACE", "")
    env["LD_LIBRARY_PATH"] = DRIVER_DIR
    env["FAKECUDA_CAPACITY"] = "4G"
    return env


class TorchOnItsOwnRuntimeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.extension_error = common.build_extension(environment)

    def train(self, name, extra_env):
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        trace = os.path.join(common.WORK, name + ".fst")
        result_path = os.path.join(common.WORK, name + ".json")
        for path in (trace, result_path):
            if os.path.exists(path):
                os.remove(path)
        r = subprocess.run(
            [common.CLI, "run", "-o", trace, "--", sys.executable,
             os.path.join(HERE, "torch_model_workload.py"), result_path],
            env=environment(extra_env), capture_output=True, text=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-8000:])
        with open(result_path) as f:
            result = json.load(f)
        # PyTorch's own runtime from its wheel, not the fake one.
        self.assertEqual(len(result["cudart"]), 1, result["cudart"])
        self.assertNotIn(common.FAKE_LIB, result["cudart"][0])
        self.assertIn("nvidia", result["cudart"][0])
        print("\n%s: torch %s, CUDA %s, %s" % (name, result["torch"], result["cuda"],
                                               result["cudart"][0]), file=sys.stderr)
        return trace, result

    def check_marks(self, trace, result):
        """At every mark fragscope's figures are PyTorch's plus the memory cuBLAS and cuDNN hold
        for themselves (exact segments, which torch.cuda does not count), none opaque."""
        fragscope = common.marks_in_trace(trace)
        table = ["%-18s %12s %12s %12s %12s %12s" % ("mark", "torch resv", "fragscope",
                                                     "torch alloc", "fragscope", "libraries")]
        for label, reserved, allocated in result["marks"]:
            got = fragscope.get(label, {})
            table.append("%-18s %12d %12d %12d %12d %12d" % (
                label, reserved, got.get("reserved", -1), allocated, got.get("allocated", -1),
                got.get("exact", -1)))
        print("\n".join(table), file=sys.stderr)
        self.assertEqual([m[0] for m in result["marks"]],
                         ["transformer", "transformer_step0", "transformer_step1",
                          "transformer_step2", "cnn_step0", "cnn_step1", "cnn_step2", "sort",
                          "autocast", "end"])
        for label, reserved, allocated in result["marks"]:
            with self.subTest(mark=label):
                self.assertIn(label, fragscope)
                got = fragscope[label]
                self.assertEqual(got["opaque"], 0)
                self.assertEqual(got["reserved"] - got["exact"], reserved)
                self.assertEqual(got["allocated"] - got["exact"], allocated)
        # cuBLAS's handle workspaces, from the first GEMM on.
        self.assertGreaterEqual(fragscope["transformer_step0"]["exact"], 64 << 20)

    def test_transformer_and_cnn(self):
        trace, result = self.train("models", {})
        self.check_marks(trace, result)

    def test_transformer_and_cnn_expandable_segments(self):
        trace, result = self.train("models-expandable",
                                   {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        self.check_marks(trace, result)


if __name__ == "__main__":
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    (common.CLI, common.TRACE_MARKS, DRIVER_DIR, common.FAKE_LIB, common.ADAPTER_DIR,
     common.WORK) = (os.path.abspath(a) for a in sys.argv[1:7])
    version = common.torch_version()
    if version is None:
        print("SKIP: %s cannot import torch; configure with -DFRAGSCOPE_TORCH_PYTHON=<a python "
              "with torch> (scripts/adapter/README.md)" % sys.executable)
        sys.exit(common.SKIP)
    print("torch %s from %s" % (version, sys.executable))
    os.makedirs(common.WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + sys.argv[7:], verbosity=2)
