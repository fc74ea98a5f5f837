// In-place hooks for an agent injected into a running process (x86-64 only).
//
// Pointers to driver functions that a program cached before the attach live in private statics
// (the runtime's tables, PyTorch's, NCCL's), so there is nothing to rebind: the function itself
// is patched. Its first instructions (at least kJumpBytes) are replaced by an absolute jump to
// the agent's wrapper (`jmp [rip+0]; .quad wrapper`, padded with int3 to an instruction
// boundary), and a trampoline holds those instructions, relocated, followed by an absolute jump
// back to the rest of the function. The wrapper calls the trampoline as "the real function".
// A function shorter than that (many driver exports are a register move and a tail call) gets
// a 5-byte `jmp rel32` to a relay beside its trampoline, which jumps on to the wrapper.
//
// Relocation (instructions decoded with Capstone, loaded with dlopen when first needed so the
// preloaded agent keeps linking nothing but libc):
// - RIP-relative memory operands (lea, mov, cmp, ...): the displacement is rewritten for the
//   trampoline's address; trampolines are allocated within +-2 GiB of the function for this.
// - Relative jmp/jcc/call: rewritten as absolute jumps/calls (any distance).
// Refused (with the reason): a function shorter than 5 bytes (by its ELF size, or ending in a
// ret/jmp inside its first 5 bytes), loop/jrcxz, a branch in the prologue that targets the
// prologue, a call in the prologue other than its last instruction (a thread inside the callee
// would return into the jump), and any branch in the rest of the function (when its size is
// known) that jumps into the overwritten bytes other than their first byte.
//
// Writing the jump: Apply()/Restore() do it in this process (mprotect + memcpy), which is only
// safe when no other thread can be executing those bytes (the unit tests; the injected agent
// leaves the writing to `fragscope attach`, which stops every thread with ptrace first).
// Trampolines are never freed: a thread may still be inside one after the restore.
#ifndef FRAGSCOPE_INTERPOSE_INLINE_PATCH_H_
#define FRAGSCOPE_INTERPOSE_INLINE_PATCH_H_

#include <cstddef>
#include <cstdint>

namespace fragscope::agent {

inline constexpr size_t kJumpBytes = 14;      // jmp [rip+0] (6) + 8-byte address
inline constexpr size_t kShortJumpBytes = 5;  // jmp rel32 to a relay (functions < 14 bytes)
inline constexpr size_t kMaxPatchBytes = 32;  // whole instructions covering kJumpBytes
inline constexpr size_t kTrampolineBytes = 192;
inline constexpr size_t kRelayOffset = kTrampolineBytes - kJumpBytes;  // in the same slot

struct InlinePatch {
  uintptr_t target = 0;  // the function's first byte
  uint32_t length = 0;   // bytes replaced: whole instructions, >= the jump
  uint8_t original[kMaxPatchBytes] = {};
  uint8_t patch[kMaxPatchBytes] = {};  // the jump (14 or 5 bytes), then int3 up to `length`
  void* trampoline = nullptr;          // call this to run the original function
};

class InlinePatcher {
 public:
  InlinePatcher() = default;
  ~InlinePatcher();
  InlinePatcher(const InlinePatcher&) = delete;
  InlinePatcher& operator=(const InlinePatcher&) = delete;

  // Loads Capstone (libcapstone.so.<major of the headers we were built with>). False, with
  // the reason in `why`, if it is not installed or the machine is not x86-64.
  bool Init(char* why, size_t why_size);

  // Decodes `target`, checks it can be patched, and writes its trampoline (into a writable
  // page: call Seal() before anything executes it). `function_size` is the ELF symbol size,
  // 0 when unknown (then only the prologue is checked). Does not modify `target`.
  bool Prepare(void* target, size_t function_size, void* replacement, InlinePatch* out, char* why,
               size_t why_size);

  // Makes every trampoline prepared so far executable (and no longer writable).
  bool Seal();

  // In-process write of the jump / the original bytes (see the header comment for when this is
  // safe). Restore only writes when the bytes are still our patch.
  static bool Apply(const InlinePatch& p, char* why, size_t why_size);
  static bool Restore(const InlinePatch& p, char* why, size_t why_size);

 private:
  struct Pool {
    uint8_t* base;
    size_t size;
    size_t used;
    bool sealed;
  };
  uint8_t* TrampolineNear(uintptr_t target);
  bool PrepareWith(size_t jump_bytes, void* target, size_t function_size, void* replacement,
                   InlinePatch* out, char* why, size_t why_size, bool* too_short);

  void* capstone_ = nullptr;  // dlopen handle
  size_t handle_ = 0;         // csh
  static constexpr int kMaxPools = 8;
  Pool pools_[kMaxPools] = {};
  int pool_count_ = 0;
};

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_INLINE_PATCH_H_
