#include "fragscope/trace/decode_budget.h"

#include <algorithm>

namespace fragscope {

DecodeBudget::Lease DecodeBudget::Take(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  auto my_turn = [&] { return ticket == serving_ && (held_ == 0 || held_ + bytes <= capacity_); };
  if (!my_turn()) {
    ++waits_;
    ++waiting_;
    turn_.wait(lock, my_turn);
    --waiting_;
  }
  held_ += bytes;
  peak_held_ = std::max(peak_held_, held_);
  ++serving_;
  turn_.notify_all();  // the next in line may fit beside this one
  return Lease(this, bytes);
}

void DecodeBudget::Give(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  held_ -= bytes;
  turn_.notify_all();
}

uint64_t DecodeBudget::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

uint64_t DecodeBudget::peak_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_held_;
}

uint64_t DecodeBudget::waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_;
}

int DecodeBudget::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

}  // namespace fragscope
