"""fragscope's PyTorch adapter, loaded by Python at start-up as `sitecustomize`.

`fragscope run` puts this directory first on PYTHONPATH. Python then imports this module at
start-up instead of any other `sitecustomize`; that one (the next on sys.path) is run right away,
so a site's own customisation keeps working.

What it does, and only in a process the fragscope agent (libfragscope.so) is preloaded into:
once the program imports torch and torch initialises CUDA, it makes PyTorch's caching-allocator
blocks visible to the agent, so the collector sees blocks and free ranges inside PyTorch's
segments instead of opaque segments (and when torch.distributed.init_process_group returns, it
tells the agent the process's rank, which an mp.spawn worker has in no launcher variable):

- primary: a small C++ extension (fragscope_torch_adapter.cpp), built with
  torch.utils.cpp_extension.load against the installed torch and cached per torch version, that
  attaches c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker and forwards block
  alloc/free and OOM events to the agent's annotate API. It runs in C++ under the allocator's
  lock and never takes the GIL.
- fallback (no compiler or CUDA headers, a torch without the tracker, the cudaMallocAsync
  backend): at each mark (mark() below), at each OOM (PyTorch's OOM observer) and at exit, it
  takes torch.cuda.memory_snapshot(), diffs it against the blocks it forwarded before, and
  forwards the difference to the agent's annotate API through ctypes (_SnapshotForwarder): the
  same block events the extension sends, only coarser. The state is exact at marks, OOMs and
  exit; blocks that live and die between two of them are never seen. torch's memory history is
  also recorded and dumped as a snapshot at exit and at each OOM, for `fragscope import`.

It never imports torch itself, never initialises CUDA, and does nothing when torch is absent,
when torch has no CUDA, or when the agent is not loaded. Any error inside the adapter is reported
on stderr in one line and swallowed: the program runs as it would without it.

Environment:
  FRAGSCOPE_TORCH_ADAPTER   auto (default) | fallback (skip the extension) | off
  FRAGSCOPE_TORCH_SITES     python (the tracker reports each block's Python frames, through
                            torch's own memory-history recording; the default unless the agent
                            is dormant, FRAGSCOPE_DORMANT=1) | off
  FRAGSCOPE_TORCH_SITES_EVERY_S  seconds between site reports besides marks, OOMs, new
                            peaks of reserved memory and exit (default 5; 0: none)
  FRAGSCOPE_CACHE_DIR       where built extensions are kept (default ~/.cache/fragscope)
  FRAGSCOPE_INCLUDE_DIR     folder holding fragscope/annotate.h (default: this checkout's, or
                            the installed include/ beside share/)
  FRAGSCOPE_TORCH_SNAPSHOT  fallback snapshot path (default: FRAGSCOPE_OUTPUT + .torch.pickle;
                            %p is the pid)
"""

import os
import sys
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))

# What the adapter did, for tests and for `python -c "import sitecustomize as s; print(s.STATE)"`.
STATE = "waiting for torch"
CHAINED = None  # the sitecustomize module this one ran, if any
# Set once Python sites are reported as soon as reserved memory peaks: at CUDA's initialisation,
# after PyTorch's symbolizer is warmed up (its first use takes seconds). Never set with sites
# off.
SITES_READY = threading.Event()


def _warn(message):
    sys.stderr.write("fragscope: %s\n" % message)


def _chain_next_sitecustomize():
    """Runs the `sitecustomize` this module hides: the first one on sys.path outside this folder."""
    import importlib.machinery
    import importlib.util

    def outside(entry):
        return os.path.abspath(entry or os.getcwd()) != _HERE

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [p for p in sys.path if outside(p)])
    if spec is None or spec.loader is None or spec.origin == __file__:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # as site.py does for its own sitecustomize
        _warn("error in the chained sitecustomize %s: %r" % (spec.origin, error))
    return module


