// A module with a known function, loaded by the symbolizer test.
extern "C" __attribute__((noinline)) int fragscope_sample_function(int x) {
  return x * 3 + 1;  // the symbolizer must map addresses here to this file
}

// An inlined call chain: fragscope_sample_outer -> (inlined) SampleInner -> SampleLeaf, which
// records its return address, a pc inside the inlined code.
extern "C" {
void* fragscope_sample_leaf_return = nullptr;
}
__attribute__((noinline)) static void SampleLeaf() {
  fragscope_sample_leaf_return = __builtin_return_address(0);
  asm volatile("" ::: "memory");
}
__attribute__((always_inline)) static inline void SampleInner() {
  SampleLeaf();  // FRAGSCOPE_INLINE_CALL_LINE
}
extern "C" __attribute__((noinline)) void fragscope_sample_outer() {
  SampleInner();  // FRAGSCOPE_OUTER_CALL_LINE
  asm volatile("" ::: "memory");
}
