#include "fragscope/model/model_summary.h"

#include "fragscope.pb.h"

namespace fragscope {

StackEnd StackEndFromWire(int value) {
  switch (value) {
    case v1::STACK_END_OUTERMOST:
      return StackEnd::kOutermost;
    case v1::STACK_END_DEPTH_LIMIT:
      return StackEnd::kDepthLimit;
    case v1::STACK_END_NO_UNWIND_INFO:
      return StackEnd::kNoUnwindInfo;
    case v1::STACK_END_UNREADABLE:
      return StackEnd::kUnreadable;
    case v1::STACK_END_UNSUPPORTED:
      return StackEnd::kUnsupported;
    default:
      return StackEnd::kUnspecified;
  }
}

const char* StackEndName(StackEnd end) {
  switch (end) {
    case StackEnd::kOutermost:
      return "outermost";
    case StackEnd::kDepthLimit:
      return "depth_limit";
    case StackEnd::kNoUnwindInfo:
      return "no_unwind_info";
    case StackEnd::kUnreadable:
      return "unreadable";
    case StackEnd::kUnsupported:
      return "unsupported";
    case StackEnd::kUnspecified:
      break;
  }
  return "unspecified";
}

bool IsCutStackEnd(StackEnd end) {
  return end != StackEnd::kOutermost && end != StackEnd::kUnspecified;
}

StackEnd MergeStackEnds(StackEnd a, StackEnd b) {
  if (IsCutStackEnd(a)) return a;
  if (IsCutStackEnd(b)) return b;
  if (a == StackEnd::kUnspecified || b == StackEnd::kUnspecified) return StackEnd::kUnspecified;
  return StackEnd::kOutermost;
}

std::string ApiName(int api) {
  if (!v1::Api_IsValid(api)) return "";
  const std::string& name = v1::Api_Name(static_cast<v1::Api>(api));
  return name.rfind("API_", 0) == 0 ? name.substr(4) : name;
}

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kAlloc:
      return "alloc";
    case EventKind::kFree:
      return "free";
    case EventKind::kFreeAsync:
      return "free_async";
    case EventKind::kReserve:
      return "reserve";
    case EventKind::kFreeRange:
      return "free_range";
    case EventKind::kMap:
      return "map";
    case EventKind::kUnmap:
      return "unmap";
    case EventKind::kHandleCreate:
      return "handle_create";
    case EventKind::kHandleRelease:
      return "handle_release";
    case EventKind::kHandleRetain:
      return "handle_retain";
    case EventKind::kHandleImport:
      return "handle_import";
    case EventKind::kHandleExport:
      return "handle_export";
    case EventKind::kBlockAlloc:
      return "block_alloc";
    case EventKind::kPutBack:
      return "put_back";
    case EventKind::kBlockFree:
      return "block_free";
    case EventKind::kBlockFreePending:
      return "block_free_pending";
    case EventKind::kFailedAlloc:
      return "failed_alloc";
    case EventKind::kMemInfo:
      return "mem_info";
    case EventKind::kMark:
      return "mark";
  }
  return "?";
}

const char* OomClassName(OomClass c) {
  switch (c) {
    case OomClass::kCapacity:
      return "capacity";
    case OomClass::kExternal:
      return "external";
    case OomClass::kUnusableCache:
      return "unusable_cache";
    case OomClass::kFragmentation:
      return "fragmentation";
    case OomClass::kUnknown:
      return "unknown";
  }
  return "?";
}

}  // namespace fragscope