def _agent():
    """The process's global symbols (ctypes), or None when libfragscope.so is not loaded."""
    import ctypes

    process = ctypes.CDLL(None)
    try:
        process.fragscope_mark
    except AttributeError:
        return None
    return process


def mark(label):
    """A label in the fragscope timeline (e.g. "step 12"); a no-op without the agent.

    On the fallback path it first forwards PyTorch's blocks as they are now (a snapshot diff),
    so that fragscope's state at the mark is PyTorch's."""
    agent = _agent()
    if agent is not None:
        forwarder = _FORWARDER
        if forwarder is not None:
            forwarder.sync("mark")
        extension = _EXTENSION
        if extension is not None:
            _flush_sites(extension)
        agent.fragscope_mark(str(label).encode("utf-8", "replace"))


def _load_diff_module():
    """fragscope_torch_diff.py beside this file, loaded by path (this folder may not be on
    sys.path when sitecustomize is run some other way)."""
    import importlib.util

    name = "fragscope_torch_diff"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


_diff = _load_diff_module()
_pool_id = _diff.pool_id
_AgentApi = _diff.AgentApi
_SnapshotForwarder = _diff.SnapshotForwarder


_FORWARDER = None  # the fallback's _SnapshotForwarder, once installed
_EXTENSION = None  # the tracker's extension, once it reports Python sites

# The program's own torch.cuda.memory._record_memory_history requests. PyTorch keeps one
# setting, so the adapter's would replace a program's (its trace ring for _dump_snapshot, its
# C++ stacks): the adapter watches the function instead (_watch_memory_history) and, with Python
# sites on, adds to the program's request only what the sites need.
_HISTORY_PARAMS = ("enabled", "context", "stacks", "max_entries", "device", "clear_history")
_HISTORY_ASKED = None  # the latest request as keyword arguments; "other" when not readable
_HISTORY_ORIGINAL = None  # PyTorch's function, once wrapped
_SITES_ON = False  # Python sites installed: requests are merged from then on


def _set_state(state):
    global STATE
    STATE = state


def _include_dir():
    configured = os.environ.get("FRAGSCOPE_INCLUDE_DIR")
    # The source tree's (scripts/adapter -> interpose/include), or an install's or a package's
    # (share/fragscope/adapter -> include).
    candidates = [configured] if configured else [
        os.path.join(_HERE, "..", "..", "interpose", "include"),
        os.path.join(_HERE, "..", "..", "..", "include")]
    for path in candidates:
        if os.path.isfile(os.path.join(path, "fragscope", "annotate.h")):
            return os.path.abspath(path)
    return None


def _extension_place(torch):
    """The extension's module name and the folder it is built into and loaded from: one per
    torch version, under FRAGSCOPE_CACHE_DIR (default $XDG_CACHE_HOME/fragscope or
    ~/.cache/fragscope). `fragscope torch-setup` builds into the same place."""
    import re

    version = re.sub(r"[^A-Za-z0-9]", "_", torch.__version__)
    cache_root = os.environ.get("FRAGSCOPE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fragscope")
    return "fragscope_torch_adapter_" + version, os.path.join(cache_root, "torch-" + version)


def _extension_built(name, build_dir):
    """Whether cpp_extension.load will load the module without compiling: it is there and newer
    than its source (ninja rebuilds it otherwise)."""
    try:
        built = os.path.getmtime(os.path.join(build_dir, name + ".so"))
        return built >= os.path.getmtime(os.path.join(_HERE, "fragscope_torch_adapter.cpp"))
    except OSError:
        return False


_BUILD_NOTICE = ("building the PyTorch adapter extension (once, about a minute; "
                 "`fragscope torch-setup` does it ahead of time)")


