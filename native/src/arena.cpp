#include "arena.hpp"

#include <algorithm>
#include <iterator>

namespace pyd4j {

Arena::Arena(uint64_t capacity, uint64_t alignment, std::function<bool(const EventPtr&)> is_done)
    : capacity_(capacity / alignment * alignment), alignment_(alignment), is_done_(std::move(is_done)) {
  limit_ = capacity_;
  if (capacity_ > 0) blocks_.emplace(0, Block{capacity_, true, {}});
}

uint64_t Arena::extent() const {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it)
    if (!it->second.free) return it->first + it->second.size;
  return 0;
}

void Arena::reset_peak() {
  peak_ = in_use_;
  high_water_ = extent();
}

void Arena::prune(EventList& events) const {
  if (!is_done_) return;
  events.erase(std::remove_if(events.begin(), events.end(),
                              [this](const EventPtr& e) { return !e || is_done_(e); }),
               events.end());
}

bool Arena::allocate(uint64_t size, Allocation* out) {
  if (size == 0) return false;
  const uint64_t need = align_up(size, alignment_);
  if (in_use_ + need > limit_) return false;
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    Block& b = it->second;
    if (!b.free || b.size < need) continue;
    prune(b.events);
    out->offset = it->first;
    out->size = need;
    out->wait_for = b.events;
    if (b.size > need) {
      // The remainder keeps the tags: the in-flight copy may overlap it too.
      blocks_.emplace(it->first + need, Block{b.size - need, true, b.events});
    }
    b.size = need;
    b.free = false;
    b.events.clear();
    in_use_ += need;
    peak_ = std::max(peak_, in_use_);
    high_water_ = std::max(high_water_, out->offset + need);
    return true;
  }
  return false;
}

bool Arena::release(uint64_t offset, EventList pending) {
  auto it = blocks_.find(offset);
  if (it == blocks_.end() || it->second.free) return false;
  Block& b = it->second;
  in_use_ -= b.size;
  b.free = true;
  b.events = std::move(pending);
  prune(b.events);
  // Merge with the next block.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free) {
    b.size += next->second.size;
    b.events.insert(b.events.end(), next->second.events.begin(), next->second.events.end());
    blocks_.erase(next);
  }
  // Merge into the previous block.
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free) {
      prev->second.size += b.size;
      prev->second.events.insert(prev->second.events.end(), b.events.begin(), b.events.end());
      blocks_.erase(it);
    }
  }
  return true;
}

ArenaStats Arena::stats() const {
  ArenaStats s;
  s.capacity = capacity_;
  s.in_use = in_use_;
  s.peak = peak_;
  s.high_water = high_water_;
  s.limit = limit_;
  for (const auto& kv : blocks_) {
    if (kv.second.free) {
      ++s.n_free_blocks;
      s.largest_free = std::max(s.largest_free, kv.second.size);
    } else {
      ++s.n_blocks;
    }
  }
  return s;
}

std::vector<Arena::BlockView> Arena::blocks() const {
  std::vector<BlockView> v;
  for (const auto& kv : blocks_)
    v.push_back({kv.first, kv.second.size, kv.second.free, kv.second.events.size()});
  return v;
}

}  // namespace pyd4j
