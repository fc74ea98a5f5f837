// How wrappers get their exported names. A wrapper is defined under a hidden name (fs_drv_*,
// fs_rt*_*) with the real signature, and exported under the CUDA name by an assembler alias:
// cuda.h turns some names into macros (cuMemAlloc -> cuMemAlloc_v2), so the legacy ABIs cannot
// be declared in C++ under their own names, and the hidden name keeps the agent's own
// references to its wrappers direct.
#ifndef FRAGSCOPE_INTERPOSE_HOOK_EXPORTS_H_
#define FRAGSCOPE_INTERPOSE_HOOK_EXPORTS_H_

#define FRAGSCOPE_HIDDEN __attribute__((visibility("hidden")))
#define FRAGSCOPE_VISIBLE __attribute__((visibility("default")))

// Exports `internal` (a function defined in this file) as the unversioned symbol `exported`
// (both string literals).
#define FRAGSCOPE_EXPORT_AS(internal, exported) \
  __asm__(".globl " exported "\n\t.type " exported ", %function\n\t.set " exported ", " internal)

#define FRAGSCOPE_UNPAREN(...) __VA_ARGS__

// Declares the driver wrapper fs_drv_<symbol> with parameter list `params`, exported as
// <symbol>; the function body follows the macro. `symbol` is only ever pasted or stringized,
// never expanded, because cuda.h defines some CUDA names as macros (cuMemAlloc -> cuMemAlloc_v2);
// a macro forwarding its own argument must call FRAGSCOPE_DRIVER_WRAPPER_NAMED the same way.
#define FRAGSCOPE_DRIVER_WRAPPER(symbol, params) \
  FRAGSCOPE_DRIVER_WRAPPER_NAMED(fs_drv_##symbol, "fs_drv_" #symbol, #symbol, params)
#define FRAGSCOPE_DRIVER_WRAPPER_NAMED(internal, internal_name, exported_name, params) \
  extern "C" FRAGSCOPE_HIDDEN CUresult internal params;                                \
  FRAGSCOPE_EXPORT_AS(internal_name, exported_name);                                   \
  extern "C" CUresult internal params

#endif  // FRAGSCOPE_INTERPOSE_HOOK_EXPORTS_H_
