// Runtime streams, events, stream capture and graphs.
#include "runtime_state.h"

using namespace fakecuda_rt;

#define FAKECUDA_WITH_CONTEXT(api) \
  const DriverApi* api = nullptr;  \
  if (cudaError_t e = EnsureContext(&api); e != cudaSuccess) return Record(e)

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamCreate(pStream, 0)));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamCreate(pStream, flags)));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamCreateWithPriority(pStream, flags, priority)));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamDestroy(stream)));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamSynchronize(stream)));
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamSynchronize_ptsz(stream)));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamQuery(stream)));
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamQuery_ptsz(stream)));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamWaitEvent(stream, event, flags)));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(
      FromDriver(api->streamBeginCapture(stream, static_cast<CUstreamCaptureMode>(mode))));
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(
      FromDriver(api->streamBeginCapture_ptsz(stream, static_cast<CUstreamCaptureMode>(mode))));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamEndCapture(stream, pGraph)));
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* pGraph) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamEndCapture_ptsz(stream, pGraph)));
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(
      api->streamIsCapturing(stream, reinterpret_cast<CUstreamCaptureStatus*>(pCaptureStatus))));
}
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                       cudaStreamCaptureStatus* pCaptureStatus) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->streamIsCapturing_ptsz(
      stream, reinterpret_cast<CUstreamCaptureStatus*>(pCaptureStatus))));
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  cudaError_t error;
  const DriverApi* api = Init(&error);
  if (!api) return Record(error);
  return Record(FromDriver(
      api->threadExchangeStreamCaptureMode(reinterpret_cast<CUstreamCaptureMode*>(mode))));
}

cudaError_t cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->graphCreate(pGraph, flags)));
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->graphInstantiateWithFlags(pGraphExec, graph, flags)));
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}

cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->graphUpload(graphExec, stream)));
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->graphLaunch(graphExec, stream)));
}
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->graphLaunch_ptsz(graphExec, stream)));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->graphExecDestroy(graphExec)));
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->graphDestroy(graph)));
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventCreate(event, 0)));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventCreate(event, flags)));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventRecord(event, stream)));
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventRecord_ptsz(event, stream)));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventQuery(event)));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventSynchronize(event)));
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventDestroy(event)));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  FAKECUDA_WITH_CONTEXT(api);
  return Record(FromDriver(api->eventElapsedTime(ms, start, end)));
}

}  // extern "C"
