#include "fragscope/model/model_summary.h"

#include "fragscope.pb.h"

namespace fragscope {

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
