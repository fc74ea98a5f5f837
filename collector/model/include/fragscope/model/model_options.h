// Knobs of the collector model. Plain values; copy freely.
#ifndef FRAGSCOPE_MODEL_MODEL_OPTIONS_H_
#define FRAGSCOPE_MODEL_MODEL_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fragscope {

struct ModelOptions {
  // Below this many cached bytes the fragmentation ratio is noise (one 2 MiB page free in a
  // 4 MiB cache reads as 50 %), so it is reported as null with a reason. Bytes.
  uint64_t fragmentation_floor_bytes = uint64_t{64} << 20;

  // A segment allocated from inside a module whose file name (not the whole path:
  // "/home/rmm/..." must not match "rmm") contains one of these (its innermost frame in a known
  // module, past libcudart and libcuda, lies there) is carved by a caching allocator we cannot
  // see, so it is `opaque` until annotations arrive for it.
  std::vector<std::string> caching_allocator_modules = {"libc10_cuda", "libtorch_cuda", "cupy",
                                                        "rmm",         "xla",           "jax"};

  // Timeline samples kept per device; older samples are thinned (every other one dropped and the
  // sampling stride doubled) when the series is full, so memory stays bounded.
  std::size_t timeline_max_points = 1024;

  // Sites kept in a summary and in each OOM post-mortem (largest live bytes first).
  std::size_t top_sites = 20;

  // Events remembered before each failure (per device) for post-mortems.
  std::size_t recent_events = 20;

  // Unrecovered failures whose post-mortem is kept; later ones are listed without one.
  std::size_t max_postmortems = 64;
  // Post-mortems that keep the segment map of their device at the failure (the latest ones;
  // each costs O(blocks) of memory), the segments each map keeps at most (the largest), and the
  // most segments + blocks a device may hold for its map to be copied. Copies are also held to
  // 64 entries per event applied on average (plus one map of the largest size), so a run that
  // fails over and over is not replayed in O(failures x blocks).
  std::size_t max_postmortem_maps = 8;
  std::size_t postmortem_map_segments = 1024;
  std::size_t postmortem_map_max_entries = 262144;

  // Memory every CUDA process holds outside its segments (context, module images). Subtracted
  // from the device total before deciding that a request "would fit in the device" (class
  // `external` vs `capacity`). 0 means: count all of it as external. Bytes.
  uint64_t context_overhead_bytes = 0;

  // Whether PyTorch's `expandable_segments:True` is already in force, when the caller knows it
  // (e.g. from the environment of `fragscope run`). Changes the advice for fragmentation.
  std::optional<bool> expandable_segments;
};

}  // namespace fragscope

#endif  // FRAGSCOPE_MODEL_MODEL_OPTIONS_H_
