/* fragscope annotations for sub-allocators (caching allocators, memory pools, arenas).
 *
 * A program that carves the device memory it got from CUDA into blocks of its own tells
 * fragscope about those blocks here, so reports can show the blocks, the free ranges between
 * them and why a large request did not fit (fragmentation) instead of one opaque segment.
 *
 * Works with and without the agent: the functions are declared weak. When libfragscope.so is
 * preloaded they resolve to the agent; otherwise their addresses are null and the inline
 * fragscope_annotate_* wrappers below do nothing. Call the wrappers, not the raw functions.
 * (Weak references are resolved at run time in position-independent executables and shared
 * libraries, the defaults on current distributions; a non-PIE executable may bind them to null
 * at link time.)
 *
 * Units: sizes in bytes; `device` is the CUDA device ordinal; `stream` is the cudaStream_t /
 * CUstream the block belongs to (NULL for the default stream); `pool` is any id the caller uses
 * to tell its pools apart (0 = default).
 * Thread safety: every function may be called from any thread at any time, including before
 * main and after exit; none blocks or allocates, but fragscope_source_stack, which may wait on a
 * lock. Pointers are only recorded, never dereferenced (the label of fragscope_mark and the
 * frames' text of fragscope_source_stack are copied).
 */
#ifndef FRAGSCOPE_ANNOTATE_H_
#define FRAGSCOPE_ANNOTATE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A block of `size` bytes at `ptr` was handed to the program by the sub-allocator. */
void fragscope_block_alloc(void* ptr, size_t size, int device, void* stream, uint64_t pool)
    __attribute__((weak));
/* The same for a block reported after the fact (read from the sub-allocator's own state, e.g.
 * a snapshot diff): recorded without a stack, since the caller is not where it was allocated. */
void fragscope_block_alloc_late(void* ptr, size_t size, int device, void* stream, uint64_t pool)
    __attribute__((weak));
/* The block at `ptr` is free again (reusable now). */
void fragscope_block_free(void* ptr, int device, void* stream) __attribute__((weak));
/* The program released the block at `ptr`, but it is not reusable until `stream` passes this
 * point (stream-ordered free); report fragscope_block_free once it is. */
void fragscope_block_free_pending(void* ptr, int device, void* stream) __attribute__((weak));
/* The sub-allocator could not satisfy a request of `size` bytes (its own out-of-memory). */
void fragscope_alloc_failed(size_t size, int device, void* stream) __attribute__((weak));
/* A label in the timeline, e.g. "step 12"; reports and gates use it to speak of steps. */
void fragscope_mark(const char* label) __attribute__((weak));
/* For a sub-allocator that is not followed block by block but read from its own state at times
 * (a snapshot diff): its blocks were just brought up to date, with the block events above sent
 * before this call. A mark labelled `label` that tells reports the blocks are known at such
 * syncs only: figures between two syncs (peaks, fragmentation maxima) may miss blocks that came
 * and went, and a failure long after the last sync is not judged against its blocks. */
void fragscope_blocks_synced(const char* label) __attribute__((weak));
/* Which rank of a distributed job this process is (`rank` >= 0), and the job's size
 * (`world_size` > rank; anything else: unknown), for a program that learns it after start
 * without a launcher variable the agent reads (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK,
 * SLURM_PROCID): e.g. torch.multiprocessing.spawn workers, which pass their rank to
 * torch.distributed.init_process_group. Reports name the process by it from then on; a mark
 * "rank R of N" shows when it was set. A negative rank is ignored. */
void fragscope_set_rank(int rank, int world_size) __attribute__((weak));