def _build_extension(torch, notice=_BUILD_NOTICE):
    """Builds (or loads from the cache) the C++ extension for this torch version. A build that
    is not cached yet says so first in one line (`notice`): it takes about a minute, silent
    otherwise, and would look like a hang."""
    from torch.utils import cpp_extension

    include = _include_dir()
    if include is None:
        raise RuntimeError("fragscope/annotate.h not found (set FRAGSCOPE_INCLUDE_DIR)")
    name, build_dir = _extension_place(torch)
    os.makedirs(build_dir, exist_ok=True)
    if notice and not _extension_built(name, build_dir):
        _warn(notice)
        sys.stderr.flush()
    # with_cuda=True is for CUDA's headers and torch's CUDA libraries; the source has no device
    # code, yet cpp_extension still computes nvcc arch flags and, without TORCH_CUDA_ARCH_LIST,
    # takes them from the visible GPUs (none visible: IndexError in _get_cuda_arch_flags, seen
    # with torch 2.15). Any valid arch will do, and it changes nothing that gets built.
    arch_unset = "TORCH_CUDA_ARCH_LIST" not in os.environ
    if arch_unset:
        os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0"
    try:
        return cpp_extension.load(
            name=name,
            sources=[os.path.join(_HERE, "fragscope_torch_adapter.cpp")],
            extra_include_paths=[include],
            build_directory=build_dir,
            with_cuda=True,
            verbose=False,
        )
    finally:
        if arch_unset:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)


def _torch_setup():
    """`fragscope torch-setup`: this file run as a script by the python that runs the training.
    Builds the extension into the cache the adapter loads it from at run time, so that the first
    `fragscope run` does not stop for the build. Exit 0 when it is there, 3 (with the reason)
    when it cannot be."""
    def say(message):
        sys.stderr.write("fragscope torch-setup: %s\n" % message)

    try:
        import torch
    except Exception as error:  # ImportError, or a broken install that raises anything
        say("%s cannot import torch (%s); give the python that runs your training: "
            "fragscope torch-setup --python PATH" % (sys.executable, _first_line(error)))
        return 3
    name, build_dir = _extension_place(torch)
    if _extension_built(name, build_dir):
        say("the PyTorch adapter extension for torch %s is already built in %s"
            % (torch.__version__, build_dir))
        return 0
    say("building the PyTorch adapter extension for torch %s into %s (about a minute)"
        % (torch.__version__, build_dir))
    try:
        _build_extension(torch, notice=None)
    except Exception as error:
        say("cannot build the extension with %s: %s; `fragscope run` will fall back to "
            "snapshot diffs (scripts/adapter/README.md)" % (sys.executable, _first_line(error)))
        return 3
    say("built in %s; `fragscope run` loads it from there" % build_dir)
    return 0


def _first_line(error):
    return (str(error).strip().splitlines() or [repr(error)])[0]


def _snapshot_path():
    path = os.environ.get("FRAGSCOPE_TORCH_SNAPSHOT")
    if not path:
        output = os.environ.get("FRAGSCOPE_OUTPUT")
        if not output:
            return None
        path = output + ".torch.pickle"
    return path.replace("%p", str(os.getpid()))


def _install_fallback(torch, agent, why):
    import atexit

    global _FORWARDER
    api = _AgentApi(agent)
    snapshot = _snapshot_path()
    forwarder = None
    if hasattr(torch.cuda, "memory_snapshot") and hasattr(torch.cuda, "memory_stats"):
        forwarder = _SnapshotForwarder(torch, api)

    def dump():
        if snapshot:
            try:
                torch.cuda.memory._dump_snapshot(snapshot)
            except Exception as error:
                _warn("could not write the PyTorch snapshot %s: %r" % (snapshot, error))

    def on_oom(device, alloc_size, device_total, device_free):
        # PyTorch calls this after its last try, with the allocator unlocked: the blocks as they
        # are at the failure go first, so the failure is judged against them.
        if forwarder is not None:
            forwarder.sync("OOM")
        frames = _oom_frames()  # the request's line, not this one
        try:
            api.report_oom(alloc_size, device, frames)
        except Exception as error:  # never into PyTorch's OOM path
            _warn("could not report the OOM to fragscope: %r" % (error,))
        dump()

    parts = []
    try:
        torch._C._cuda_attach_out_of_memory_observer(on_oom)
        parts.append("OOM observer")
        _watch_backward(torch, None)
    except Exception as error:
        _warn("no OOM observer: %r" % (error,))
    if forwarder is not None:
        forwarder.sync("start")
        atexit.register(forwarder.sync, "exit")
        _FORWARDER = forwarder
        parts.append("snapshot diffs")
    try:
        if _HISTORY_ASKED is not None:
            parts.append("the program's memory history")  # its own: not replaced by ours
        else:
            try:
                torch.cuda.memory._record_memory_history(max_entries=100000)
            except TypeError:  # torch < 2.1: (enabled, record_context, trace_alloc_max_entries)
                torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=100000)
            parts.append("memory history")
        if snapshot:
            atexit.register(dump)
    except Exception as error:
        _warn("no memory history: %r" % (error,))
    _set_state("fallback (%s): %s" % (why, ", ".join(parts) or "nothing"))


