"""fragscope from Python: the commands' files, and a few calls into the agent.

Installed by ``pip install`` (pyproject.toml at the repository's top), this package holds the
fragscope programs (bin/), the agent and the CUPTI library (lib/) and the PyTorch adapter
(share/fragscope/adapter); the ``fragscope``, ``fragscope-collector`` and ``fragscope-dump``
commands on PATH run the programs in bin/, and ``fragscope run`` finds the agent beside them.

In a program run under ``fragscope run`` (the agent preloaded, or injected by ``fragscope
attach``), ``mark`` puts a label on the memory timeline. Without the agent every call here is a
no-op: ``active()`` is False and ``mark`` does nothing.
"""

import ctypes
import os

__all__ = ["active", "agent_path", "mark"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_AGENT_NAME = "libfragscope.so"
_mark_fn = None  # fragscope_mark of the loaded agent, once found


def agent_path():
    """The agent library this package carries (lib/libfragscope.so), or None if it has none."""
    path = os.path.join(_HERE, "lib", _AGENT_NAME)
    return path if os.path.isfile(path) else None


def _loaded_agent():
    """The agent loaded in this process (preloaded, or injected since), as a ctypes library."""
    try:
        process = ctypes.CDLL(None)
        if hasattr(process, "fragscope_mark"):
            return process
    except OSError:
        pass
    # An agent injected by `fragscope attach` is loaded but not in the global scope.
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps
                     if line.rstrip().endswith("/" + _AGENT_NAME)}
    except (OSError, IndexError):
        return None
    for path in paths:
        try:
            return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        except OSError:
            continue
    return None


def _mark_function():
    global _mark_fn
    if _mark_fn is None:
        agent = _loaded_agent()
        if agent is not None:
            fn = agent.fragscope_mark
            fn.argtypes = [ctypes.c_char_p]
            fn.restype = None
            _mark_fn = fn
    return _mark_fn


def active():
    """Whether the fragscope agent is loaded in this process."""
    return _mark_function() is not None


def mark(label):
    """Labels this point of the memory timeline (reports and exports show it); a no-op without
    the agent."""
    fn = _mark_function()
    if fn is not None:
        fn(str(label).encode("utf-8", "replace"))
