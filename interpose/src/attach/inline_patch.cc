#include "attach/inline_patch.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__) && !defined(FRAGSCOPE_NO_CAPSTONE)
#include <capstone/capstone.h>
#define FRAGSCOPE_INLINE_PATCH_SUPPORTED 1
#endif

namespace fragscope::agent {
namespace {

void Say(char* why, size_t why_size, const char* format, ...) {
  if (why == nullptr || why_size == 0) return;
  va_list args;
  va_start(args, format);
  vsnprintf(why, why_size, format, args);
  va_end(args);
}

// Writes `jmp [rip+0]; .quad to` at `at`; returns the bytes written.
[[maybe_unused]] size_t EmitAbsoluteJump(uint8_t* at, uint64_t to) {
  static const uint8_t kJmp[6] = {0xFF, 0x25, 0, 0, 0, 0};
  memcpy(at, kJmp, sizeof(kJmp));
  memcpy(at + 6, &to, 8);
  return kJumpBytes;
}

uintptr_t PageOf(uintptr_t a) { return a & ~(static_cast<uintptr_t>(getpagesize()) - 1); }

bool WriteCode(uintptr_t at, const uint8_t* bytes, size_t n, char* why, size_t why_size) {
  const uintptr_t first = PageOf(at);
  const size_t span = PageOf(at + n - 1) - first + static_cast<size_t>(getpagesize());
  void* page = reinterpret_cast<void*>(first);
  if (mprotect(page, span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
    Say(why, why_size, "mprotect(%#lx, %zu) failed: %s", static_cast<unsigned long>(first), span,
        strerror(errno));
    return false;
  }
  memcpy(reinterpret_cast<void*>(at), bytes, n);
  mprotect(page, span, PROT_READ | PROT_EXEC);
  return true;
}

}  // namespace

#ifdef FRAGSCOPE_INLINE_PATCH_SUPPORTED
namespace {

struct Capstone {
  decltype(&cs_open) open = nullptr;
  decltype(&cs_option) option = nullptr;
  decltype(&cs_disasm) disasm = nullptr;
  decltype(&cs_free) free = nullptr;
  decltype(&cs_close) close = nullptr;
  decltype(&cs_strerror) strerror = nullptr;
};
constinit Capstone g_cs;

#define FRAGSCOPE_STR2(x) #x
#define FRAGSCOPE_STR(x) FRAGSCOPE_STR2(x)
// The soname of the major version whose headers (struct layouts) we were compiled with.
constexpr char kCapstoneSoname[] = "libcapstone.so." FRAGSCOPE_STR(CS_API_MAJOR);

bool HasGroup(const cs_insn& insn, uint8_t group) {
  for (uint8_t i = 0; i < insn.detail->groups_count; ++i) {
    if (insn.detail->groups[i] == group) return true;
  }
  return false;
}

bool RipRelative(const cs_insn& insn) {
  const cs_x86& x = insn.detail->x86;
  for (uint8_t i = 0; i < x.op_count; ++i) {
    if (x.operands[i].type == X86_OP_MEM && x.operands[i].mem.base == X86_REG_RIP) return true;
  }
  return false;
}

// The absolute target of a relative branch (Capstone resolves it against the address given).
uint64_t BranchTarget(const cs_insn& insn) {
  const cs_x86& x = insn.detail->x86;
  for (uint8_t i = 0; i < x.op_count; ++i) {
    if (x.operands[i].type == X86_OP_IMM) return static_cast<uint64_t>(x.operands[i].imm);
  }
  return 0;
}

bool IsLoopLike(unsigned id) {
  return id == X86_INS_JRCXZ || id == X86_INS_JECXZ || id == X86_INS_JCXZ || id == X86_INS_LOOP ||
         id == X86_INS_LOOPE || id == X86_INS_LOOPNE;
}

// The condition code (0..15) of a jcc, from its opcode bytes; -1 if it is not one.
int ConditionCode(const cs_insn& insn) {
  const uint8_t* op = insn.detail->x86.opcode;
  if (op[0] >= 0x70 && op[0] <= 0x7F) return op[0] - 0x70;
  if (op[0] == 0x0F && op[1] >= 0x80 && op[1] <= 0x8F) return op[1] - 0x80;
  return -1;
}

bool WithinInt32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

}  // namespace

InlinePatcher::~InlinePatcher() {
  if (handle_ != 0 && g_cs.close != nullptr) {
    csh h = handle_;
    g_cs.close(&h);
  }
  // The Capstone library and the trampolines stay: patched code may still run through them.
}

bool InlinePatcher::Init(char* why, size_t why_size) {
  if (handle_ != 0) return true;
  if (g_cs.open == nullptr) {
    capstone_ = dlopen(kCapstoneSoname, RTLD_NOW | RTLD_LOCAL);
    if (capstone_ == nullptr) {
      Say(why, why_size,
          "cannot load %s (the instruction decoder the in-place hooks need; install Capstone "
          "%d, e.g. apt-get install libcapstone%d): %s",
          kCapstoneSoname, CS_API_MAJOR, CS_API_MAJOR, dlerror());
      return false;
    }
    Capstone cs;
    cs.open = reinterpret_cast<decltype(cs.open)>(dlsym(capstone_, "cs_open"));
    cs.option = reinterpret_cast<decltype(cs.option)>(dlsym(capstone_, "cs_option"));
    cs.disasm = reinterpret_cast<decltype(cs.disasm)>(dlsym(capstone_, "cs_disasm"));
    cs.free = reinterpret_cast<decltype(cs.free)>(dlsym(capstone_, "cs_free"));
    cs.close = reinterpret_cast<decltype(cs.close)>(dlsym(capstone_, "cs_close"));
    cs.strerror = reinterpret_cast<decltype(cs.strerror)>(dlsym(capstone_, "cs_strerror"));
    if (cs.open == nullptr || cs.option == nullptr || cs.disasm == nullptr || cs.free == nullptr ||
        cs.close == nullptr || cs.strerror == nullptr) {
      Say(why, why_size, "%s lacks the cs_* functions", kCapstoneSoname);
      return false;
    }
    g_cs = cs;
  }
  csh h = 0;
  cs_err e = g_cs.open(CS_ARCH_X86, CS_MODE_64, &h);
  if (e != CS_ERR_OK) {
    Say(why, why_size, "cs_open: %s", g_cs.strerror(e));
    return false;
  }
  g_cs.option(h, CS_OPT_DETAIL, CS_OPT_ON);
  handle_ = h;
  return true;
}

uint8_t* InlinePatcher::TrampolineNear(uintptr_t target) {
  constexpr int64_t kReach = int64_t{1} << 30;  // well inside +-2 GiB, for any rip operand
  for (int i = 0; i < pool_count_; ++i) {
    Pool& p = pools_[i];
    const int64_t distance =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(p.base)) - static_cast<int64_t>(target);
    if (!p.sealed && p.used + kTrampolineBytes <= p.size && distance < kReach &&
        distance > -kReach) {
      uint8_t* slot = p.base + p.used;
      p.used += kTrampolineBytes;
      return slot;
    }
  }
  if (pool_count_ == kMaxPools) return nullptr;
  // A free spot near the target: below it first (libraries are mapped top-down), then above.
  constexpr size_t kPoolBytes = 64 * 1024;
  constexpr uintptr_t kStep = uintptr_t{1} << 20;
  const uintptr_t origin = target & ~(kStep - 1);
  void* found = nullptr;
  for (uintptr_t delta = kStep; delta < static_cast<uintptr_t>(kReach) && found == nullptr;
       delta += kStep) {
    for (int side = 0; side < 2 && found == nullptr; ++side) {
      if (side == 0 && origin < delta + kStep) continue;
      const uintptr_t want = side == 0 ? origin - delta : origin + delta;
      void* got = mmap(reinterpret_cast<void*>(want), kPoolBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (got == MAP_FAILED) continue;
      if (got != reinterpret_cast<void*>(want)) {  // an old kernel took it as a hint
        munmap(got, kPoolBytes);
        continue;
      }
      found = got;
    }
  }
  if (found == nullptr) return nullptr;
  Pool& p = pools_[pool_count_++];
  p = Pool{static_cast<uint8_t*>(found), kPoolBytes, kTrampolineBytes, false};
  return p.base;
}

bool InlinePatcher::Seal() {
  bool ok = true;
  for (int i = 0; i < pool_count_; ++i) {
    Pool& p = pools_[i];
    if (p.sealed) continue;
    if (mprotect(p.base, p.size, PROT_READ | PROT_EXEC) != 0) ok = false;
    p.sealed = true;
  }
  return ok;
}

bool InlinePatcher::Prepare(void* target_fn, size_t function_size, void* replacement,
                            InlinePatch* out, char* why, size_t why_size) {
  bool too_short = false;
  if (PrepareWith(kJumpBytes, target_fn, function_size, replacement, out, why, why_size,
                  &too_short)) {
    return true;
  }
  // Many exported driver functions are a few instructions and a tail call, or branch within
  // their first 14 bytes: a 5-byte jump to a relay next to the trampoline (within +-2 GiB)
  // overwrites less. Its reason stands if it fails too, unless the only problem was length.
  char first_why[512];
  snprintf(first_why, sizeof(first_why), "%s", why != nullptr ? why : "");
  bool ignored = false;
  if (PrepareWith(kShortJumpBytes, target_fn, function_size, replacement, out, why, why_size,
                  &ignored)) {
    return true;
  }
  if (!too_short && why != nullptr && why_size > 0) snprintf(why, why_size, "%s", first_why);
  return false;
}

bool InlinePatcher::PrepareWith(size_t jump_bytes, void* target_fn, size_t function_size,
                                void* replacement, InlinePatch* out, char* why, size_t why_size,
                                bool* too_short) {
  *too_short = false;
  if (handle_ == 0) {
    Say(why, why_size, "the patcher is not initialized");
    return false;
  }
  const uintptr_t target = reinterpret_cast<uintptr_t>(target_fn);
  const uint8_t* code = static_cast<const uint8_t*>(target_fn);
  // Enough bytes for the instructions that cover the jump (at most 15 bytes each).
  size_t window = kMaxPatchBytes + 15;
  if (function_size != 0 && function_size < window) window = function_size;
  if (function_size != 0 && function_size < jump_bytes) {
    Say(why, why_size, "the function is %zu bytes, shorter than the %zu-byte jump", function_size,
        jump_bytes);
    *too_short = true;
    return false;
  }
  cs_insn* insn = nullptr;
  const size_t count = g_cs.disasm(handle_, code, window, target, 0, &insn);
  uint8_t buffer[kTrampolineBytes];
  size_t emitted = 0;
  size_t length = 0;
  bool ok = true;
  // Branch targets of the relocated prologue, checked once its length is known.
  struct Branch {
    uint64_t to;
    bool call;
  } jumps[8];
  int jump_count = 0;
  for (size_t i = 0; i < count && length < jump_bytes && ok; ++i) {
    const cs_insn& in = insn[i];
    const size_t at = length;
    const bool relative = HasGroup(in, CS_GRP_BRANCH_RELATIVE);
    const bool is_call = HasGroup(in, CS_GRP_CALL);
    const bool is_jump = HasGroup(in, CS_GRP_JUMP);
    const bool ends = HasGroup(in, CS_GRP_RET) || in.id == X86_INS_INT3 || in.id == X86_INS_UD2 ||
                      in.id == X86_INS_HLT ||
                      (is_jump && ConditionCode(in) < 0 && in.id == X86_INS_JMP);
    if (IsLoopLike(in.id)) {
      Say(why, why_size, "+%zu: %s %s cannot be relocated", at, in.mnemonic, in.op_str);
      ok = false;
      break;
    }
    if (ends && at + in.size < jump_bytes && function_size == 0) {
      Say(why, why_size,
          "the function may end after %zu bytes (%s at +%zu), before the %zu-byte jump",
          at + in.size, in.mnemonic, at, jump_bytes);
      *too_short = true;
      ok = false;
      break;
    }
    if (emitted + in.size + 18 + kJumpBytes > kRelayOffset) {
      Say(why, why_size, "the relocated prologue does not fit a trampoline");
      ok = false;
      break;
    }
    if (relative && (is_jump || is_call)) {
      const uint64_t to = BranchTarget(in);
      if (jump_count == 8) {
        Say(why, why_size, "too many branches in the prologue");
        ok = false;
        break;
      }
      jumps[jump_count++] = Branch{to, is_call};
      if (is_call) {
        // call [rip+2]; jmp +8; .quad to -- returns into the trampoline, past the address.
        static const uint8_t kCall[8] = {0xFF, 0x15, 2, 0, 0, 0, 0xEB, 8};
        memcpy(buffer + emitted, kCall, sizeof(kCall));
        memcpy(buffer + emitted + 8, &to, 8);
        emitted += 16;
      } else if (int cc = ConditionCode(in); cc >= 0) {
        // jcc taken; jmp over; taken: jmp [rip+0]; .quad to
        buffer[emitted++] = static_cast<uint8_t>(0x70 + cc);
        buffer[emitted++] = 2;
        buffer[emitted++] = 0xEB;
        buffer[emitted++] = static_cast<uint8_t>(kJumpBytes);
        emitted += EmitAbsoluteJump(buffer + emitted, to);
      } else {
        emitted += EmitAbsoluteJump(buffer + emitted, to);
      }
    } else if (RipRelative(in)) {
      // Same instruction, displacement rewritten for the trampoline's address (known below:
      // remember where it goes).
      const cs_x86_encoding& enc = in.detail->x86.encoding;
      if (enc.disp_offset == 0 || enc.disp_size != 4) {
        Say(why, why_size, "+%zu: %s %s: unexpected rip-relative encoding", at, in.mnemonic,
            in.op_str);
        ok = false;
        break;
      }
      memcpy(buffer + emitted, in.bytes, in.size);
      // Marker for the fix-up pass: keep the absolute target in the displacement's place for
      // now; fixed once the slot address is known.
      emitted += in.size;
    } else {
      memcpy(buffer + emitted, in.bytes, in.size);
      emitted += in.size;
    }
    length += in.size;
    if (is_call && length < jump_bytes) {
      // A thread inside the callee when the jump is written would return into the middle of
      // it. Only a call that is the last instruction overwritten returns past the jump.
      Say(why, why_size,
          "the call at +%zu would return to +%zu, inside the overwritten bytes (a thread in "
          "the callee would return into the jump)",
          at, length);
      ok = false;
      break;
    }
  }
  if (ok && length < jump_bytes) {
    Say(why, why_size, "only %zu bytes of instructions could be decoded at %p", length, target_fn);
    ok = false;
  }
  if (ok && length > kMaxPatchBytes) {
    Say(why, why_size, "the prologue (%zu bytes) is longer than %zu", length, kMaxPatchBytes);
    ok = false;
  }
  if (ok && function_size != 0 && length > function_size) {
    Say(why, why_size, "the function is %zu bytes, shorter than the %zu bytes to overwrite",
        function_size, length);
    *too_short = true;
    ok = false;
  }
  for (int j = 0; ok && j < jump_count; ++j) {
    // A call of the function itself is a call; anything else landing in the overwritten bytes
    // would run our jump's bytes.
    const uint64_t to = jumps[j].to;
    if (to >= target + (jumps[j].call ? 1 : 0) && to < target + length) {
      Say(why, why_size, "a %s in the prologue targets +%zu, inside the overwritten bytes",
          jumps[j].call ? "call" : "jump", static_cast<size_t>(to - target));
      ok = false;
    }
  }
  // The rest of the function: nothing may jump into the overwritten bytes (only a call to its
  // first byte is fine: that is a call of the function).
  if (ok && function_size > length) {
    size_t offset = length;
    while (ok && offset < function_size) {
      cs_insn* rest = nullptr;
      const size_t n =
          g_cs.disasm(handle_, code + offset, function_size - offset, target + offset, 0, &rest);
      size_t consumed = 0;
      for (size_t i = 0; i < n && ok; ++i) {
        consumed += rest[i].size;
        if (!HasGroup(rest[i], CS_GRP_BRANCH_RELATIVE)) continue;
        const uint64_t to = BranchTarget(rest[i]);
        const bool call = HasGroup(rest[i], CS_GRP_CALL);
        if (to >= target + (call ? 1 : 0) && to < target + length) {
          Say(why, why_size, "the %s at +%zu targets +%zu, inside the overwritten bytes",
              rest[i].mnemonic, static_cast<size_t>(rest[i].address - target),
              static_cast<size_t>(to - target));
          ok = false;
        }
      }
      if (rest != nullptr) g_cs.free(rest, n);
      offset += consumed == 0 ? 1 : consumed;  // undecodable byte (data, padding): skip it
    }
  }
  uint8_t* slot = nullptr;
  if (ok) {
    slot = TrampolineNear(target);
    if (slot == nullptr) {
      Say(why, why_size, "no memory for a trampoline within reach of %p", target_fn);
      ok = false;
    }
  }
  if (ok) {
    // Second pass over the prologue: rewrite rip-relative displacements for the slot.
    size_t src = 0, dst = 0;
    for (size_t i = 0; i < count && src < length && ok; ++i) {
      const cs_insn& in = insn[i];
      const bool relative = HasGroup(in, CS_GRP_BRANCH_RELATIVE);
      const bool is_call = HasGroup(in, CS_GRP_CALL);
      const bool is_jump = HasGroup(in, CS_GRP_JUMP);
      size_t size_here = in.size;
      if (relative && (is_jump || is_call)) {
        size_here = is_call ? 16 : (ConditionCode(in) >= 0 ? 4 + kJumpBytes : kJumpBytes);
      } else if (RipRelative(in)) {
        const cs_x86_encoding& enc = in.detail->x86.encoding;
        const int64_t absolute = static_cast<int64_t>(in.address + in.size) + in.detail->x86.disp;
        const int64_t next =
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(slot) + dst + in.size);
        const int64_t disp = absolute - next;
        if (!WithinInt32(disp)) {
          Say(why, why_size, "+%zu: %s %s: its operand is out of reach of the trampoline", src,
              in.mnemonic, in.op_str);
          ok = false;
          break;
        }
        const int32_t d32 = static_cast<int32_t>(disp);
        memcpy(buffer + dst + enc.disp_offset, &d32, 4);
      }
      src += in.size;
      dst += size_here;
    }
    emitted += EmitAbsoluteJump(buffer + emitted, target + length);
  }
  if (insn != nullptr) g_cs.free(insn, count);
  if (!ok) return false;
  memcpy(slot, buffer, emitted);
  InlinePatch p;
  p.target = target;
  p.length = static_cast<uint32_t>(length);
  memcpy(p.original, code, length);
  if (jump_bytes == kJumpBytes) {
    EmitAbsoluteJump(p.patch, reinterpret_cast<uint64_t>(replacement));
  } else {
    // jmp rel32 to the relay, which jumps (absolute) to the replacement.
    uint8_t* relay = slot + kRelayOffset;
    EmitAbsoluteJump(relay, reinterpret_cast<uint64_t>(replacement));
    const int64_t rel = static_cast<int64_t>(reinterpret_cast<uintptr_t>(relay)) -
                        static_cast<int64_t>(target + kShortJumpBytes);
    const int32_t rel32 = static_cast<int32_t>(rel);
    p.patch[0] = 0xE9;
    memcpy(p.patch + 1, &rel32, 4);
  }
  memset(p.patch + jump_bytes, 0xCC, length - jump_bytes);  // int3: never executed
  p.trampoline = slot;
  *out = p;
  return true;
}

#else  // not x86-64, or built without Capstone

InlinePatcher::~InlinePatcher() = default;

bool InlinePatcher::Init(char* why, size_t why_size) {
#if defined(__x86_64__)
  Say(why, why_size, "this agent was built without Capstone (install libcapstone-dev)");
#else
  Say(why, why_size, "in-place hooks are implemented for x86-64 only");
#endif
  return false;
}
uint8_t* InlinePatcher::TrampolineNear(uintptr_t) { return nullptr; }
bool InlinePatcher::Seal() { return false; }
bool InlinePatcher::Prepare(void*, size_t, void*, InlinePatch*, char* why, size_t why_size) {
  Say(why, why_size, "in-place hooks are not available in this build");
  return false;
}
bool InlinePatcher::PrepareWith(size_t, void*, size_t, void*, InlinePatch*, char*, size_t, bool*) {
  return false;
}

#endif

bool InlinePatcher::Apply(const InlinePatch& p, char* why, size_t why_size) {
  if (p.target == 0 || p.length < kShortJumpBytes || p.length > kMaxPatchBytes) {
    Say(why, why_size, "not a prepared patch");
    return false;
  }
  if (memcmp(reinterpret_cast<const void*>(p.target), p.original, p.length) != 0) {
    Say(why, why_size, "the bytes at %#lx changed since the patch was prepared",
        static_cast<unsigned long>(p.target));
    return false;
  }
  return WriteCode(p.target, p.patch, p.length, why, why_size);
}

bool InlinePatcher::Restore(const InlinePatch& p, char* why, size_t why_size) {
  if (p.target == 0 || p.length < kShortJumpBytes || p.length > kMaxPatchBytes) {
    Say(why, why_size, "not a prepared patch");
    return false;
  }
  if (memcmp(reinterpret_cast<const void*>(p.target), p.patch, p.length) != 0) {
    Say(why, why_size, "the bytes at %#lx are not our patch", static_cast<unsigned long>(p.target));
    return false;
  }
  return WriteCode(p.target, p.original, p.length, why, why_size);
}

}  // namespace fragscope::agent
