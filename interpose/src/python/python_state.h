// PyTorch's caching-allocator state, read inside the process an agent was injected into
// (`fragscope attach` on a process started without the agent), so that the first snapshot of
// the attach is exact for PyTorch's memory instead of calling all of it `untracked`.
//
// How: the Python C API is looked up with dlsym in the running process (the agent never links
// libpython: it also loads into processes without Python). If CPython is initialized, a thread
// of the agent's own takes the GIL with PyGILState_Ensure (as pyrasite does from gdb), runs a
// few lines of Python in a fresh namespace that call torch.cuda.memory_snapshot() when torch is
// in sys.modules with CUDA initialized, and, still holding the GIL, enters each segment as a
// live allocation (API_torch_snapshot, the segment's device, address, size and stream) and
// each active block as a live sub-allocator block (its stream and pool; a pending free stays
// pending). A segment without active blocks gets a zero-byte block at its start, as the
// adapter's snapshot diff does, so the collector knows it is PyTorch's and all free. An
// expandable segment's mapped runs are entered page by page from the driver (each page's
// mapping and the handle PyTorch holds), so PyTorch's later unmaps and releases match.
//
// PyTorch's blocks are not followed after the import (no trace tracker runs in the target),
// except at an OOM: the import also installs PyTorch's OOM observer (once per process), which
// brings the blocks up to date with the adapter's snapshot diff (`adapter_dir`'s
// fragscope_torch_diff.py, primed with the imported state) before it reports the failure, so
// the post-mortem is judged against the blocks of the OOM.
//
// The caller waits at most `wait_ms` for the GIL. After that the import is abandoned: the
// helper thread, if it ever gets the GIL, releases it at once and enters nothing, so nothing is
// entered after the caller returned (and after the snapshot that follows).
#ifndef FRAGSCOPE_INTERPOSE_PYTHON_STATE_H_
#define FRAGSCOPE_INTERPOSE_PYTHON_STATE_H_

#include <cstdint>

#include "fragscope/attach_contract.h"

namespace fragscope::agent {

// Fills *out (magic, abi, status and the per-device counts). Call with the agent started
// (the live table mapped), after libcuda is patched: segments PyTorch takes or gives back from
// then on are seen by the hooks, so the live table stays right around the import.
void ImportTorchState(uint32_t wait_ms, const char* adapter_dir, FragscopeTorchImport* out);

// While a stream runs (an attach's start or detach): brings PyTorch's blocks up to date with
// the process's snapshot diff, the forwarder an injected import primed (the one its OOM
// observer uses) or else the PyTorch adapter's fallback (sitecustomize._FORWARDER, in a
// process started with the agent), so the attach's figures there are PyTorch's. The diff ends
// with a blocks_synced mark labelled with `why` (a word). A process whose adapter runs its C++
// extension with Python sites has no diff to run: its pending sites are reported instead (the
// tensors made since its last flush), so a detach names them. The same GIL wait. *out: status
// (kFragscopeTorchImported when the diff was forwarded, kFragscopeTorchNoTorch when the process
// has no such forwarder), synced_events, message.
void SyncTorchState(uint32_t wait_ms, const char* why, FragscopeTorchImport* out);

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_PYTHON_STATE_H_
