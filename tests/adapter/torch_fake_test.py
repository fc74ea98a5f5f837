#!/usr/bin/env python3
"""The PyTorch adapter with REAL PyTorch, on the fake CUDA device (no GPU).

PyTorch's own CUDA caching allocator runs over tests/fakecuda: the fake libcudart.so.13 is
preloaded (torch's libraries find NVIDIA's runtime through their RPATH, which LD_LIBRARY_PATH
does not override; NVIDIA's runtime cannot run on the fake driver, see tests/fakecuda/README.md)
and the fake libcuda.so.1 is on LD_LIBRARY_PATH. tests/adapter/torch_workload.py fragments the
cache and runs out of memory under `fragscope run`; at each fragscope mark, fragscope's figures
(replayed from the trace by fragscope_trace_marks) must equal what torch.cuda.memory_reserved()
and memory_allocated() said at the same point:
- primary path (the C++ extension and its allocator trace tracker): reserved and allocated;
- fallback path (FRAGSCOPE_TORCH_ADAPTER=fallback): reserved and allocated too, from the
  torch.cuda.memory_snapshot() diffs the adapter forwards before each mark and at the OOM; no
  PyTorch segment is opaque at a mark, and the OOM is classified as on the primary path. The
  snapshot the fallback dumps at exit, imported with `fragscope import`, agrees as well.

Needs a python that imports torch (a CUDA build; CMake: -DFRAGSCOPE_TORCH_PYTHON=/path/to/python).
Without one it exits 77, which CTest reports as skipped, and says why.

usage: torch_fake_test.py FRAGSCOPE_CLI TRACE_MARKS FAKECUDA_LIB_DIR ADAPTER_DIR WORK_DIR
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import unittest

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
CLI = TRACE_MARKS = FAKE_LIB = ADAPTER_DIR = WORK = None
MiB = 1 << 20


def torch_version():
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def environment(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FRAGSCOPE_", "FAKECUDA_", "PYTORCH_"))
           and k not in ("LD_PRELOAD", "PYTHONPATH", "CUDA_VISIBLE_DEVICES")}
    preload = [os.path.join(FAKE_LIB, "libcudart.so.13")]
    # tests/adapter/abort_backtrace.cc, set by CTest: an abort prints where it came from.
    if os.environ.get("FRAGSCOPE_TEST_ABORT_BACKTRACE"):
        preload.append(os.environ["FRAGSCOPE_TEST_ABORT_BACKTRACE"])
    env.update({
        "LD_PRELOAD": ":".join(preload),
        "LD_LIBRARY_PATH": FAKE_LIB,
        "FAKECUDA_CAPACITY": "768M",
        "FRAGSCOPE_CACHE_DIR": os.path.join(WORK, "extension-cache"),
        "FRAGSCOPE_ADAPTER_DIR": ADAPTER_DIR,
        "PYTHONNOUSERSITE": "1",
        # A crash of a traced program prints every Python thread's stack: what a failed run
        # shows is then enough to tell where it was.
        "PYTHONFAULTHANDLER": "1",
    })
    env.update(extra)
    return env


def marks_in_trace(trace):
    r = subprocess.run([TRACE_MARKS, trace], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("fragscope_trace_marks failed: " + r.stderr)
    marks = {}
    for line in r.stdout.splitlines():
        words = line.split()
        fields = dict(zip(words[4::2], map(int, words[5::2])))
        if words[3] == "0":
            marks[words[1]] = fields
    return marks


def build_extension(environment):
    """Builds the adapter's extension once, outside the traced runs (its compiler would otherwise
    run with the agent preloaded), exactly as sitecustomize.py builds it, in `environment({...})`.
    Returns None, or what the build printed when it failed."""
    r = subprocess.run(
        [sys.executable, "-c", "import sys, torch, sitecustomize as s; "
         "print(s._build_extension(torch).__file__)"],
        env=environment({"PYTHONPATH": ADAPTER_DIR, "LD_PRELOAD": ""}),
        capture_output=True, text=True, timeout=900)
    return None if r.returncode == 0 else r.stdout + r.stderr


class TorchOnFakeCudaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.extension_error = build_extension(environment)

    def run_workload(self, name, extra_env, workload="torch_workload.py", args=()):
        trace = os.path.join(WORK, name + ".fst")
        result_path = os.path.join(WORK, name + ".json")
        for path in (trace, result_path):
            if os.path.exists(path):
                os.remove(path)
        r = subprocess.run(
            [CLI, "run", "-o", trace, "--", sys.executable,
             os.path.join(HERE, workload), result_path] + list(args),
            env=environment(extra_env), capture_output=True, text=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(result_path) as f:
            result = json.load(f)
        return trace, result, r

    def check_torch_ran(self, result):
        # Real PyTorch on the fake device: the workload's 300 MiB request does not fit in 768 MiB
        # with the cache fragmented, and PyTorch says so with its own OOM.
        self.assertIsNotNone(result["oom"])
        self.assertIn("CUDA out of memory. Tried to allocate 300.00 MiB", result["oom"]["message"])
        labels = [m[0] for m in result["marks"]]
        self.assertEqual(labels, ["small", "odd", "whole", "filled", "holes", "freed_whole",
                                  "transient", "after_oom", "end"])
        by_label = {m[0]: m for m in result["marks"]}
        # What PyTorch's allocator does with these requests (rounding, unsplit remainder).
        self.assertEqual(by_label["small"][1:], [2 * MiB, 1024])
        self.assertEqual(by_label["odd"][2] - by_label["small"][2], 7 * MiB + 512)
        self.assertEqual(by_label["whole"][2] - by_label["odd"][2], 20 * MiB)
        # The transient tensor's segment stays cached, empty.
        self.assertEqual(by_label["transient"][1] - by_label["freed_whole"][1], 40 * MiB)
        self.assertEqual(by_label["transient"][2], by_label["freed_whole"][2])
        # Freeing every tensor keeps the cache.
        self.assertEqual(by_label["end"][1:], [by_label["after_oom"][1], 0])

    def check_marks(self, trace, result):
        """fragscope's figures at each mark are torch's, with no opaque PyTorch segment."""
        fragscope = marks_in_trace(trace)
        table = ["%-12s %12s %12s %12s %12s %7s" % ("mark", "torch resv", "fragscope", "torch alloc",
                                                    "fragscope", "opaque")]
        for label, reserved, allocated in result["marks"]:
            got = fragscope.get(label, {})
            table.append("%-12s %12d %12d %12d %12d %7d" % (
                label, reserved, got.get("reserved", -1), allocated, got.get("allocated", -1),
                got.get("opaque", -1)))
        print("\n" + "\n".join(table), file=sys.stderr)
        for label, reserved, allocated in result["marks"]:
            with self.subTest(mark=label):
                self.assertIn(label, fragscope)
                self.assertEqual(fragscope[label]["reserved"], reserved)
                self.assertEqual(fragscope[label]["allocated"], allocated)
                self.assertEqual(fragscope[label]["opaque"], 0)
                self.assertEqual(fragscope[label]["cached"], reserved - allocated)

    def report_json(self, trace):
        """`fragscope report TRACE --format json`, parsed."""
        report = subprocess.run([CLI, "report", trace, "--format", "json"], capture_output=True,
                                text=True, timeout=120)
        self.assertEqual(report.returncode, 0, report.stderr)
        return json.loads(report.stdout)

    def check_oom_report(self, trace):
        """The workload's one OOM, fragmentation; returns the report."""
        summary = self.report_json(trace)
        # Every block event fit the segments fragscope saw (the fallback's diffs included).
        self.assertEqual(summary["unmatched_events"], 0)
        self.assertEqual(summary["orphan_blocks_total"], 0)
        ooms = summary["ooms"]
        self.assertEqual(len(ooms), 1, ooms)
        # Device free + PyTorch's cached bytes would hold 300 MiB; no free range does.
        self.assertEqual(ooms[0]["class"], "fragmentation", ooms[0]["explanation"])
        self.assertEqual(ooms[0]["requested_bytes"], 300 * MiB)
        return summary

    def test_primary_path_tracker_matches_torch(self):
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        trace, result, _ = self.run_workload("primary", {})
        self.assertEqual(result["state"], "tracker, Python sites")
        self.check_torch_ran(result)
        self.check_marks(trace, result)
        summary = self.check_oom_report(trace)
        self.check_python_sites(summary["ooms"][0], result)
        # The trace exported as a PyTorch snapshot reads in PyTorch's own tooling: at exit the
        # program's tensors are gone (the workload frees them before its last mark) and its
        # cache (the reserved bytes after the OOM) is left.
        snapshot = os.path.join(WORK, "primary-export.pickle")
        r = subprocess.run([CLI, "export", trace, "--torch-snapshot", snapshot, "--at", "end"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run(
            [sys.executable, "-c",
             "import pickle, sys\n"
             "from torch.cuda import _memory_viz as viz\n"
             "data = pickle.load(open(sys.argv[1], 'rb'))\n"
             "viz.segsum(data)  # raises unless blocks tile segments and the sums agree\n"
             "print(sum(s['total_size'] for s in data['segments']),\n"
             "      sum(b['size'] for s in data['segments'] for b in s['blocks']\n"
             "          if b['state'] == 'active_allocated'))\n", snapshot],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.split(), [str(result["marks"][-1][1]), "0"])

    def line_finder(self, workload):
        """line_of(text): the number of the one line of tests/adapter/<workload> holding text."""
        with open(os.path.join(HERE, workload)) as f:
            source = f.read().splitlines()

        def line_of(text):
            found = [i + 1 for i, l in enumerate(source) if text in l]
            self.assertEqual(len(found), 1, text)
            return found[0]

        return line_of

    def check_python_sites(self, oom, result):
        """The post-mortem names the workload's lines: the failed request's, and for the tensors
        live at the failure the line that made each (FRAGSCOPE_TORCH_SITES=python)."""
        line_of = self.line_finder("torch_workload.py")

        def where(frame):
            return (frame["function"], os.path.basename(frame["file"]), frame["line"])

        made = ("floats", "torch_workload.py", line_of("return torch.empty("))
        self.assertEqual([where(f) for f in oom["stack"]],
                         [made, ("<module>", "torch_workload.py", line_of("big = floats("))])
        callers = {}
        for site in oom["sites_at_failure"]:
            self.assertEqual(where(site["stack"][0]), made, site)
            callers[where(site["stack"][-1])[2]] = site["count"]
        self.assertEqual(callers, {line_of("small = floats("): 1, line_of("odd = floats("): 1,
                                   line_of("tensors = [floats("): 10})
        by_label = {m[0]: m for m in result["marks"]}
        self.assertEqual(sum(s["live_bytes"] for s in oom["sites_at_failure"]),
                         by_label["after_oom"][2])

    def peak_sites(self, name, extra_env):
        """Runs torch_peak_workload.py; returns its sites at the peak of reserved as
        {(function, file, line) of the innermost frame: (bytes, count)} and the keys of its
        activations', weights' and temporary's lines."""
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        line_of = self.line_finder("torch_peak_workload.py")
        env = {"FRAGSCOPE_TORCH_SITES_EVERY_S": "0"}
        env.update(extra_env)
        trace, result, _ = self.run_workload(name, env, workload="torch_peak_workload.py")
        self.assertTrue(result["sites_ready"])
        summary = self.report_json(trace)
        self.assertEqual(summary["unmatched_events"], 0)
        device = summary["devices"][0]
        # The device's peak also counts memory outside PyTorch's cache (a 2 MiB segment of
        # torch's own at start-up here).
        self.assertGreaterEqual(device["peak_reserved_bytes"], result["peak_reserved"])
        at_peak = {}
        for site in device["sites_at_peak"]:
            top = site["stack"][0] if site["stack"] else {}
            key = (top.get("function"), os.path.basename(top.get("file") or ""), top.get("line"))
            at_peak[key] = (site["live_bytes"], site["count"])
        made = ("activation", "torch_peak_workload.py", line_of("def activation(") + 1)
        kept = ("weights", "torch_peak_workload.py", line_of("def weights(") + 1)
        temporary = ("loss", "torch_peak_workload.py", line_of("logits = torch.empty("))
        self.assertNotIn("fragscope_annotate_block_alloc", str(at_peak))
        return at_peak, made, kept, temporary

    def test_activations_at_the_peak_have_python_sites(self):
        """A step's activations, made and freed between two flushes, are named by their Python
        line among the sites at the peak: each new peak of reserved memory makes the adapter
        report sites at once, while they are live. (No marks, no periodic flushes here.)"""
        at_peak, made, kept, temporary = self.peak_sites("peak", {})
        # The peak is set by the driver call for the temporary's own 30 MiB segment, and the
        # sites at the peak are taken right after its block is placed: the 20 activations, the
        # weights and the temporary, each under the line that made it, none under the
        # tracker's C++ site and no segment under PyTorch's. The temporary was freed before any
        # flush: the adapter reports its site as a freed block's.
        self.assertEqual(at_peak.pop(made), (20 * 6 * MiB, 20), at_peak)
        self.assertEqual(at_peak.pop(kept), (40 * MiB, 1), at_peak)
        self.assertEqual(at_peak.pop(temporary), (30 * MiB, 1), at_peak)
        self.assertEqual(at_peak, {})

    def test_activations_at_the_peak_have_python_sites_expandable(self):
        """The same with expandable segments, whose peaks are pages mapped (SEGMENT_MAP)."""
        at_peak, made, kept, temporary = self.peak_sites(
            "peak-expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        self.assertEqual(at_peak.pop(kept), (40 * MiB, 1), at_peak)
        self.assertEqual(at_peak.pop(temporary), (30 * MiB, 1), at_peak)
        live_bytes, count = at_peak.pop(made)
        self.assertEqual((live_bytes, 1 <= count <= 20), (count * 6 * MiB, True))
        self.assertEqual(at_peak, {})

    def test_the_programs_own_memory_history_is_kept(self):
        """A program that records PyTorch's memory history itself (its trace ring, for its own
        _dump_snapshot) keeps it under the adapter, whose Python sites still name its lines."""
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        workload = os.path.join(HERE, "torch_history_workload.py")
        plain_result = os.path.join(WORK, "history-plain.json")
        r = subprocess.run([sys.executable, workload, plain_result], env=environment({}),
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(plain_result) as f:
            plain = json.load(f)
        trace, result, _ = self.run_workload("history", {}, workload="torch_history_workload.py")
        self.assertEqual(result["state"], "tracker, Python sites, in the program's memory history")
        self.assertIn("free_completed", plain["actions"])
        self.assertEqual(result["actions"], plain["actions"])
        line_of = self.line_finder("torch_history_workload.py")
        # At the peak, not at the end: `kept` lives until the interpreter's finalization, which
        # may free it (a block free the agent records) before the stream ends or after, so what
        # is live at the end depends on teardown order. The peak, the segment's growth with its
        # first block, holds `kept` either way.
        sites = self.report_json(trace)["devices"][0]["sites_at_peak"]
        tops = [(s["stack"][0]["function"], s["stack"][0]["line"]) for s in sites if s["stack"]]
        self.assertIn(("tensor", line_of("return torch.empty(")), tops, sites)

    def test_gradients_are_named_by_the_backward_call(self):
        """The autograd engine allocates gradients on a thread without Python frames: their site
        is "(autograd backward)" above the Python frames of the call that ran the pass."""
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        trace, result, _ = self.run_workload("backward", {},
                                             workload="torch_backward_workload.py")
        line_of = self.line_finder("torch_backward_workload.py")
        sites = self.report_json(trace)["devices"][0]["sites"]
        self.assertNotIn("fragscope_annotate_block_alloc", json.dumps(sites))
        backward = [s for s in sites
                    if s["stack"] and s["stack"][0]["function"] == "(autograd backward)"]
        self.assertEqual(len(backward), 1, sites)
        self.assertEqual((backward[0]["live_bytes"], backward[0]["count"]),
                         (result["grad_bytes"], 1))
        callers = [(f["function"], os.path.basename(f["file"]), f["line"])
                   for f in backward[0]["stack"][1:]]
        self.assertIn(("train_step", "torch_backward_workload.py", line_of("loss.backward()")),
                      callers)

    def check_oom_in_backward(self, name, extra_env):
        """An OOM raised inside loss.backward() happens on an autograd engine thread, without
        Python frames: its failed call is "(autograd backward)" above the line that called
        backward(), not the adapter's or CPython's frames."""
        trace, result, _ = self.run_workload(name, extra_env,
                                             workload="torch_backward_workload.py",
                                             args=["oom"])
        self.assertIsNotNone(result["oom"], "the gradient's allocation did not fail")
        line_of = self.line_finder("torch_backward_workload.py")
        ooms = self.report_json(trace)["ooms"]
        self.assertGreaterEqual(len(ooms), 1, ooms)
        stack = [(f.get("function"), os.path.basename(f.get("file") or ""), f.get("line"))
                 for f in ooms[-1]["stack"]]
        self.assertEqual(stack[0][0], "(autograd backward)", stack)
        self.assertEqual(stack[1], ("train_step", "torch_backward_workload.py",
                                    line_of("loss.backward()")), stack)

    def test_oom_in_backward_names_the_backward_call(self):
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        self.check_oom_in_backward("backward_oom", {})

    def test_oom_in_backward_names_the_backward_call_on_the_fallback(self):
        self.check_oom_in_backward("backward_oom_fallback", {"FRAGSCOPE_TORCH_ADAPTER": "fallback"})

    def attach_to_dormant(self, name, extra_env):
        """Starts torch_dormant_workload.py under `fragscope run --dormant`, attaches once its
        weights are made, has it make one tensor during the attach, detaches; returns the
        attach's sites ({(function, file, line) of the top frame, or None: (bytes, count)})."""
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        run_dir = os.path.join(WORK, name)
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
        env = environment(dict(extra_env, XDG_RUNTIME_DIR=run_dir))
        app = subprocess.Popen(
            [CLI, "run", "--dormant", "--", sys.executable,
             os.path.join(HERE, "torch_dormant_workload.py")],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        try:
            ready = app.stdout.readline()
            if ready != "ready\n":
                app.kill()
                self.fail("the workload did not start: " + app.stderr.read())
            report = os.path.join(run_dir, "report.json")
            attach = subprocess.Popen(
                [CLI, "attach", str(app.pid), "-o", os.path.join(run_dir, "t.fst"), "--format",
                 "json", "--report", report], env=env, stderr=subprocess.PIPE, text=True)
            # `run --dormant` became the program: its pid is the one to attach to.
            self.assertIn("collecting from pid %d" % app.pid, attach.stderr.readline())
            app.stdin.write("go\n")
            app.stdin.flush()
            self.assertEqual(app.stdout.readline(), "made\n")
            attach.send_signal(signal.SIGINT)  # detach
            _, err = attach.communicate(timeout=120)
            self.assertEqual(attach.returncode, 0, err)
        finally:
            app.stdin.close()
            app.wait(timeout=120)
            app.stdout.close()
            app.stderr.close()
        with open(report) as f:
            device = json.load(f)["devices"][0]
        sites = {}
        for site in device["sites"]:
            top = site["stack"][0] if site["stack"] else None
            key = (top["function"], os.path.basename(top.get("file") or ""),
                   top.get("line")) if top else None
            sites[key] = (site["live_bytes"], site["count"])
        return sites

    def test_an_attach_names_tensors_from_before_it_when_sites_were_asked_for(self):
        """A dormant agent records no Python sites by default (they cost PyTorch's stack
        gathering on every allocation); asked for with FRAGSCOPE_TORCH_SITES=python, the
        attach's report names the tensors made before the attach and during it by their line."""
        line_of = self.line_finder("torch_dormant_workload.py")
        weights = ("weights", "torch_dormant_workload.py", line_of("24 * MiB // 4"))
        activation = ("activation", "torch_dormant_workload.py", line_of("6 * MiB // 4"))
        named = self.attach_to_dormant("dormant-sites", {"FRAGSCOPE_TORCH_SITES": "python"})
        self.assertEqual(named.get(weights), (24 * MiB, 1), named)
        self.assertEqual(named.get(activation), (6 * MiB, 1), named)
        self.assertNotIn(None, named, "every block has a site")
        default = self.attach_to_dormant("dormant-default", {})
        self.assertNotIn(weights, default)
        self.assertNotIn(activation, default)
        self.assertEqual(default.get(None), (24 * MiB, 1), "made while dormant: no stack")

    def test_mp_spawn_workers_are_named_by_their_rank(self):
        # mp.spawn workers get their rank as an argument; no RANK variable for the agent to
        # read at start. The adapter reports it when init_process_group returns.
        job = os.path.join(WORK, "spawn")
        shutil.rmtree(job, ignore_errors=True)
        os.makedirs(job)
        report = os.path.join(job, "report.json")
        r = subprocess.run(
            [CLI, "run", "-o", os.path.join(job, "rank.fst"), "--format", "json", "--report",
             report, "--", sys.executable, os.path.join(HERE, "torch_spawn_workload.py"), job],
            env=environment({"FRAGSCOPE_TORCH_ADAPTER": "fallback"}), capture_output=True,
            text=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(report) as f:
            processes = json.load(f)["processes"]
        self.assertEqual(len(processes), 2, processes)
        for rank, p in enumerate(processes):  # in rank order
            process = p["report"]["process"]
            self.assertEqual((process.get("rank"), process.get("world_size")), (rank, 2), process)

    def test_expandable_segments(self):
        """expandable_segments:True: PyTorch reserves address space per pool and maps 2 or
        20 MiB pages into it as it grows (cuMemAddressReserve, cuMemCreate, cuMemMap), and on
        the OOM maps pages until the device is full before giving up."""
        if self.extension_error:
            self.fail("the adapter extension did not build:\n" + self.extension_error[-4000:])
        # Python sites off: the tensors' sites are then the frame walk's (below).
        trace, result, _ = self.run_workload(
            "expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                           "FRAGSCOPE_TORCH_SITES": "off"})
        self.assertEqual(result["state"], "tracker, Python sites off (FRAGSCOPE_TORCH_SITES=off)")
        self.assertIn("expandable_segments is enabled", result["oom"]["message"])
        self.assertEqual([m[0] for m in result["marks"]],
                         ["small", "odd", "whole", "filled", "holes", "freed_whole",
                          "transient", "after_oom", "end"])
        self.check_marks(trace, result)
        # Read as `fragscope report` does, without the option `run` passes: the trace itself
        # shows the segments grow in place.
        summary = self.check_oom_report(trace)
        # cuMemAddressReserve names no device: no "device -1" beside the GPU.
        self.assertEqual([d["device"] for d in summary["devices"]], [0])
        ooms = summary["ooms"]
        self.assertFalse(any("expandable_segments:True" in a for a in ooms[0]["advice"]),
                         ooms[0]["advice"])
        # Every block comes from the same frames in the adapter and c10 (whose code has no
        # frame pointers, so the walk ends there): one site, not one per tensor.
        live = ooms[0]["sites_at_failure"]
        self.assertEqual(len(live), 1, live)
        self.assertEqual(live[0]["live_bytes"], result["marks"][-2][2])

    def test_cuda_malloc_async_backend(self):
        """backend:cudaMallocAsync: no caching allocator (the adapter stands aside), every
        tensor a stream-ordered allocation from the device's default pool. The OOM comes while
        the pool keeps the freed tensors: PyTorch's own memory, not memory outside the
        process."""
        trace, result, _ = self.run_workload(
            "async", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        self.assertEqual(result["state"],
                         "not needed: backend:cudaMallocAsync, whose allocations the agent records")
        self.assertIsNotNone(result["oom"])
        summary = self.report_json(trace)
        self.assertEqual(summary["unmatched_events"], 0)
        ooms = summary["ooms"]
        self.assertGreaterEqual(len(ooms), 1, summary["failed_allocations"])
        self.assertEqual(ooms[0]["class"], "unusable_cache", ooms[0]["explanation"])
        self.assertEqual(ooms[0]["requested_bytes"], 300 * MiB)
        self.assertGreater(ooms[0]["pool_free_bytes"], 0)
        # After the OOM the pool has been sampled: fragscope's reserved is PyTorch's.
        fragscope = marks_in_trace(trace)
        by_label = {m[0]: m for m in result["marks"]}
        self.assertEqual(fragscope["after_oom"]["reserved"], by_label["after_oom"][1])

    def check_fallback(self, name, extra_env):
        """The workload on the fallback path (snapshot diffs): fragscope equals torch at every
        mark, the OOM is judged as on the primary path, and the snapshot dumped at exit
        imports to torch's figures there. Returns the workload's result."""
        snapshot = os.path.join(WORK, name + ".pickle")
        if os.path.exists(snapshot):
            os.remove(snapshot)
        env = {"FRAGSCOPE_TORCH_ADAPTER": "fallback", "FRAGSCOPE_TORCH_SNAPSHOT": snapshot}
        env.update(extra_env)
        trace, result, _ = self.run_workload(name, env)
        self.assertEqual(result["state"], "fallback (FRAGSCOPE_TORCH_ADAPTER=fallback): "
                                          "OOM observer, snapshot diffs, memory history")
        # The snapshot diffs forwarded before each mark: PyTorch's blocks, not opaque segments.
        self.check_marks(trace, result)
        # ... and before the OOM observer's failure: judged as on the primary path, with the
        # Python frames torch's memory history kept for each block as its site.
        self.check_python_sites(self.check_oom_report(trace)["ooms"][0], result)
        # The snapshot written at exit: PyTorch's own view, imported.
        imported = os.path.join(WORK, name + "-imported.fst")
        r = subprocess.run([CLI, "import", snapshot, "-o", imported], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        device = self.report_json(imported)["devices"][0]
        _, reserved, allocated = result["marks"][-1]
        self.assertEqual(device["reserved_bytes"], reserved)
        self.assertEqual(device["allocated_bytes"], allocated)
        return result

    def test_fallback_path(self):
        self.check_torch_ran(self.check_fallback("fallback", {}))

    def test_fallback_path_expandable_segments(self):
        result = self.check_fallback(
            "fallback-expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        self.assertIn("expandable_segments is enabled", result["oom"]["message"])


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    CLI, TRACE_MARKS, FAKE_LIB, ADAPTER_DIR, WORK = (os.path.abspath(a) for a in sys.argv[1:6])
    version = torch_version()
    if version is None:
        print("SKIP: %s cannot import torch; configure with -DFRAGSCOPE_TORCH_PYTHON=<a python "
              "with torch> (scripts/adapter/README.md)" % sys.executable)
        sys.exit(SKIP)
    print("torch %s from %s" % (version, sys.executable))
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + sys.argv[6:], verbosity=2)
