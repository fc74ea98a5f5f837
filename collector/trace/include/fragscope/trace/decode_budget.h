// A bound on the memory that parsing frames takes across the streams of one process.
//
// libprotobuf makes one object per repeated entry (~110 bytes each, frame_limits.h), so one
// frame at the entry limit takes ~450 MiB while it is parsed and applied. The per-frame limits
// bound one frame; a daemon parses each agent's frames on a thread of its own, and three frames
// at the limit at once took it to 1.4 GB. A FrameReader given a budget (set_decode_budget)
// takes a big frame's cost from it before parsing the frame and gives it back at its next
// Next(), once the frame was let go, waiting meanwhile while other readers hold the budget. So
// at most `capacity` bytes of big frames are being decoded at once, plus, per stream, one small
// frame (under kUnbudgetedBytes) that passes without asking.
//
// Nothing is refused for its size here (the per-frame limits do that): a frame that costs more
// than the whole capacity is decoded alone, once nobody holds any of the budget. Takers are
// served in arrival order, so a big frame is not overtaken forever by smaller ones. A holder
// never waits for anything while it holds (its next Next() gives back before it reads), so every
// wait ends once the frames before it were applied.
#ifndef FRAGSCOPE_TRACE_DECODE_BUDGET_H_
#define FRAGSCOPE_TRACE_DECODE_BUDGET_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

#include "fragscope/trace/frame_limits.h"
#include "fragscope/trace/trace_format.h"

namespace fragscope {

class DecodeBudget {
 public:
  // What parsing one entry costs, arena included (frame_limits.h says ~110 bytes; a frame at
  // the limit of 4 Mi empty entries was read at 463 MiB).
  static constexpr uint64_t kParsedBytesPerEntry = 112;
  // Frames that cost less than this are decoded without the budget: as much as each stream's
  // read buffer holds anyway (FrameReader reads 1 MiB at a time).
  static constexpr uint64_t kUnbudgetedBytes = uint64_t{1} << 20;
  // A frame of this many bytes or fewer costs less than kUnbudgetedBytes whatever it holds
  // (each entry takes at least one byte), so it needs neither a count nor the budget.
  static constexpr uint64_t kUnbudgetedFrameBytes = kUnbudgetedBytes / (kParsedBytesPerEntry + 1);

  // The memory a frame of `frame_bytes` bytes holding `entries` repeated entries takes once
  // parsed: the entries' objects plus its bytes (strings and bytes values are copied).
  static constexpr uint64_t FrameCost(uint64_t entries, uint64_t frame_bytes) {
    return entries * kParsedBytesPerEntry + frame_bytes;
  }
  // The cost of one frame at the reader limits (4 Mi entries, 64 MiB): 512 MiB. The default
  // capacity of a collector's budget: about one such frame decoded at a time.
  static constexpr uint64_t OneFrameAtTheLimits() {
    return FrameCost(FrameLimits{}.max_entries_per_frame, kMaxFrameBytes);
  }

  // Holds some of the budget until destroyed or Release()d. Movable.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept
        : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    Lease& operator=(Lease&& other) noexcept {
      if (this != &other) {
        Release();
        budget_ = std::exchange(other.budget_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
      }
      return *this;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }
    void Release() {
      if (budget_ != nullptr) std::exchange(budget_, nullptr)->Give(std::exchange(bytes_, 0));
    }
    bool held() const { return budget_ != nullptr; }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class DecodeBudget;
    Lease(DecodeBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    DecodeBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  explicit DecodeBudget(uint64_t capacity) : capacity_(capacity) {}
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  // Blocks until `bytes` fit beside what others hold (or nobody holds any, for a frame bigger
  // than the capacity) and every earlier taker has been served. A thread that holds a lease must
  // not take another: it would wait for itself.
  Lease Take(uint64_t bytes);

  uint64_t capacity() const { return capacity_; }
  // For tests and diagnostics.
  uint64_t held() const;
  uint64_t peak_held() const;  // the most held at once since construction
  uint64_t waits() const;      // takes that had to wait
  int waiting() const;         // takers waiting now

 private:
  void Give(uint64_t bytes);

  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable turn_;
  uint64_t held_ = 0;         // guarded by mu_
  uint64_t peak_held_ = 0;    // guarded by mu_
  uint64_t next_ticket_ = 0;  // guarded by mu_; the next taker's place in line
  uint64_t serving_ = 0;      // guarded by mu_; the place in line whose turn it is
  uint64_t waits_ = 0;        // guarded by mu_
  int waiting_ = 0;           // guarded by mu_
};

}  // namespace fragscope

#endif  // FRAGSCOPE_TRACE_DECODE_BUDGET_H_
