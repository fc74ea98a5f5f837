#!/usr/bin/env python3
"""Tests of scripts/adapter/sitecustomize.py that need no real torch and no GPU.

Each case starts a fresh python3 with the adapter first on PYTHONPATH (as `fragscope run` does),
sometimes with a stand-in `torch` package (tests only the adapter's hooks, not PyTorch) and
sometimes with the real libfragscope.so preloaded (its annotate symbols are what the adapter
looks for).

usage: test_adapter.py ADAPTER_DIR [AGENT_LIB [FRAGSCOPE_CLI]]   (libfragscope.so and the
       `fragscope` command, optional: the cases that need them are skipped without)
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

ADAPTER_DIR = None
AGENT_LIB = None
CLI = None

# A stand-in torch with CUDA: records what the adapter registers, runs nothing of its own.
FAKE_TORCH = textwrap.dedent('''
    class _C:
        observers = []
        @staticmethod
        def _cuda_getDeviceCount():
            return 1
        @staticmethod
        def _cuda_attach_out_of_memory_observer(fn):
            _C.observers.append(fn)

    class _Memory:
        history = []
        @staticmethod
        def _record_memory_history(*args, **kwargs):  # as keywords, in torch's order
            names = ("enabled", "context", "stacks", "max_entries")
            _Memory.history.append(dict(zip(names, args), **kwargs))
        @staticmethod
        def _dump_snapshot(path):
            with open(path, "wb") as f:
                f.write(b"snapshot")

    class cuda:
        lazy = []
        memory = _Memory
        @staticmethod
        def _lazy_call(fn):
            cuda.lazy.append(fn)

    __version__ = "0.0+fake"
''')

FAKE_TORCH_CPU = '__version__ = "0.0+cpu"\nclass _C:\n    pass\n'


class AdapterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, relative, text):
        path = os.path.join(self.dir, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return os.path.dirname(path)

    def run_python(self, code, path=(), env=None, preload=False):
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith("FRAGSCOPE_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
        environment["PYTHONPATH"] = os.pathsep.join([ADAPTER_DIR] + list(path))
        environment["PYTHONNOUSERSITE"] = "1"
        if preload:
            environment["LD_PRELOAD"] = AGENT_LIB
        environment.update(env or {})
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environment,
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result

    def test_inert_without_torch(self):
        r = self.run_python('''
            import sys, sitecustomize
            print(sitecustomize.STATE)
            print("torch" in sys.modules)
            try:
                import torch
            except ModuleNotFoundError:
                print("absent")
            print(sitecustomize.STATE)
        ''')
        self.assertEqual(r.stdout.split("\n")[:4], ["waiting for torch", "False", "absent",
                                                    "waiting for torch"])
        self.assertEqual(r.stderr, "")

    def test_it_is_the_sitecustomize_python_loads(self):
        r = self.run_python('import sitecustomize; print(sitecustomize.__file__)')
        self.assertEqual(os.path.dirname(os.path.abspath(r.stdout.strip())),
                         os.path.abspath(ADAPTER_DIR))

    def test_chains_the_next_sitecustomize_once(self):
        other = self.write("site/sitecustomize.py",
                           "import builtins\n"
                           "builtins.CHAIN_RUNS = getattr(builtins, 'CHAIN_RUNS', 0) + 1\n"
                           "print('chained', __name__)\n")
        r = self.run_python('''
            import builtins, sitecustomize
            print(builtins.CHAIN_RUNS, sitecustomize.CHAINED.__file__)
        ''', path=[other])
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "chained sitecustomize")
        runs, chained_file = lines[1].split()
        self.assertEqual(runs, "1")
        self.assertEqual(os.path.abspath(chained_file), os.path.join(other, "sitecustomize.py"))

    def test_a_failing_chained_sitecustomize_does_not_stop_the_program(self):
        other = self.write("site/sitecustomize.py", "raise RuntimeError('site broke')\n")
        r = self.run_python('import sitecustomize; print(sitecustomize.STATE)', path=[other])
        self.assertEqual(r.stdout.strip(), "waiting for torch")
        self.assertIn("site broke", r.stderr)

    def test_no_other_sitecustomize(self):
        r = self.run_python('import sitecustomize; print(sitecustomize.CHAINED)')
        self.assertEqual(r.stdout.strip(), "None")

    def test_torch_without_agent_registers_nothing(self):
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        r = self.run_python('''
            import torch, sitecustomize
            print(sitecustomize.STATE)
            print(len(torch.cuda.lazy))
        ''', path=[os.path.dirname(torch_dir)])
        self.assertEqual(r.stdout.splitlines(),
                         ["inactive: libfragscope.so is not loaded", "0"])

    def test_off_switch(self):
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        r = self.run_python('''
            import sys, torch, sitecustomize
            print(sitecustomize.STATE)
            print(any(type(f).__name__ == "_TorchWatcher" for f in sys.meta_path))
        ''', path=[os.path.dirname(torch_dir)], env={"FRAGSCOPE_TORCH_ADAPTER": "off"},
            preload=AGENT_LIB is not None)
        self.assertEqual(r.stdout.splitlines(), ["off: FRAGSCOPE_TORCH_ADAPTER=off", "False"])

    def need_agent(self):
        if not AGENT_LIB or not os.path.exists(AGENT_LIB):
            self.skipTest("libfragscope.so not given")

    def test_ctrl_c_still_raises_keyboard_interrupt_after_a_subprocess(self):
        # Python's subprocess forks with vfork: the child shares the parent's memory and resets
        # its signals there before exec. The agent, which keeps the program's handlers behind
        # its own dispatcher, lost them to the child, and a Ctrl-C then killed the program.
        self.need_agent()
        r = self.run_python('''
            import os, signal, subprocess, time
            subprocess.run(["true"], check=True)
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
                print("no KeyboardInterrupt")
            except KeyboardInterrupt:
                print("KeyboardInterrupt")
        ''', env={"FRAGSCOPE_OUTPUT": os.path.join(self.dir, "t.fst")}, preload=True)
        self.assertEqual(r.stdout.strip(), "KeyboardInterrupt")

    def test_cpu_only_torch_with_agent(self):
        self.need_agent()
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH_CPU)
        r = self.run_python('import torch, sitecustomize; print(sitecustomize.STATE)',
                            path=[os.path.dirname(torch_dir)], preload=True)
        self.assertEqual(r.stdout.strip(), "inactive: torch without CUDA")

    def test_with_agent_waits_for_cuda_then_falls_back(self):
        self.need_agent()
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        snapshot = os.path.join(self.dir, "snap.%p.pickle")
        r = self.run_python('''
            import os, torch, sitecustomize
            print(sitecustomize.STATE)
            assert len(torch.cuda.lazy) == 1
            torch.cuda.lazy[0]()              # what torch.cuda._lazy_init does
            print(sitecustomize.STATE)
            print(len(torch._C.observers), torch.cuda.memory.history)
            torch._C.observers[0](0, 1 << 30, 16 << 30, 1 << 20)   # an OOM reported by torch
            print(os.path.exists(sitecustomize._snapshot_path()))
            sitecustomize.mark("step 1")
        ''', path=[os.path.dirname(torch_dir)], preload=True,
            env={"FRAGSCOPE_TORCH_ADAPTER": "fallback", "FRAGSCOPE_TORCH_SNAPSHOT": snapshot})
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "waiting for CUDA")
        self.assertEqual(lines[1], "fallback (FRAGSCOPE_TORCH_ADAPTER=fallback): "
                                   "OOM observer, memory history")
        self.assertEqual(lines[2], "1 [{'max_entries': 100000}]")
        self.assertEqual(lines[3], "True")

    def test_cuda_malloc_async_backend_needs_no_adapter(self):
        # backend:cudaMallocAsync: no caching allocator to annotate; the agent records every
        # cudaMallocAsync itself. Nothing is registered with torch, nothing is built.
        self.need_agent()
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH + textwrap.dedent('''
            cuda.get_allocator_backend = staticmethod(lambda: "cudaMallocAsync")
        '''))
        r = self.run_python('''
            import torch, sitecustomize
            torch.cuda.lazy[0]()
            print(sitecustomize.STATE)
            print(len(torch._C.observers), torch.cuda.memory.history)
            sitecustomize.mark("step 1")
        ''', path=[os.path.dirname(torch_dir)], preload=True)
        self.assertEqual(r.stdout.splitlines(), [
            "not needed: backend:cudaMallocAsync, whose allocations the agent records",
            "0 []"])
        self.assertEqual(r.stderr, "")

    def test_extension_that_cannot_build_falls_back(self):
        self.need_agent()
        # The stand-in torch has no torch.utils.cpp_extension: the build fails at once.
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        r = self.run_python('''
            import torch, sitecustomize
            torch.cuda.lazy[0]()
            print(sitecustomize.STATE)
        ''', path=[os.path.dirname(torch_dir)], preload=True)
        self.assertTrue(r.stdout.startswith("fallback (extension unavailable: "), r.stdout)
        self.assertIn("falling back", r.stderr)

    # A stand-in torch.utils.cpp_extension whose load() "builds" by writing the module file,
    # as the real one leaves it in the build folder, and counts its builds.
    FAKE_CPP_EXTENSION = textwrap.dedent('''
        import os
        def load(name, sources, extra_include_paths, build_directory, with_cuda, verbose):
            path = os.path.join(build_directory, name + ".so")
            if not os.path.exists(path):
                open(path, "w").close()
                with open(os.path.join(build_directory, "builds"), "a") as f:
                    f.write("built\\n")
            return object()
    ''')

    def fake_torch_that_builds(self):
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        self.write("pkgs/torch/utils/__init__.py", "")
        self.write("pkgs/torch/utils/cpp_extension.py", self.FAKE_CPP_EXTENSION)
        return os.path.dirname(torch_dir)

    def test_the_first_build_says_so_and_a_cached_one_is_silent(self):
        pkgs = self.fake_torch_that_builds()
        cache = os.path.join(self.dir, "cache")
        code = '''
            import torch, sitecustomize
            sitecustomize._build_extension(torch)
        '''
        first = self.run_python(code, path=[pkgs], env={"FRAGSCOPE_CACHE_DIR": cache})
        self.assertEqual(first.stderr, "fragscope: building the PyTorch adapter extension (once, "
                         "about a minute; `fragscope torch-setup` does it ahead of time)\n")
        again = self.run_python(code, path=[pkgs], env={"FRAGSCOPE_CACHE_DIR": cache})
        self.assertEqual(again.stderr, "")
        with open(os.path.join(cache, "torch-0_0_fake", "builds")) as f:
            self.assertEqual(f.read(), "built\n")

    def torch_setup(self, pkgs, cache, python=None):
        if not os.path.exists(CLI):
            # A partial build (the sanitizer stage builds its test targets only).
            self.skipTest("the fragscope command is not built here: " + CLI)
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith("FRAGSCOPE_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
        environment.update({"PYTHONPATH": pkgs, "PYTHONNOUSERSITE": "1",
                            "FRAGSCOPE_CACHE_DIR": cache, "FRAGSCOPE_ADAPTER_DIR": ADAPTER_DIR})
        return subprocess.run([CLI, "torch-setup", "--python", python or sys.executable],
                              env=environment, capture_output=True, text=True, timeout=60)

    def test_torch_setup_builds_into_the_cache_the_adapter_uses(self):
        if CLI is None:
            self.skipTest("no fragscope command given")
        pkgs = self.fake_torch_that_builds()
        cache = os.path.join(self.dir, "cache")
        built = os.path.join(cache, "torch-0_0_fake")
        r = self.torch_setup(pkgs, cache)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("built in %s" % built, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(built, "fragscope_torch_adapter_0_0_fake.so")))
        # The adapter at run time finds it there: no build, no notice.
        run = self.run_python('''
            import torch, sitecustomize
            sitecustomize._build_extension(torch)
        ''', path=[pkgs], env={"FRAGSCOPE_CACHE_DIR": cache})
        self.assertEqual(run.stderr, "")
        again = self.torch_setup(pkgs, cache)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("already built in %s" % built, again.stderr)
        with open(os.path.join(built, "builds")) as f:
            self.assertEqual(f.read(), "built\n")

    def test_torch_setup_without_torch_says_why(self):
        if CLI is None:
            self.skipTest("no fragscope command given")
        r = self.torch_setup(os.path.join(self.dir, "empty"), os.path.join(self.dir, "cache"))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("%s cannot import torch" % sys.executable, r.stderr)
        self.assertIn("--python PATH", r.stderr)
        missing = self.torch_setup(self.dir, self.dir, python=os.path.join(self.dir, "nopython"))
        self.assertEqual(missing.returncode, 3, missing.stderr)
        self.assertIn("cannot run '%s'" % os.path.join(self.dir, "nopython"), missing.stderr)

    def test_oom_observer_reaches_the_agent_trace(self):
        self.need_agent()
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        trace = os.path.join(self.dir, "trace.fst")
        self.run_python('''
            import torch, sitecustomize
            torch.cuda.lazy[0]()
            torch._C.observers[0](0, 123456789, 16 << 30, 1 << 20)
        ''', path=[os.path.dirname(torch_dir)], preload=True,
            env={"FRAGSCOPE_TORCH_ADAPTER": "fallback", "FRAGSCOPE_OUTPUT": trace})
        with open(trace, "rb") as f:
            data = f.read()
        self.assertTrue(data.startswith(b"FRAGSCP\x01"), data[:16])
        # FailedAlloc.size = 123456789 as a varint field 7 somewhere in the frames.
        size = 123456789
        varint = bytearray()
        while True:
            byte = size & 0x7F
            size >>= 7
            varint.append(byte | (0x80 if size else 0))
            if not size:
                break
        self.assertIn(bytes([7 << 3]) + bytes(varint), data)


    # A stand-in torch.distributed (imported by torch's __init__, as the real one is):
    # init_process_group keeps the rank it was given.
    FAKE_DISTRIBUTED = textwrap.dedent('''
        group = {}
        def is_available():
            return True
        def is_initialized():
            return bool(group)
        def init_process_group(backend=None, rank=-1, world_size=-1, **kwargs):
            group.update(rank=rank, world_size=world_size)
        def get_rank():
            return group["rank"]
        def get_world_size():
            return group["world_size"]
    ''')

    def report(self, trace):
        import json
        r = subprocess.run([CLI, "report", "--format", "json", trace], capture_output=True,
                           text=True, timeout=60)
        self.assertIn(r.returncode, (0, 1), r.stdout + r.stderr)
        return json.loads(r.stdout)

    def test_init_process_group_names_the_process_by_its_rank(self):
        # An mp.spawn worker: no RANK variable; its rank is init_process_group's argument.
        self.need_agent()
        if CLI is None:
            self.skipTest("no fragscope command given")
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH + "from . import distributed\n")
        self.write("pkgs/torch/distributed/__init__.py", self.FAKE_DISTRIBUTED)
        trace = os.path.join(self.dir, "trace.fst")
        code = '''
            import ctypes
            import torch.distributed as dist  # the usual spelling
            dist.init_process_group("nccl", rank=2, world_size=4)
            ctypes.CDLL(None).fragscope_mark(b"step 1")  # an event after it in every case
        '''
        env = {"FRAGSCOPE_OUTPUT": trace}
        for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
            env[name] = ""  # not a number: passed over, as if unset
        self.run_python(code, path=[os.path.dirname(torch_dir)], preload=True, env=env)
        process = self.report(trace)["process"]
        self.assertEqual(process.get("rank"), 2, process)
        self.assertEqual(process.get("world_size"), 4, process)
        with open(trace, "rb") as f:
            self.assertEqual(f.read().count(b"rank 2 of 4"), 1)

        # torchrun: the launcher's RANK is already in the Hello; the same rank again adds no mark.
        trace = os.path.join(self.dir, "torchrun.fst")
        self.run_python(code, path=[os.path.dirname(torch_dir)], preload=True,
                        env=dict(env, FRAGSCOPE_OUTPUT=trace, RANK="2", WORLD_SIZE="4"))
        process = self.report(trace)["process"]
        self.assertEqual((process.get("rank"), process.get("world_size")), (2, 4), process)
        with open(trace, "rb") as f:
            self.assertNotIn(b"rank 2 of 4", f.read())

        # Without the agent the wrapper is not even installed: the program's own function runs.
        r = self.run_python('''
            import torch
            print(getattr(torch.distributed.init_process_group, "_fragscope_rank", False))
        ''', path=[os.path.dirname(torch_dir)])
        self.assertEqual(r.stdout.strip(), "False")

    def test_python_sites_flush_before_the_oom_is_reported(self):
        # The extension stood in by a recorder: what sitecustomize asks of torch and of it.
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        code = '''
            import torch, sitecustomize
            calls = []
            class Extension:
                def sites_supported(self): return True
                def flush_sites(self): calls.append("flush")
                def report_oom_from_observer(self, on): calls.append("observer %s" % on)
                def report_oom(self, size, device, frames):
                    calls.append("oom %d %d %s" % (size, device, [f[0] for f in frames[:2]]))
            print(sitecustomize._install_python_sites(torch, Extension()))
            print(torch.cuda.memory.history, len(torch._C.observers))
            def train_step():
                torch._C.observers[-1](0, 1 << 30, 16 << 30, 1 << 20)  # torch's OOM callback
            if torch._C.observers:
                train_step()
            sitecustomize.mark("step 1")  # no agent: a no-op, no flush
            print(calls)
        '''
        # No flushes of its own here (FRAGSCOPE_TORCH_SITES_EVERY_S=0): only the OOM's.
        r = self.run_python(code, path=[os.path.dirname(torch_dir)],
                            env={"FRAGSCOPE_TORCH_SITES_EVERY_S": "0"})
        self.assertEqual(r.stdout.splitlines(), [
            "Python sites",
            "[{'enabled': 'state', 'context': 'alloc', 'stacks': 'python'}] 1",
            "['observer True', 'flush', \"oom 1073741824 0 ['train_step', '<module>']\"]"])
        # Besides marks, OOMs and exit: now and then, from a thread of its own.
        r = self.run_python('''
            import time, torch, sitecustomize
            flushes = []
            class Extension:
                def sites_supported(self): return True
                def flush_sites(self): flushes.append(time.monotonic())
                def report_oom_from_observer(self, on): pass
            sitecustomize._install_python_sites(torch, Extension())
            deadline = time.monotonic() + 20
            while len(flushes) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            print(len(flushes) >= 2)
        ''', path=[os.path.dirname(torch_dir)], env={"FRAGSCOPE_TORCH_SITES_EVERY_S": "0.05"})
        self.assertEqual(r.stdout.splitlines(), ["True"])
        # And after each new peak of reserved memory, at once: the extension's pipe turns
        # readable (here the test writes to it, as the tracker does). No periodic flushes
        # (FRAGSCOPE_TORCH_SITES_EVERY_S=0), so nothing happens before that.
        r = self.run_python('''
            import os, time, torch, sitecustomize
            flushes = []
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            class Extension:
                def sites_supported(self): return True
                def flush_sites(self): flushes.append(time.monotonic())
                def report_oom_from_observer(self, on): pass
                def growth_fd(self): return read_end
            sitecustomize._install_python_sites(torch, Extension())
            time.sleep(0.3)
            print("before the peak:", len(flushes))
            os.write(write_end, b"ppp")  # three peaks before the thread wakes: one flush or more
            deadline = time.monotonic() + 20
            while not flushes and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)
            print("after it:", len(flushes) >= 1, len(flushes) <= 3)
            seen = len(flushes)
            os.write(write_end, b"p")
            deadline = time.monotonic() + 20
            while len(flushes) == seen and time.monotonic() < deadline:
                time.sleep(0.01)
            print("after the next:", len(flushes) > seen)
        ''', path=[os.path.dirname(torch_dir)], env={"FRAGSCOPE_TORCH_SITES_EVERY_S": "0"})
        self.assertEqual(r.stdout.splitlines(),
                         ["before the peak: 0", "after it: True True", "after the next: True"],
                         r.stderr)
        for env, state in (({"FRAGSCOPE_TORCH_SITES": "off"},
                            "Python sites off (FRAGSCOPE_TORCH_SITES=off)"),
                           ({"FRAGSCOPE_DORMANT": "1"},
                            "Python sites off (FRAGSCOPE_TORCH_SITES=off by default while dormant)")):
            r = self.run_python(code, path=[os.path.dirname(torch_dir)], env=env)
            self.assertEqual(r.stdout.splitlines(), [state, "[] 0", "[]"])


    def test_backward_passes_are_marked_with_their_callers_frames(self):
        # The autograd engine allocates on threads without Python frames: each backward pass is
        # marked with the frames of its call, around it, even when it raises.
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH + textwrap.dedent('''
            class autograd:
                @staticmethod
                def backward(tensors, grad_tensors=None):
                    if tensors == "bad":
                        raise RuntimeError("no graph")
                    return "ran " + tensors
                @staticmethod
                def grad(outputs, inputs):
                    if outputs == "penalty":  # a grad inside a backward pass (a hook's)
                        return autograd.backward("inner")
                    return "grads of " + outputs
        '''))
        code = '''
            import torch, sitecustomize
            calls = []
            class Extension:
                running = 0
                sites = {}  # frames -> site, as the agent interns them
                def begin_backward(self, frames):
                    site = Extension.sites.setdefault(tuple(frames), len(Extension.sites) + 1)
                    calls.append(("begin", site, frames[0][0], frames[0][2]))
                    interrupted, Extension.running = Extension.running, site
                    return site, interrupted
                def end_backward(self, site, interrupted):
                    calls.append(("end", site, interrupted))
                    Extension.running = interrupted
            sitecustomize._watch_backward(torch, Extension())
            sitecustomize._watch_backward(torch, Extension())  # once only
            def train_step():
                return torch.autograd.backward("loss")
            print(train_step())
            print(torch.autograd.grad("loss", "w"))
            try:
                torch.autograd.backward("bad")
            except RuntimeError as error:
                print(error)
            print(calls)
            calls.clear()
            print(torch.autograd.grad("penalty", "w"))
            print([c[:3] for c in calls])
            print(torch.autograd.backward.__name__)
        '''
        r = self.run_python(code, path=[os.path.dirname(torch_dir)])
        self.assertEqual(r.stdout.splitlines(), [
            "ran loss",
            "grads of loss",
            "no graph",
            "[('begin', 1, 'train_step', 18), ('end', 1, 0), ('begin', 2, '<module>', 20), "
            "('end', 2, 0), ('begin', 3, '<module>', 22), ('end', 3, 0)]",
            "ran inner",
            # The inner pass ends by resuming the one it interrupted. Its site is the outer one's:
            # torch's grad and the adapter's wrapper are left out, leaving the program's line.
            "[('begin', 4, '<module>'), ('begin', 4, '<module>'), ('end', 4, 4), ('end', 4, 0)]",
            "backward",
        ], r.stderr)

    def test_the_programs_own_memory_history_is_kept(self):
        # PyTorch keeps one history setting: a program's own (its trace ring for
        # _dump_snapshot) must survive the adapter's, before CUDA starts and after.
        torch_dir = self.write("pkgs/torch/__init__.py", FAKE_TORCH)
        code = '''
            import torch, sitecustomize
            class Extension:
                def sites_supported(self): return True
                def flush_sites(self): pass
                def report_oom_from_observer(self, on): pass
            sitecustomize._watch_memory_history(torch)
            torch.cuda.memory._record_memory_history(max_entries=1000, stacks="all")
            print(sitecustomize._install_python_sites(torch, Extension()))
            torch.cuda.memory._record_memory_history(None)  # the program stops its recording
            torch.cuda.memory._record_memory_history("all", None)
            torch.cuda.memory._record_memory_history(False)  # the legacy form's off
            for request in torch.cuda.memory.history:
                print(sorted(request.items()))
        '''
        r = self.run_python(code, path=[os.path.dirname(torch_dir)],
                            env={"FRAGSCOPE_TORCH_SITES_EVERY_S": "0"})
        self.assertEqual(r.stdout.splitlines(), [
            "Python sites, in the program's memory history",
            "[('max_entries', 1000), ('stacks', 'all')]",  # the program's
            "[('max_entries', 1000), ('stacks', 'all')]",  # the adapter's: it has all it needs
            # Off, as far as the program can tell (no trace ring); the sites keep their contexts
            # (PyTorch's default context is "all").
            "[('enabled', 'state')]",
            "[('context', 'alloc'), ('enabled', 'all')]",
            "[('context', 'alloc'), ('enabled', 'state'), ('stacks', 'python')]",
        ], r.stderr)
        # With sites off, the program's requests go through as they are.
        r = self.run_python(code, path=[os.path.dirname(torch_dir)],
                            env={"FRAGSCOPE_TORCH_SITES": "off"})
        self.assertEqual(r.stdout.splitlines(), [
            "Python sites off (FRAGSCOPE_TORCH_SITES=off)",
            "[('max_entries', 1000), ('stacks', 'all')]",
            "[('enabled', None)]",
            "[('context', None), ('enabled', 'all')]",
            "[('enabled', False)]",
        ], r.stderr)


class SnapshotDiffTest(unittest.TestCase):
    """The fallback's snapshot diff (_SnapshotForwarder) against a recording stand-in for the
    agent's annotate API: which events, in which order, for which snapshot changes."""

    CODE = textwrap.dedent('''
        import json, sys, sitecustomize as s
        steps = json.load(sys.stdin)
        class Api:
            log = []
            def __getattr__(self, name):
                return lambda *args: Api.log.append(
                    [name] + [a.decode() if isinstance(a, bytes) else a for a in args])
        class Cuda:
            segments, frees, allocs = [], 0, 0
            @staticmethod
            def memory_snapshot(include_traces=True):
                return Cuda.segments
            @staticmethod
            def memory_stats(device):
                return {"num_device_free": Cuda.frees, "num_device_alloc": Cuda.allocs}
        class Torch:
            cuda = Cuda
        forwarder = s._SnapshotForwarder(Torch, Api())
        for segments, frees, allocs in steps:
            Cuda.segments, Cuda.frees, Cuda.allocs = segments, frees, allocs
            Api.log.append("sync")
            forwarder.sync("test")
        print(json.dumps(Api.log))
    ''')

    def diff(self, steps):
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith("FRAGSCOPE_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
        environment["PYTHONPATH"] = ADAPTER_DIR
        import json
        r = subprocess.run([sys.executable, "-c", self.CODE], input=json.dumps(steps),
                           env=environment, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "")
        log = json.loads(r.stdout)
        out, current = [], None
        for entry in log:
            if entry == "sync":
                current = []
                out.append(current)
            else:
                current.append(tuple(entry))
        return out

    @staticmethod
    def segment(address, blocks, stream=0, pool=(0, 0), device=0):
        return {"device": device, "address": address, "stream": stream,
                "segment_pool_id": list(pool),
                "total_size": sum(size for size, _ in blocks), "blocks": [
                    {"address": address + sum(size for size, _ in blocks[:i]), "size": size,
                     "state": state} for i, (size, state) in enumerate(blocks)]}

    def test_blocks_frees_before_allocs_pending_and_blockless_segments(self):
        A, B, MiB = 1 << 32, 2 << 32, 1 << 20
        seg = self.segment
        steps = [
            # a 1 KiB block in a small segment; a large segment with nothing in it
            [[seg(A, [(1024, "active_allocated"), (2 * MiB - 1024, "inactive")]),
              seg(B, [(20 * MiB, "inactive")], stream=7, pool=(3, 0))], 0, 2],
            # the 1 KiB block freed and a 4 KiB one at its address; a pending block in B
            [[seg(A, [(4096, "active_allocated"), (2 * MiB - 4096, "inactive")]),
              seg(B, [(6 * MiB, "active_pending_free"), (14 * MiB, "inactive")], stream=7,
                  pool=(3, 0))], 0, 2],
            # nothing changed
            [[seg(A, [(4096, "active_allocated"), (2 * MiB - 4096, "inactive")]),
              seg(B, [(6 * MiB, "active_pending_free"), (14 * MiB, "inactive")], stream=7,
                  pool=(3, 0))], 0, 2],
            # the pending free completed and B was given back, nothing taken (as PyTorch
            # releases its cache before an OOM): A's block cannot have moved
            [[seg(A, [(4096, "active_allocated"), (2 * MiB - 4096, "inactive")])], 1, 2],
            # memory given back and taken: A may be a new segment at the same address, and its
            # block a new block
            [[seg(A, [(4096, "active_allocated"), (2 * MiB - 4096, "inactive")])], 2, 3],
        ]
        pool3 = 3 | (1 << 63)
        # Every sync ends with the mark that says the blocks were just brought up to date, an
        # empty one too (the state is known there all the same).
        synced = ("blocks_synced", "PyTorch blocks synced (test)")
        self.assertEqual(self.diff(steps), [
            [("block_alloc", A, 1024, 0, 0, 0),
             ("block_alloc", B, 0, 0, 7, pool3), ("block_free", B, 0, 7), synced],
            [("block_free", A, 0, 0),
             ("block_alloc", A, 4096, 0, 0, 0),
             ("block_alloc", B, 6 * MiB, 0, 7, pool3), ("block_free_pending", B, 0, 7), synced],
            [synced],
            [("block_free", B, 0, 7), synced],
            [("block_free", A, 0, 0), ("block_alloc", A, 4096, 0, 0, 0), synced],
        ])

    def test_allocated_then_pending_then_reused(self):
        A, MiB = 1 << 32, 1 << 20
        seg = self.segment
        steps = [
            [[seg(A, [(MiB, "active_allocated"), (MiB, "inactive")])], 0, 1],
            [[seg(A, [(MiB, "active_pending_free"), (MiB, "inactive")])], 0, 1],
            [[seg(A, [(MiB, "active_allocated"), (MiB, "inactive")])], 0, 1],
        ]
        synced = ("blocks_synced", "PyTorch blocks synced (test)")
        self.assertEqual(self.diff(steps), [
            [("block_alloc", A, MiB, 0, 0, 0), synced],
            [("block_free_pending", A, 0, 0), synced],
            [("block_free", A, 0, 0), ("block_alloc", A, MiB, 0, 0, 0), synced],
        ])


    def test_new_blocks_get_their_python_frames_as_site(self):
        # torch's memory history gives each block the frames of its allocation; the Python ones
        # (innermost first) become its site, the C++ ones are left out; a block with none keeps
        # no site; a block already forwarded is not sent again.
        A, MiB = 1 << 32, 1 << 20
        segment = self.segment(A, [(MiB, "active_allocated"), (MiB, "active_allocated")])
        segment["blocks"][0]["frames"] = [
            {"name": "at::empty_cuda", "filename": "EmptyTensor.cpp", "line": 30},
            {"name": "forward", "filename": "/srv/model.py", "line": 42},
            {"name": "<module>", "filename": "train.py", "line": 7}]
        segment["blocks"][1]["frames"] = [
            {"name": "c10::alloc", "filename": "Alloc.cpp", "line": 1}]
        synced = ("blocks_synced", "PyTorch blocks synced (test)")
        self.assertEqual(self.diff([[[segment], 0, 1], [[segment], 0, 1]]), [
            [("block_alloc", A, MiB, 0, 0, 0),
             ("block_site_frames", A, 0, [["forward", "/srv/model.py", 42],
                                          ["<module>", "train.py", 7]]),
             ("block_alloc", A + MiB, MiB, 0, 0, 0), synced],
            [synced],
        ])

class ScriptSyntaxTest(unittest.TestCase):
    """scripts/gpu-check only runs on a GPU machine; here it must at least parse."""

    def test_gpu_check_parses(self):
        script = os.path.join(ADAPTER_DIR, "..", "gpu-check")
        r = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.access(script, os.X_OK), "gpu-check is not executable")
        # The Python programs it writes out (heredocs ending in a PY line) must compile.
        import re
        text = open(script).read()
        blocks = re.findall(r"cat > \"\$WORK/(\w+\.py)\" <<'PY'\n(.*?)\nPY\n", text, re.S)
        self.assertEqual(sorted(name for name, _ in blocks),
                         ["compare.py", "compare_native.py", "workload.py"])
        for name, body in blocks:
            compile(body, name, "exec")

    def test_adapter_compiles(self):
        with open(os.path.join(ADAPTER_DIR, "sitecustomize.py")) as f:
            compile(f.read(), "sitecustomize.py", "exec")


if __name__ == "__main__":
    ADAPTER_DIR = os.path.abspath(sys.argv[1])
    if len(sys.argv) > 2:
        AGENT_LIB = os.path.abspath(sys.argv[2])
    if len(sys.argv) > 3:
        CLI = os.path.abspath(sys.argv[3])
    unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