/* Source-level sites: for an adapter that learns where a block was allocated in its own
 * language (PyTorch: the Python frames of the line that made the tensor), which the agent's
 * walk of return addresses cannot name. fragscope_source_stack takes a lock and copies text:
 * it is meant for an adapter's periodic update, not for its per-block path.
 *
 * fragscope_source_stack interns a stack of `count` frames, innermost first (at most 128 are
 * kept; text is copied, cut at 512 bytes) and returns its id, the same for equal stacks; 0 when
 * the agent's table of such stacks (65 536 stacks, 32 MiB of text) is full.
 * fragscope_block_site says the live block at `ptr` was allocated at `site` (an id from
 * fragscope_source_stack): reports then list it under that site instead of the stack recorded
 * when the block was reported. Call it while the block is still live, ordered before its free
 * (the adapter's own lock around both does that).
 * fragscope_freed_block_site says the same of a block already freed: the block of `size` bytes
 * (0: any) that was at `ptr`. It only changes the sites listed at the peak of reserved memory,
 * when that block was live there; call it before another block at `ptr` is freed. */
typedef struct fragscope_source_frame {
  const char* function; /* may be NULL */
  const char* file;     /* may be NULL */
  uint32_t line;        /* 0: unknown */
} fragscope_source_frame;
uint64_t fragscope_source_stack(const fragscope_source_frame* frames, size_t count)
    __attribute__((weak));
void fragscope_block_site(void* ptr, int device, uint64_t site) __attribute__((weak));
void fragscope_freed_block_site(void* ptr, size_t size, int device, uint64_t site)
    __attribute__((weak));
/* fragscope_alloc_failed for a reporter that is not where the request was made (an OOM
 * observer): `site` (from fragscope_source_stack) is the failing request's site, recorded
 * instead of the caller's stack (0: the caller's stack, as fragscope_alloc_failed). */
void fragscope_alloc_failed_at(size_t size, int device, void* stream, uint64_t site)
    __attribute__((weak));

static inline void fragscope_annotate_block_alloc(void* ptr, size_t size, int device, void* stream,
                                                  uint64_t pool) {
  if (fragscope_block_alloc) fragscope_block_alloc(ptr, size, device, stream, pool);
}
static inline void fragscope_annotate_block_alloc_late(void* ptr, size_t size, int device,
                                                       void* stream, uint64_t pool) {
  if (fragscope_block_alloc_late) fragscope_block_alloc_late(ptr, size, device, stream, pool);
}
static inline void fragscope_annotate_block_free(void* ptr, int device, void* stream) {
  if (fragscope_block_free) fragscope_block_free(ptr, device, stream);
}
static inline void fragscope_annotate_block_free_pending(void* ptr, int device, void* stream) {
  if (fragscope_block_free_pending) fragscope_block_free_pending(ptr, device, stream);
}
static inline void fragscope_annotate_alloc_failed(size_t size, int device, void* stream) {
  if (fragscope_alloc_failed) fragscope_alloc_failed(size, device, stream);
}
static inline void fragscope_annotate_mark(const char* label) {
  if (fragscope_mark) fragscope_mark(label);
}
static inline void fragscope_annotate_blocks_synced(const char* label) {
  if (fragscope_blocks_synced) fragscope_blocks_synced(label);
}
static inline void fragscope_annotate_rank(int rank, int world_size) {
  if (fragscope_set_rank) fragscope_set_rank(rank, world_size);
}
static inline uint64_t fragscope_annotate_source_stack(const fragscope_source_frame* frames,
                                                       size_t count) {
  return fragscope_source_stack ? fragscope_source_stack(frames, count) : 0;
}
static inline void fragscope_annotate_block_site(void* ptr, int device, uint64_t site) {
  if (fragscope_block_site && site != 0) fragscope_block_site(ptr, device, site);
}
static inline void fragscope_annotate_freed_block_site(void* ptr, size_t size, int device,
                                                       uint64_t site) {
  if (fragscope_freed_block_site && site != 0) fragscope_freed_block_site(ptr, size, device, site);
}
static inline void fragscope_annotate_alloc_failed_at(size_t size, int device, void* stream,
                                                      uint64_t site) {
  if (fragscope_alloc_failed_at) fragscope_alloc_failed_at(size, device, stream, site);
}
/* Non-zero when the agent is loaded (the annotations go somewhere). */
static inline int fragscope_annotate_active(void) { return fragscope_mark != 0; }

#ifdef __cplusplus
}
#endif

#endif /* FRAGSCOPE_ANNOTATE_H_ */
