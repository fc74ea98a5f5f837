// Streams, events, stream capture, graphs and kernel launches. Work is
// done immediately at enqueue time (the fake has no device timeline); a stream's `seq` counts
// what was enqueued so events and pending frees can say "up to here".
#include <chrono>
#include <cstring>

#include "gpu_state.h"

using namespace fakecuda;

namespace {

using Lock = std::lock_guard<std::mutex>;

// Resolves `handle` for the calling thread's current context.
CUresult StreamFor(State& s, CUstream handle, bool per_thread, Stream** out) {
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  *out = ResolveStreamLocked(s, ctx, handle, per_thread);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

Event* LiveEvent(State& s, CUevent handle) {
  Event* event = reinterpret_cast<Event*>(handle);
  return s.events.count(event) && event->alive ? event : nullptr;
}

Graph* LiveGraph(State& s, CUgraph handle) {
  Graph* graph = reinterpret_cast<Graph*>(handle);
  return s.graphs.count(graph) && graph->alive ? graph : nullptr;
}

GraphExec* LiveExec(State& s, CUgraphExec handle) {
  GraphExec* exec = reinterpret_cast<GraphExec*>(handle);
  return s.graph_execs.count(exec) && exec->alive ? exec : nullptr;
}

// Graph allocations freed inside the graph return their memory once the graph and all its
// executable instances are gone.
void MaybeReleaseGraphMemoryLocked(State& s, Graph* graph) {
  if (graph->alive || graph->execs > 0) return;
  for (uint64_t address : graph->freed_inside) {
    auto it = s.allocations.find(address);
    if (it != s.allocations.end() && it->second.graph == graph) ReleaseAllocationLocked(s, it);
  }
  graph->freed_inside.clear();
}

CUresult CreateStream(CUstream* phStream, unsigned flags, int priority) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!phStream || (flags & ~unsigned{CU_STREAM_NON_BLOCKING})) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = new Stream();
  stream->ctx = ctx;
  stream->flags = flags;
  stream->priority = priority < -5 ? -5 : (priority > 0 ? 0 : priority);
  stream->id = s.next_stream_id++;
  s.streams.insert(stream);
  *phStream = reinterpret_cast<CUstream>(stream);
  return CUDA_SUCCESS;
}

CUresult DestroyStream(CUstream handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Stream* stream = reinterpret_cast<Stream*>(handle);
  if (!s.streams.count(stream) || !stream->alive) return CUDA_ERROR_INVALID_HANDLE;
  // Work already enqueued still completes (the driver defers the destruction).
  SynchronizeStreamLocked(s, stream, ~0ull);
  stream->alive = false;
  return CUDA_SUCCESS;
}

CUresult SynchronizeStream(CUstream handle, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    stream->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (UnsafeDuringCaptureLocked(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  SynchronizeStreamLocked(s, stream, stream->seq);
  return CUDA_SUCCESS;
}

CUresult QueryStream(CUstream handle, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    stream->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // Everything enqueued has already run, and observing that completes pending frees.
  SynchronizeStreamLocked(s, stream, stream->seq);
  return CUDA_SUCCESS;
}

CUresult BeginCapture(CUstream handle, CUstreamCaptureMode mode, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (stream == stream->ctx->legacy_stream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (stream->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* graph = new Graph();
  s.graphs.insert(graph);
  stream->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  stream->capture_mode = mode;
  stream->capture_thread = std::this_thread::get_id();
  stream->capture_graph = graph;
  stream->capture_id = s.next_capture_id++;
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream handle, CUgraph* phGraph, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (stream->capture_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      stream->capture_thread != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  Graph* graph = stream->capture_graph;
  bool invalidated = stream->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  stream->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  stream->capture_graph = nullptr;
  if (invalidated) {
    graph->alive = false;
    MaybeReleaseGraphMemoryLocked(s, graph);
    *phGraph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *phGraph = reinterpret_cast<CUgraph>(graph);
  return CUDA_SUCCESS;
}

CUresult IsCapturing(CUstream handle, CUstreamCaptureStatus* status, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = stream->capture;
  return CUDA_SUCCESS;
}

CUresult GetCaptureInfo(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id,
                        CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                        size_t* num_deps, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = stream->capture;
  bool active = stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id && active) *id = stream->capture_id;
  if (graph) *graph = active ? reinterpret_cast<CUgraph>(stream->capture_graph) : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (num_deps) *num_deps = 0;
  return CUDA_SUCCESS;
}

CUresult RecordEvent(CUevent handle, CUstream stream_handle, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, stream_handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  Event* event = LiveEvent(s, handle);
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    ++stream->capture_graph->nodes;
    return CUDA_SUCCESS;
  }
  event->recorded = true;
  event->stream = stream;
  event->seq = stream->seq;
  event->time_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now().time_since_epoch())
                                             .count());
  return CUDA_SUCCESS;
}

CUresult DestroyEvent(CUevent handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Event* event = LiveEvent(s, handle);
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  event->alive = false;
  return CUDA_SUCCESS;
}

CUresult ElapsedTime(float* ms, CUevent start_handle, CUevent end_handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  Event* start = LiveEvent(s, start_handle);
  Event* end = LiveEvent(s, end_handle);
  if (!start || !end) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(static_cast<double>(end->time_ns - start->time_ns) / 1e6);
  return CUDA_SUCCESS;
}

CUresult Instantiate(CUgraphExec* phGraphExec, CUgraph handle) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!phGraphExec) return CUDA_ERROR_INVALID_VALUE;
  Graph* graph = LiveGraph(s, handle);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  if (CountApiCallLocked(s, "cuGraphInstantiate")) return CUDA_ERROR_OUT_OF_MEMORY;
  GraphExec* exec = new GraphExec{graph};
  ++graph->execs;
  s.graph_execs.insert(exec);
  *phGraphExec = reinterpret_cast<CUgraphExec>(exec);
  return CUDA_SUCCESS;
}

