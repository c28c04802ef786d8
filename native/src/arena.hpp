// First-fit arena over one fixed region, with coalescing and stream-ordered release.
//
// The arena hands out offsets; it never touches the memory. A released block may still be in
// use by an asynchronous copy: the caller tags it with that copy's completion events, and
// whoever is handed memory overlapping it later gets those events back and must wait for them
// on its own stream before touching the memory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace pyd4j {

class Event;  // defined by the runtime; the arena only stores and forwards pointers
using EventPtr = std::shared_ptr<Event>;
using EventList = std::vector<EventPtr>;

struct ArenaStats {
  uint64_t capacity = 0;
  uint64_t in_use = 0;
  uint64_t peak = 0;
  uint64_t largest_free = 0;
  uint64_t n_blocks = 0;       // allocated blocks
  uint64_t n_free_blocks = 0;  // free blocks (after coalescing)
  uint64_t high_water = 0;     // max over time of the end offset of the highest block in use
  uint64_t limit = 0;          // cap on in_use (== capacity unless set_limit)
};

struct Allocation {
  uint64_t offset = 0;
  uint64_t size = 0;  // aligned size actually reserved
  EventList wait_for;  // events the new owner must wait for before touching the memory
};

class Arena {
 public:
  // `is_done(e)` tells whether an event has completed; completed events are dropped from
  // tags. May be empty (then every tag is kept until the block is handed out).
  Arena(uint64_t capacity, uint64_t alignment, std::function<bool(const EventPtr&)> is_done = {});

  static uint64_t align_up(uint64_t n, uint64_t alignment) {
    return (n + alignment - 1) / alignment * alignment;
  }

  // First free block (lowest address) large enough for align_up(size). Returns false if
  // none: the arena is unchanged.
  bool allocate(uint64_t size, Allocation* out);
  // Gives back the block starting at `offset`, tagged with `pending` (the copies still using
  // it), and coalesces it with free neighbours. Returns false if no block starts there.
  bool release(uint64_t offset, EventList pending = {});

  ArenaStats stats() const;
  void reset_peak();
  // Caps in_use: allocate() fails past it. 0 (or more than the capacity) means the capacity.
  void set_limit(uint64_t limit) { limit_ = (limit == 0 || limit > capacity_) ? capacity_ : limit; }
  uint64_t limit() const { return limit_; }
  uint64_t in_use() const { return in_use_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  // (offset, size, free) in address order, for tests.
  struct BlockView {
    uint64_t offset, size;
    bool free;
    size_t n_events;
  };
  std::vector<BlockView> blocks() const;

 private:
  struct Block {
    uint64_t size;
    bool free;
    EventList events;
  };
  void prune(EventList& events) const;

  uint64_t capacity_;
  uint64_t alignment_;
  std::function<bool(const EventPtr&)> is_done_;
  std::map<uint64_t, Block> blocks_;
  uint64_t extent() const;  // end offset of the highest allocated block
  uint64_t limit_ = 0;
  uint64_t in_use_ = 0;
  uint64_t peak_ = 0;
  uint64_t high_water_ = 0;
};

}  // namespace pyd4j
