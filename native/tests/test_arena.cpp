// Allocator tests: first-fit order, alignment, coalescing, stream-ordered release tags.
#include <gtest/gtest.h>

#include "arena.hpp"
#include "runtime.hpp"

using pyd4j::Allocation;
using pyd4j::Arena;

namespace {

struct FakeEvent : pyd4j::Event {
  bool done = false;
};

bool fake_done(const pyd4j::EventPtr& e) { return static_cast<FakeEvent*>(e.get())->done; }

}  // namespace

TEST(Arena, FirstFitAlignedAndPeak) {
  Arena a(4096, 256);
  Allocation x, y, z;
  ASSERT_TRUE(a.allocate(1, &x));
  ASSERT_TRUE(a.allocate(300, &y));
  ASSERT_TRUE(a.allocate(256, &z));
  EXPECT_EQ(x.offset, 0u);
  EXPECT_EQ(x.size, 256u);
  EXPECT_EQ(y.offset, 256u);
  EXPECT_EQ(y.size, 512u);
  EXPECT_EQ(z.offset, 768u);
  EXPECT_EQ(a.stats().in_use, 1024u);
  EXPECT_EQ(a.stats().peak, 1024u);
  // Free the middle block; a small request takes the first hole, not the tail.
  ASSERT_TRUE(a.release(y.offset));
  Allocation w;
  ASSERT_TRUE(a.allocate(200, &w));
  EXPECT_EQ(w.offset, 256u);
  EXPECT_EQ(a.stats().in_use, 768u);
  EXPECT_EQ(a.stats().peak, 1024u);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak, 768u);
}

TEST(Arena, CoalescesBothNeighbours) {
  Arena a(1024, 256);
  Allocation b[4];
  for (auto& x : b) ASSERT_TRUE(a.allocate(256, &x));
  Allocation none;
  EXPECT_FALSE(a.allocate(1, &none));
  ASSERT_TRUE(a.release(b[0].offset));
  ASSERT_TRUE(a.release(b[2].offset));
  EXPECT_EQ(a.stats().largest_free, 256u);
  EXPECT_EQ(a.stats().n_free_blocks, 2u);
  EXPECT_FALSE(a.allocate(512, &none));  // fragmented: 2 x 256 free, not contiguous
  ASSERT_TRUE(a.release(b[1].offset));    // merges with both neighbours
  EXPECT_EQ(a.stats().n_free_blocks, 1u);
  EXPECT_EQ(a.stats().largest_free, 768u);
  Allocation big;
  ASSERT_TRUE(a.allocate(768, &big));
  EXPECT_EQ(big.offset, 0u);
  ASSERT_TRUE(a.release(b[3].offset));
  ASSERT_TRUE(a.release(big.offset));
  auto blocks = a.blocks();
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_TRUE(blocks[0].free);
  EXPECT_EQ(blocks[0].size, 1024u);
  EXPECT_EQ(a.stats().in_use, 0u);
}

TEST(Arena, RejectsBadReleaseAndZeroSize) {
  Arena a(1024, 256);
  Allocation x;
  EXPECT_FALSE(a.allocate(0, &x));
  ASSERT_TRUE(a.allocate(10, &x));
  EXPECT_FALSE(a.release(x.offset + 256));  // not the start of a block
  EXPECT_TRUE(a.release(x.offset));
  EXPECT_FALSE(a.release(x.offset));  // double free
  Allocation y;
  EXPECT_FALSE(a.allocate(1025, &y));
}

TEST(Arena, CapacityRoundedDownToAlignment) {
  Arena a(1000, 256);
  EXPECT_EQ(a.capacity(), 768u);
  Allocation x;
  EXPECT_FALSE(a.allocate(769, &x));
  EXPECT_TRUE(a.allocate(768, &x));
}

TEST(Arena, ReleaseTagsReachTheNextOwner) {
  Arena a(1024, 256, fake_done);
  auto e1 = std::make_shared<FakeEvent>();
  auto e2 = std::make_shared<FakeEvent>();
  Allocation x, y;
  ASSERT_TRUE(a.allocate(256, &x));
  ASSERT_TRUE(a.allocate(256, &y));
  ASSERT_TRUE(a.release(x.offset, {e1}));
  ASSERT_TRUE(a.release(y.offset, {e2}));  // coalesces with x and with the tail
  Allocation z;
  ASSERT_TRUE(a.allocate(100, &z));
  EXPECT_EQ(z.offset, 0u);
  EXPECT_EQ(z.wait_for.size(), 2u);  // conservative: both copies may touch the merged block
  // Completed events are dropped.
  ASSERT_TRUE(a.release(z.offset, {e1}));
  e1->done = true;
  e2->done = true;
  Allocation w;
  ASSERT_TRUE(a.allocate(100, &w));
  EXPECT_TRUE(w.wait_for.empty());
}
