// A module with a known function, loaded by the symbolizer test.
extern "C" __attribute__((noinline)) int fragscope_sample_function(int x) {
  return x * 3 + 1;  // the symbolizer must map addresses here to this file
}