def _history_with_sites(request):
    """A _record_memory_history request (keyword arguments) with what Python sites need kept on:
    a context recorded for each allocation, with Python frames. None for the legacy form's
    (enabled: bool, ...) True, passed as it is; its False (off) becomes the sites' own
    setting, which keeps no trace ring either."""
    enabled = request.get("enabled", "all")
    if enabled is False:
        return {"enabled": "state", "context": "alloc", "stacks": "python"}
    if not (enabled is None or isinstance(enabled, str)):
        return None
    merged = dict(request)
    if enabled is None:  # the program turns recording off: keep the least the sites need
        merged["enabled"] = "state"
    if merged.get("context", "all") in (None, "state"):
        merged["context"] = "alloc"
    return merged  # stacks: "python" and "all" both keep Python frames


def _watch_memory_history(torch):
    """Wraps torch.cuda.memory._record_memory_history to see the program's requests (before
    CUDA initialises, when the adapter sets its own, and after), so the adapter's setting never
    takes away what the program asked for."""
    global _HISTORY_ORIGINAL
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    original = getattr(memory, "_record_memory_history", None)
    if original is None or _HISTORY_ORIGINAL is not None:
        return
    import functools

    _HISTORY_ORIGINAL = original

    @functools.wraps(original)
    def _record_memory_history(*args, **kwargs):
        global _HISTORY_ASKED
        request = None
        if len(args) <= len(_HISTORY_PARAMS):
            request = dict(zip(_HISTORY_PARAMS, args))
            request.update(kwargs)
        _HISTORY_ASKED = request if request is not None else "other"
        sites_were_on = _SITES_ON
        merged = _history_with_sites(request) if sites_were_on and request is not None else None
        result = original(**merged) if merged is not None else original(*args, **kwargs)
        if _SITES_ON and not sites_were_on and request is not None:
            # CUDA initialised inside this call and the sites' setting went first: again, merged.
            merged = _history_with_sites(request)
            if merged is not None:
                original(**merged)
        return result

    memory._record_memory_history = _record_memory_history


# The Python frames of the backward passes running now (the calls of torch.autograd.backward
# and .grad), innermost pass last; changed under the GIL only.
_BACKWARD_CALLS = []


def _oom_frames():
    """The site of an OOM seen by PyTorch's observer: the failing request's Python frames, or,
    on an autograd engine thread (no Python frames of the program), "(autograd backward)" above
    the frames of the call that ran the pass, e.g. the line of loss.backward(). Called by the
    observer: the request's frames start two frames up."""
    try:
        frames = _diff.stack_frames(sys._getframe(2))
    except Exception:  # ValueError: no such frame (an engine thread runs only the observer)
        frames = []
    if not frames and _BACKWARD_CALLS:
        frames = [("(autograd backward)", "", 0)] + list(_BACKWARD_CALLS[-1])
    return frames


