// How to step from a frame to its caller, read from the code's DWARF call-frame information
// (.eh_frame, found through the loader's .eh_frame_hdr search table) for the stack walk of
// code built without frame pointers. x86-64 only; elsewhere FindUnwindRule says kUnsupported.
//
// A rule says where the caller's frame starts (the CFA: the stack pointer or the frame pointer
// of this frame plus an offset), that the return address sits just below it, and where this
// frame saved the caller's frame pointer, if it did. That is all a walk needs between two calls:
// no other register is needed to find the next return address.
//
// Lookups go through a process-wide cache of 8192 one-word entries (64 KiB of .bss): after a
// pc's first lookup, one load. A miss finds the object with glibc's _dl_find_object (lock-free,
// async-signal-safe, glibc 2.35 and later; without it every rule is kNoInfo) and interprets the
// FDE's instructions up to the pc: no allocation, no lock, no system call, every read inside
// the object's mapping. Safe from any thread and from signal handlers. Not safe against a
// dlclose of the object running at the same time, which no in-process unwinder is; the pcs a
// walk looks up are return addresses on the walking thread's own stack, whose code cannot be
// unloaded while it runs.
#ifndef FRAGSCOPE_INTERPOSE_UNWIND_RULES_H_
#define FRAGSCOPE_INTERPOSE_UNWIND_RULES_H_

#include <atomic>
#include <cstdint>

namespace fragscope::agent {

struct UnwindRule {
  enum class Kind : uint8_t {
    kNoInfo,       // no object or no FDE covers the pc (JIT code, stripped of .eh_frame)
    kUnsupported,  // a rule the walk does not follow: a DWARF expression, a signal frame
    kOutermost,    // the return address is undefined: the thread's first frame (_start)
    kSpBased,      // CFA = this frame's stack pointer + cfa_offset
    kFpBased,      // CFA = this frame's frame pointer + cfa_offset
  };
  Kind kind = Kind::kNoInfo;
  // Bytes; the return address is at CFA - 8 (the walk checks each rule says so).
  int32_t cfa_offset = 0;
  // Where the caller's frame pointer was saved: CFA + fp_offset (bytes, negative); 0 means this
  // frame left the frame pointer as the caller had it.
  int32_t fp_offset = 0;

  // The frame-pointer rule: `push rbp; mov rbp, rsp` done, so the caller's frame pointer and
  // return address are the record at the frame pointer.
  bool IsFramePointerRecord() const {
    return kind == Kind::kFpBased && cfa_offset == 16 && fp_offset == -16;
  }
};

// Signature of glibc's _dl_find_object (dlfcn.h, glibc 2.35), taken as an opaque pointer so
// the agent needs no newer glibc to load: the agent finds it with dlsym at start.
using FindObjectFn = int (*)(void* address, void* result);
// Sets the function misses use; nullptr turns CFI lookups off (every rule kNoInfo).
void SetFindObject(FindObjectFn fn);
// True once SetFindObject was given a function (and the architecture is supported).
bool CfiUnwindAvailable();

// The same as FindUnwindRule without the cache (tests, and rules that do not fit an entry).
UnwindRule ComputeUnwindRule(uintptr_t pc);

namespace internal {

// Cache entry, keyed by return address (a walk's pcs, below 2^47: user space on x86-64): in the
// low 34 bits the address without its low 13 (the entry's index and those 34 bits give them
// back: RuleCacheIndex xors the low 13 bits with bits the entry holds, so two addresses that
// share an entry differ in what it holds), above it the rule of the call before it: kind
// (3 bits), -fp_offset / 8 (5 bits), cfa_offset / 8 (22 bits: frames up to 32 MiB; the top bits,
// so a walk gets them with one shift). One word, so a reader never sees half of another entry.
// Rules that do not fit are not cached.
inline constexpr int kRuleCacheBits = 13;
inline constexpr int kRuleKeyBits = 47 - kRuleCacheBits;
inline constexpr uint64_t kRuleKeyMask = (uint64_t{1} << kRuleKeyBits) - 1;
inline constexpr int kRuleCfaBits = 64 - kRuleKeyBits - 8;
extern std::atomic<uint64_t> g_rule_cache[1 << kRuleCacheBits];

// Shifts and an xor: a multiply would lengthen the walk's chain of dependent steps.
inline size_t RuleCacheIndex(uintptr_t return_address) {
  return static_cast<size_t>((return_address ^ (return_address >> kRuleCacheBits)) &
                             ((1u << kRuleCacheBits) - 1));
}
inline constexpr uint32_t PackRuleBits(UnwindRule::Kind kind, int32_t cfa_offset,
                                       int32_t fp_offset) {
  return static_cast<uint32_t>(kind) | static_cast<uint32_t>(-fp_offset / 8) << 3 |
         static_cast<uint32_t>(cfa_offset / 8) << 8;
}
inline UnwindRule UnpackRuleBits(uint32_t bits) {
  UnwindRule rule;
  rule.kind = static_cast<UnwindRule::Kind>(bits & 7);
  rule.fp_offset = -static_cast<int32_t>((bits >> 3) & 31) * 8;
  rule.cfa_offset = static_cast<int32_t>(bits >> 8) * 8;
  return rule;
}
// The frame-pointer rule's bits: a walk compares them without unpacking.
inline constexpr uint32_t kFramePointerRuleBits = PackRuleBits(UnwindRule::Kind::kFpBased, 16, -16);

// A miss: computes the rule of the call before `return_address` and caches it when it fits.
UnwindRule FindReturnRuleSlow(uintptr_t return_address);

}  // namespace internal

// Sets *bits to the cached rule of the call that returns to `return_address` and returns true,
// or returns false on a miss. Inline: a hit costs a walk two shifts, an xor and a load.
[[gnu::always_inline]] inline bool CachedReturnRuleBits(uintptr_t return_address, uint32_t* bits) {
  const uint64_t entry = internal::g_rule_cache[internal::RuleCacheIndex(return_address)].load(
      std::memory_order_relaxed);
  const uint64_t key = return_address >> internal::kRuleCacheBits;
  if ((entry & internal::kRuleKeyMask) != key || key == 0) return false;
  *bits = static_cast<uint32_t>(entry >> internal::kRuleKeyBits);
  return true;
}

// The rule for the instruction at `pc` (for a return address, pass the call's last byte:
// return address - 1, so a call at a function's end finds its own FDE). Cached by pc + 1.
inline UnwindRule FindUnwindRule(uintptr_t pc) {
  uint32_t bits;
  if (CachedReturnRuleBits(pc + 1, &bits)) return internal::UnpackRuleBits(bits);
  return internal::FindReturnRuleSlow(pc + 1);
}

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_UNWIND_RULES_H_
