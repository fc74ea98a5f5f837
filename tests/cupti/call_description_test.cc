// The one description of each tracked call (interpose/src/hooks/call_description.h) against the
// two ways the agent sees calls: the preload wrappers (hooks/driver_hook_list.inc,
// runtime_hook_list.inc) and the CUPTI callbacks (cupti/tracked_callbacks.inc). Fails when the
// two disagree about a call: a wrapped or CUPTI-tracked function without a description, a CUPTI
// callback named by another Api than the wrapper of the same function, a failure-only wrapper
// whose description records more, or a CUPTI translation that does not make the event the
// description says.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "hooks/call_description.h"
#include "translate.h"

namespace fragscope::cupti {
namespace {

using agent::Api;
using agent::CallDescription;
using agent::CallEvent;
using agent::FindCallDescription;
using agent::RecordType;

// The hook lists' kinds (hooks/hook_table.h, HookKind), by the names the lists use.
enum Kind { kTracked, kFailureOnly, kRoute };

struct Wrapper {
  std::string symbol;
  Api api;
  Kind kind;
};

std::vector<Wrapper> DriverWrappers() {
  return {
#define FRAGSCOPE_DRIVER_HOOK(symbol, base, api, kind) {#symbol, Api::k_##api, kind},
#include "hooks/driver_hook_list.inc"
#undef FRAGSCOPE_DRIVER_HOOK
  };
}

std::vector<Wrapper> RuntimeWrappers() {
  return {
#define FRAGSCOPE_RUNTIME_HOOK(symbol, api, kind) {#symbol, Api::k_##api, kind},
#include "hooks/runtime_hook_list.inc"
#undef FRAGSCOPE_RUNTIME_HOOK
  };
}

struct Callback {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  std::string name;  // the cbid's suffix
  Api api;
};

std::vector<Callback> CuptiCallbacks() {
  return {
#define FRAGSCOPE_CUPTI_DRIVER_CALLBACK(cb, api) \
  {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##cb, #cb, Api::k_##api},
#define FRAGSCOPE_CUPTI_RUNTIME_CALLBACK(cb, api) \
  {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##cb, #cb, Api::k_##api},
#include "tracked_callbacks.inc"
#undef FRAGSCOPE_CUPTI_DRIVER_CALLBACK
#undef FRAGSCOPE_CUPTI_RUNTIME_CALLBACK
  };
}

// The exported name of the wrapper of the function a CUPTI callback reports: runtime cbids carry
// the function's version (cudaMalloc_v3020).
std::string WrapperSymbol(const Callback& c) {
  if (c.domain == CUPTI_CB_DOMAIN_DRIVER_API) return c.name;
  return std::regex_replace(c.name, std::regex("_v[0-9]+$"), "");
}

const Wrapper* FindWrapper(const std::vector<Wrapper>& wrappers, const std::string& symbol) {
  for (const Wrapper& w : wrappers) {
    if (w.symbol == symbol) return &w;
  }
  return nullptr;
}

TEST(CallDescription, EveryWrappedCallHasADescriptionOfItsKind) {
  for (const auto& list : {DriverWrappers(), RuntimeWrappers()}) {
    for (const Wrapper& w : list) {
      if (w.kind == kRoute) continue;
      const CallDescription* d = FindCallDescription(w.api);
      ASSERT_NE(d, nullptr) << w.symbol;
      EXPECT_EQ(w.kind == kFailureOnly, d->event == CallEvent::kFailureOnly) << w.symbol;
    }
  }
}

TEST(CallDescription, EveryDescriptionIsOfAWrappedCall) {
  std::set<Api> wrapped;
  for (const auto& list : {DriverWrappers(), RuntimeWrappers()}) {
    for (const Wrapper& w : list) wrapped.insert(w.api);
  }
  std::set<Api> described;
  for (const CallDescription& d : agent::kCallDescriptions) {
    EXPECT_TRUE(described.insert(d.api).second) << "two descriptions of Api " << int(d.api);
    EXPECT_TRUE(wrapped.count(d.api)) << "no wrapper records Api " << int(d.api);
  }
}

// A CUPTI callback and the wrapper of the same function record the same Api, so both read the
// same description.
TEST(CallDescription, EveryCuptiCallbackIsNamedAsItsWrapperNamesIt) {
  const std::vector<Wrapper> driver = DriverWrappers();
  const std::vector<Wrapper> runtime = RuntimeWrappers();
  for (const Callback& c : CuptiCallbacks()) {
    const bool is_driver = c.domain == CUPTI_CB_DOMAIN_DRIVER_API;
    const Wrapper* w = FindWrapper(is_driver ? driver : runtime, WrapperSymbol(c));
    ASSERT_NE(w, nullptr) << c.name << ": CUPTI tracks a function no wrapper wraps";
    EXPECT_NE(w->kind, kRoute) << c.name;
    EXPECT_EQ(c.api, w->api) << c.name;
    EXPECT_EQ(CallbackApi(c.domain, c.cbid), w->api) << c.name;
    EXPECT_NE(FindCallDescription(c.api), nullptr) << c.name;
  }
}

// The wrapped functions CUPTI does not subscribe to. A new wrapper fails here until the backend
// tracks it too or it is named below.
TEST(CallDescription, WrappedCallsTheCuptiBackendDoesNotTrack) {
  std::set<std::string> tracked;
  for (const Callback& c : CuptiCallbacks()) tracked.insert(WrapperSymbol(c));
  std::set<std::string> untracked;
  for (const auto& list : {DriverWrappers(), RuntimeWrappers()}) {
    for (const Wrapper& w : list) {
      if (w.kind != kRoute && !tracked.count(w.symbol)) untracked.insert(w.symbol);
    }
  }
  // cuMemExportToShareableHandle: no frame the collector needs (an export moves no memory);
  // cuGraphInstantiate, cuCtxCreate: the v1 ABIs, which CUPTI reports as their newer names.
  EXPECT_EQ(untracked, (std::set<std::string>{"cuCtxCreate", "cuGraphInstantiate",
                                              "cuMemExportToShareableHandle"}));
}

// Enter and exit of one outermost call with the params in `params`.
CallbackTranslation EnterExit(const Callback& c, const void* params, int32_t result,
                              CallbackAction* at_enter) {
  CallbackNesting nesting;
  int32_t returned = result;
  CUpti_CallbackData data{};
  data.functionParams = params;
  data.functionReturnValue = &returned;
  data.correlationId = 5;
  data.callbackSite = CUPTI_API_ENTER;
  *at_enter = TranslateCallback(c.domain, c.cbid, data, nesting).action;
  data.callbackSite = CUPTI_API_EXIT;
  return TranslateCallback(c.domain, c.cbid, data, nesting);
}

// What the CUPTI translation makes of a failed call is what the description says: releases take
// their seq at enter; acquires fail as FailedAlloc of their kind; failure-only functions and the
// VMM calls that can fail that way do too, of kind UNSPECIFIED; a retain is a HandleEvent whatever its result.
TEST(CallDescription, CuptiTranslationMakesTheDescribedEvent) {
  constexpr int32_t kOutOfMemory = 2;
  for (const Callback& c : CuptiCallbacks()) {
    const CallDescription& d = *FindCallDescription(c.api);
    CallbackAction at_enter;
    if (agent::IsRelease(d.event)) {
      // Every parameter non-zero: the release names something to release. A release follows no
      // pointer.
      alignas(16) unsigned char nonzero[512];
      std::memset(nonzero, 0x11, sizeof(nonzero));
      CallbackTranslation t = EnterExit(c, nonzero, kOutOfMemory, &at_enter);
      EXPECT_EQ(at_enter, CallbackAction::kTakeSeq) << c.name;
      EXPECT_EQ(t.action, CallbackAction::kEmit) << c.name;
      EXPECT_TRUE(t.seq_from_enter) << c.name;
      EXPECT_EQ(t.record.result, kOutOfMemory) << c.name;
      EXPECT_EQ(t.record.api, c.api) << c.name;
      continue;
    }
    // All zero: null pointers (a failed call reads no out-parameter; cuMemCreate's prop is
    // read, and null says "no device").
    alignas(16) unsigned char zero[512] = {};
    CallbackTranslation t = EnterExit(c, zero, kOutOfMemory, &at_enter);
    EXPECT_EQ(at_enter, CallbackAction::kNone) << c.name;
    switch (d.event) {
      case CallEvent::kTrimPool:
        EXPECT_EQ(t.action, CallbackAction::kNone) << c.name;
        break;
      case CallEvent::kRetainHandle:
      case CallEvent::kExportHandle:
        EXPECT_EQ(t.record.type, RecordType::kHandle) << c.name;
        EXPECT_EQ(t.record.result, kOutOfMemory) << c.name;
        EXPECT_EQ(t.record.api, c.api) << c.name;
        break;
      default:
        EXPECT_EQ(t.action, CallbackAction::kEmit) << c.name;
        EXPECT_EQ(t.record.type, RecordType::kFailed) << c.name;
        EXPECT_EQ(t.record.result, kOutOfMemory) << c.name;
        EXPECT_EQ(t.record.api, c.api) << c.name;
        // An acquire's kind; UNSPECIFIED for the rest, as the preload agent writes them.
        EXPECT_EQ(t.record.kind, d.kind) << c.name;
        break;
    }
  }
}

}  // namespace
}  // namespace fragscope::cupti