CUresult LaunchOrUpload(CUgraphExec handle, CUstream stream_handle, bool per_thread, bool upload) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, stream_handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (!LiveExec(s, handle)) return CUDA_ERROR_INVALID_VALUE;
  if (upload && CountApiCallLocked(s, "cuGraphUpload")) return CUDA_ERROR_OUT_OF_MEMORY;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    ++stream->capture_graph->nodes;
    return CUDA_SUCCESS;
  }
  ++stream->seq;
  return CUDA_SUCCESS;
}

CUresult Launch(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, CUstream stream_handle, bool per_thread) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, stream_handle, per_thread, &stream); r != CUDA_SUCCESS) return r;
  if (!LiveObjectLocked(s, function, HandleObject::kFunction) &&
      !LiveObjectLocked(s, function, HandleObject::kKernel)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (uint64_t{bx} * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (CountApiCallLocked(s, "cuLaunchKernel")) return CUDA_ERROR_OUT_OF_MEMORY;
  if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    ++stream->capture_graph->nodes;
    return CUDA_SUCCESS;
  }
  ++stream->seq;  // accepted, not executed
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return CreateStream(phStream, Flags, 0);
}
CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return CreateStream(phStream, flags, priority);
}
CUresult cuStreamDestroy(CUstream hStream) { return DestroyStream(hStream); }
CUresult cuStreamDestroy_v2(CUstream hStream) { return DestroyStream(hStream); }
CUresult cuStreamSynchronize(CUstream hStream) { return SynchronizeStream(hStream, false); }
CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return SynchronizeStream(hStream, true); }
CUresult cuStreamQuery(CUstream hStream) { return QueryStream(hStream, false); }
CUresult cuStreamQuery_ptsz(CUstream hStream) { return QueryStream(hStream, true); }

CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, hStream, false, &stream); r != CUDA_SUCCESS) return r;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = stream->flags;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetPriority(CUstream hStream, int* priority) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, hStream, false, &stream); r != CUDA_SUCCESS) return r;
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  *priority = stream->priority;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, hStream, false, &stream); r != CUDA_SUCCESS) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(stream->ctx);
  return CUDA_SUCCESS;
}

CUresult cuStreamGetDevice(CUstream hStream, CUdevice* device) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, hStream, false, &stream); r != CUDA_SUCCESS) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = stream->ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, hStream, false, &stream); r != CUDA_SUCCESS) return r;
  if (!streamId) return CUDA_ERROR_INVALID_VALUE;
  *streamId = stream->id;
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* stream = nullptr;
  if (CUresult r = StreamFor(s, hStream, false, &stream); r != CUDA_SUCCESS) return r;
  return LiveEvent(s, hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int flags) {
  return cuStreamWaitEvent(hStream == nullptr ? CU_STREAM_PER_THREAD : hStream, hEvent, flags);
}