def _watch_backward(torch, extension):
    """Follows each backward pass: the autograd engine allocates gradients and backward
    temporaries on threads of its own, without Python frames. An OOM there is named by the call
    that ran the pass (_oom_frames); with the extension, blocks allocated during a pass get
    "(autograd backward)" above the same frames. Tensor.backward goes through
    torch.autograd.backward."""
    import functools

    autograd = getattr(torch, "autograd", None)
    if autograd is None:
        return
    marks_blocks = extension is not None and hasattr(extension, "begin_backward")
    # Tensor.backward is torch's own frame above the program's call, and a pass started inside
    # torch.autograd.grad has grad's and this wrapper's: the site starts at the program's line.
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    this_file = os.path.abspath(__file__)

    def not_the_programs(frame):
        path = os.path.abspath(frame[1])
        return path.startswith(torch_dir) or path == this_file
    for name in ("backward", "grad"):
        original = getattr(autograd, name, None)
        if original is None or getattr(original, "_fragscope_backward", False):
            continue

        def marked(*args, _original=original, **kwargs):
            site = interrupted = 0
            frames = None
            try:
                frames = _diff.stack_frames(sys._getframe(1), limit=64)
                while len(frames) > 1 and not_the_programs(frames[0]):
                    frames.pop(0)
                _BACKWARD_CALLS.append(frames)
                if marks_blocks:
                    site, interrupted = extension.begin_backward(frames)
            except Exception:  # never into the program's backward pass
                site = 0
            try:
                return _original(*args, **kwargs)
            finally:
                if frames is not None and _BACKWARD_CALLS and _BACKWARD_CALLS[-1] is frames:
                    _BACKWARD_CALLS.pop()
                if site:
                    extension.end_backward(site, interrupted)

        functools.update_wrapper(marked, original)
        marked._fragscope_backward = True
        setattr(autograd, name, marked)


def _flush_sites(extension):
    try:
        extension.flush_sites()
    except Exception as error:
        _warn("could not report PyTorch blocks' Python sites: %r" % (error,))


