// The 64-bit hash that names a call stack in the stack table, in four independent lanes (frame
// i goes to lane i % 4) so that four multiply chains run side by side. CaptureStack feeds the
// lanes frame by frame during the frame-pointer walk (stack_capture.cc), so the multiplies
// overlap the walk's chain of dependent loads instead of following it; HashStack
// (stack_table.h) hashes a finished array. Both give the same value for the same frames.
//
// Thread safety: pure functions. Header-only so that both users inline them.
#ifndef FRAGSCOPE_INTERPOSE_STACK_HASH_H_
#define FRAGSCOPE_INTERPOSE_STACK_HASH_H_

#include <cstdint>

namespace fragscope::agent::stack_hash {

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// MurmurHash3's 64-bit finalizer: every input bit reaches every output bit.
inline uint64_t Fmix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline uint64_t Step(uint64_t lane, uint64_t pc) {
  lane = (lane ^ pc) * 0x9e3779b97f4a7c15ull;
  return lane ^ (lane >> 29);
}

inline constexpr uint64_t kSeed[4] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull,
                                      0x1b873593cc9e2d51ull, 0x2d51cc9e1b873593ull};

// Joins the lanes with the frame count. Rotations keep the lanes apart (a frame moved to
// another lane changes the hash); the count, multiplied apart from small lane values, keeps
// a stack apart from its prefixes. Never 0 (0 means "no stack").
inline uint64_t Finish(uint64_t l0, uint64_t l1, uint64_t l2, uint64_t l3, int count) {
  const uint64_t h = Fmix(l0 ^ Rotl(l1, 16) ^ Rotl(l2, 32) ^ Rotl(l3, 48) ^
                          static_cast<uint64_t>(count) * 0xc2b2ae3d27d4eb4full);
  return h == 0 ? 1 : h;
}

}  // namespace fragscope::agent::stack_hash

#endif  // FRAGSCOPE_INTERPOSE_STACK_HASH_H_