CUresult cuStreamBeginCapture(CUstream hStream) {
  return BeginCapture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return BeginCapture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return BeginCapture(hStream, mode, false);
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return BeginCapture(hStream, mode, true);
}
CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return EndCapture(hStream, phGraph, false);
}
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return EndCapture(hStream, phGraph, true);
}
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* status) {
  return IsCapturing(hStream, status, false);
}
CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* status) {
  return IsCapturing(hStream, status, true);
}
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                   CUgraph* graph, const CUgraphNode** deps, size_t* num) {
  return GetCaptureInfo(hStream, status, id, graph, deps, nullptr, num, false);
}
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus* status,
                                        cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                        size_t* num) {
  return GetCaptureInfo(hStream, status, id, graph, deps, nullptr, num, true);
}
CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                   CUgraph* graph, const CUgraphNode** deps,
                                   const CUgraphEdgeData** edges, size_t* num) {
  return GetCaptureInfo(hStream, status, id, graph, deps, edges, num, false);
}
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus* status,
                                        cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                        const CUgraphEdgeData** edges, size_t* num) {
  return GetCaptureInfo(hStream, status, id, graph, deps, edges, num, true);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUstreamCaptureMode previous = ThreadCaptureMode();
  ThreadCaptureMode() = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  State& s = GetState();
  Lock lock(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = RequireContextLocked(s, &ctx); r != CUDA_SUCCESS) return r;
  if (!phEvent || (Flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
  Event* event = new Event();
  event->ctx = ctx;
  event->flags = Flags;
  s.events.insert(event);
  *phEvent = reinterpret_cast<CUevent>(event);
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  return RecordEvent(hEvent, hStream, false);
}
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  return RecordEvent(hEvent, hStream, true);
}
CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int) {
  return RecordEvent(hEvent, hStream, false);
}
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int) {
  return RecordEvent(hEvent, hStream, true);
}

CUresult cuEventQuery(CUevent hEvent) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return LiveEvent(s, hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Event* event = LiveEvent(s, hEvent);
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  if (event->recorded && event->stream->alive) {
    SynchronizeStreamLocked(s, event->stream, event->seq);
  }
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent hEvent) { return DestroyEvent(hEvent); }
CUresult cuEventDestroy_v2(CUevent hEvent) { return DestroyEvent(hEvent); }
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return ElapsedTime(ms, start, end);
}
CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return ElapsedTime(ms, start, end);
}

CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!phGraph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Graph* graph = new Graph();
  s.graphs.insert(graph);
  *phGraph = reinterpret_cast<CUgraph>(graph);
  return CUDA_SUCCESS;
}

CUresult cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*, size_t) {
  State& s = GetState();
  Lock lock(s.mu);
  Graph* graph = LiveGraph(s, hGraph);
  if (!graph || !phGraphNode) return CUDA_ERROR_INVALID_VALUE;
  *phGraphNode = reinterpret_cast<CUgraphNode>(++graph->nodes);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  Graph* graph = LiveGraph(s, hGraph);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  graph->alive = false;
  MaybeReleaseGraphMemoryLocked(s, graph);
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode*, char* log,
                            size_t log_size) {
  if (log && log_size) log[0] = '\0';
  return Instantiate(phGraphExec, hGraph);
}
CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* node,
                               char* log, size_t log_size) {
  return cuGraphInstantiate(phGraphExec, hGraph, node, log, log_size);
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long) {
  return Instantiate(phGraphExec, hGraph);
}
CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  CUresult r = Instantiate(phGraphExec, hGraph);
  if (params)
    params->result_out =
        r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(phGraphExec, hGraph, params);
}

CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) {
  return LaunchOrUpload(exec, stream, false, true);
}
CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
  return LaunchOrUpload(exec, stream, true, true);
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return LaunchOrUpload(exec, stream, false, false);
}
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return LaunchOrUpload(exec, stream, true, false);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  GraphExec* exec = LiveExec(s, hGraphExec);
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  exec->alive = false;
  --exec->graph->execs;
  MaybeReleaseGraphMemoryLocked(s, exec->graph);
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int,
                        CUstream hStream, void**, void**) {
  return Launch(f, gx, gy, gz, bx, by, bz, hStream, false);
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int,
                             CUstream hStream, void**, void**) {
  return Launch(f, gx, gy, gz, bx, by, bz, hStream, true);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void**, void**) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                config->blockDimY, config->blockDimZ, config->hStream, false);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void**, void**) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                config->blockDimY, config->blockDimZ, config->hStream, true);
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  {
    State& s = GetState();
    Lock lock(s.mu);
    Stream* stream = nullptr;
    if (CUresult r = StreamFor(s, hStream, false, &stream); r != CUDA_SUCCESS) return r;
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    if (stream->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      ++stream->capture_graph->nodes;
      return CUDA_SUCCESS;
    }
    ++stream->seq;
  }
  fn(userData);  // outside the lock: the callback may not call CUDA, but may take its own locks
  return CUDA_SUCCESS;
}