def _install_python_sites(torch, extension):
    """Python frames as the sites of PyTorch's blocks (FRAGSCOPE_TORCH_SITES=python, the
    default, or off). The tracker runs without the GIL and cannot read them; PyTorch's own
    context recording gathers them before taking its allocator lock, and the extension turns the
    pending ones into sites at marks, at each OOM (before reporting it, so the post-mortem lists
    the tensors by the Python line that made them) and at exit. Returns a word for STATE."""
    global _EXTENSION, _SITES_ON
    import atexit

    # A dormant agent is meant to cost nothing until an attach; PyTorch's stack gathering on
    # every allocation would, so there sites are opt-in.
    dormant = os.environ.get("FRAGSCOPE_DORMANT", "").lower() in ("1", "true", "yes", "on")
    default = "off" if dormant else "python"
    setting = os.environ.get("FRAGSCOPE_TORCH_SITES", default)
    if setting == "off":
        return "Python sites off (FRAGSCOPE_TORCH_SITES=%s)" % (
            "off" if "FRAGSCOPE_TORCH_SITES" in os.environ else "off by default while dormant")
    if not getattr(extension, "sites_supported", lambda: False)():
        return "no Python sites (torch without combined_traceback.h)"
    # "state": keep only live blocks' contexts, no trace ring; "alloc": a context per
    # allocation; "python": Python frames only (C++ frames would need slow symbolization). A
    # program that asked for a history of its own keeps it, with these added where it lacks them.
    request = {"enabled": "state", "context": "alloc", "stacks": "python"}
    programs = isinstance(_HISTORY_ASKED, dict) and _history_with_sites(_HISTORY_ASKED)
    if programs:
        request = programs
    try:
        (_HISTORY_ORIGINAL or torch.cuda.memory._record_memory_history)(**request)
    except Exception as error:
        return "no Python sites (%s)" % (str(error).splitlines() or [repr(error)])[0]
    _SITES_ON = True
    _watch_backward(torch, extension)

    def on_oom(device, alloc_size, device_total, device_free):
        # PyTorch calls this after its OOM trace entry, with the allocator unlocked, from the
        # failing request: its Python frames (this function's excluded) are the failure's site.
        _flush_sites(extension)
        try:
            extension.report_oom(alloc_size, device, _oom_frames())
        except Exception as error:  # never into PyTorch's OOM path
            _warn("could not report the OOM to fragscope: %r" % (error,))

    try:
        torch._C._cuda_attach_out_of_memory_observer(on_oom)
        extension.report_oom_from_observer(True)
    except Exception as error:  # the tracker keeps reporting OOMs, without the sites first
        _warn("no OOM observer for Python sites: %r" % (error,))
    atexit.register(_flush_sites, extension)
    _EXTENSION = extension
    # PyTorch's first symbolization imports torch._inductor and its dependencies (about 900
    # modules, 2 s here). Done here, once, on the thread that initialises CUDA: a first flush
    # on the thread below would take that long (the blocks live at the first peak would be gone
    # before their sites came), and importing them from a thread of ours while the program
    # imports the same graph (torch.compile) can deadlock Python's per-module import locks.
    try:
        if hasattr(extension, "warm_up_sites"):
            extension.warm_up_sites()
    except Exception as error:
        _warn("could not prepare PyTorch's symbolizer: %r" % (error,))
    SITES_READY.set()
    # A job that never marks would show its tensors' C++ site in `fragscope top` and the
    # daemon's reports until its first OOM: flush now and then as well (each flush costs the
    # blocks allocated since the last one and still live, with the GIL held). And at once after
    # each new peak of PyTorch's reserved memory (the extension's pipe turns readable), while
    # the blocks live at the peak, a step's activations among them, are still there to be named:
    # the report lists the sites at the peak.
    try:
        every = float(os.environ.get("FRAGSCOPE_TORCH_SITES_EVERY_S", "5"))
    except ValueError:
        _warn("FRAGSCOPE_TORCH_SITES_EVERY_S=%r is not a number of seconds; using 5"
              % os.environ.get("FRAGSCOPE_TORCH_SITES_EVERY_S"))
        every = 5.0
    try:
        peaks = extension.growth_fd() if hasattr(extension, "growth_fd") else -1
    except Exception as error:
        _warn("no site reports at new peaks: %r" % (error,))
        peaks = -1
    if every > 0 or peaks >= 0:
        import select
        import time

        def flush_now_and_then():
            if peaks >= 0:
                # poll, not select: a program with over 1024 files open may get a larger fd.
                poller = select.poll()
                poller.register(peaks, select.POLLIN)
            while True:
                if peaks < 0:
                    time.sleep(every)
                elif poller.poll(every * 1000 if every > 0 else None):  # the GIL released
                    try:
                        os.read(peaks, 4096)  # every peak so far: one flush serves them
                    except OSError:  # BlockingIOError: another wake took them
                        pass
                _flush_sites(extension)

        threading.Thread(target=flush_now_and_then, name="fragscope-sites", daemon=True).start()
    return "Python sites, in the program's memory history" if programs else "Python sites"


def _allocator_backend(torch):
    """"native" or "cudaMallocAsync" (PYTORCH_CUDA_ALLOC_CONF backend:); "native" when torch
    cannot say (before 2.0)."""
    try:
        return torch.cuda.get_allocator_backend()
    except Exception:
        return "native"


def _on_cuda_init(torch):
    """Runs inside torch.cuda's lazy initialisation, once CUDA and the allocator exist."""
    agent = _agent()
    if agent is None:
        _set_state("inactive: libfragscope.so is not loaded")
        return
    if _allocator_backend(torch) == "cudaMallocAsync":
        # No caching allocator to annotate: every tensor is a cudaMallocAsync/cudaFreeAsync the
        # agent records itself (and this backend refuses trace trackers, snapshots and history).
        _set_state("not needed: backend:cudaMallocAsync, whose allocations the agent records")
        return
    mode = os.environ.get("FRAGSCOPE_TORCH_ADAPTER", "auto")
    why = "FRAGSCOPE_TORCH_ADAPTER=fallback"
    if mode != "fallback":
        try:
            extension = _build_extension(torch)
            if extension.install():
                _set_state("tracker")
                _set_state("tracker, " + _install_python_sites(torch, extension))
                return
            why = "the allocator refused a trace tracker"
        except Exception as error:
            why = "extension unavailable: %s" % _first_line(error)
            _warn("PyTorch adapter extension not used (%s); falling back" % why)
    _install_fallback(torch, agent, why)


def _report_rank(torch):
    """Tells the agent which rank this process is once torch.distributed knows it. Never raises
    (it runs inside the program's start-up)."""
    try:
        dist = getattr(torch, "distributed", None)
        agent = _agent()
        if dist is None or agent is None or not hasattr(agent, "fragscope_set_rank"):
            return
        if not dist.is_available() or not dist.is_initialized():
            return
        agent.fragscope_set_rank(int(dist.get_rank()), int(dist.get_world_size()))
    except Exception as error:
        _warn("could not report the process's rank: %r" % (error,))


def _watch_distributed(torch):
    """Names the process by its rank when the program sets it through
    torch.distributed.init_process_group (torch.multiprocessing.spawn workers pass it as an
    argument: no RANK variable for the agent to read at start). Wraps the function where
    programs find it: torch.distributed and its distributed_c10d module."""
    import functools

    dist = getattr(torch, "distributed", None)
    if dist is None:
        return
    modules = [dist, getattr(dist, "distributed_c10d", None)]
    original = getattr(dist, "init_process_group", None)
    if original is None or getattr(original, "_fragscope_rank", False):
        return

    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        _report_rank(torch)
        return result

    functools.update_wrapper(init_process_group, original)
    init_process_group._fragscope_rank = True
    for module in modules:
        if module is not None and getattr(module, "init_process_group", None) is original:
            module.init_process_group = init_process_group
    _report_rank(torch)  # a process group made before the adapter saw torch


def _on_torch_imported(torch):
    try:
        if _agent() is None:
            _set_state("inactive: libfragscope.so is not loaded")
            return
        try:
            _watch_distributed(torch)
        except Exception as error:
            _warn("PyTorch adapter could not watch torch.distributed: %r" % (error,))
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not hasattr(torch._C, "_cuda_getDeviceCount"):
            _set_state("inactive: torch without CUDA")
            return
        _watch_memory_history(torch)
        lazy_call = getattr(cuda, "_lazy_call", None)
        if lazy_call is None:
            _set_state("inactive: torch.cuda has no _lazy_call")
            return

        def at_cuda_init():
            try:
                _on_cuda_init(torch)
            except Exception as error:
                _set_state("failed: %r" % (error,))
                _warn("PyTorch adapter failed: %r" % (error,))

        # Runs now if CUDA is already initialised, else inside torch.cuda's lazy init.
        lazy_call(at_cuda_init)
        _set_state("waiting for CUDA")
    except Exception as error:
        _set_state("failed: %r" % (error,))
        _warn("PyTorch adapter failed: %r" % (error,))


class _TorchWatcher:
    """A meta-path finder that sees `import torch` and runs the adapter after torch loaded."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        import importlib.util

        sys.meta_path.remove(self)  # once; and the lookup below must not find us again
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_adapt(module):
            exec_module(module)
            _on_torch_imported(module)

        spec.loader.exec_module = exec_then_adapt
        return spec


def _main():
    global CHAINED
    CHAINED = _chain_next_sitecustomize()
    if os.environ.get("FRAGSCOPE_TORCH_ADAPTER", "auto") == "off":
        _set_state("off: FRAGSCOPE_TORCH_ADAPTER=off")
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        _on_torch_imported(torch)
    else:
        sys.meta_path.insert(0, _TorchWatcher())


if __name__ == "__main__":
    # `fragscope torch-setup` runs this file as a script: build, do not install any hook.
    sys.exit(_torch_setup())
_main()
