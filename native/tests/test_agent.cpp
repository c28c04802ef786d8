// Agent tests through the C ABI. Contents are checked through the device pointers, which the
// host build can read directly; the CUDA build runs the allocator and error paths only.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pyd4j_agent.h"

namespace {

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int rc = pyd4j_agent_create(1 << 20, 1 << 20, 0, &a_);
    if (no_cuda_device(rc)) GTEST_SKIP() << "CUDA build without a usable GPU here: " << pyd4j_agent_last_error();
    ASSERT_EQ(rc, PYD4J_AGENT_OK) << pyd4j_agent_last_error();
  }
  // The CUDA build compiled on a machine with no GPU or no driver (CI): its device tests skip.
  static bool no_cuda_device(int rc) {
    return pyd4j_agent_is_cuda() &&
           (rc == PYD4J_AGENT_ERR_CUDA ||
            std::string(pyd4j_agent_last_error()).find(" 0 CUDA device") != std::string::npos);
  }
  void TearDown() override { EXPECT_EQ(pyd4j_agent_destroy(a_), PYD4J_AGENT_OK); }
  pyd4j_agent_buffer_info_t info(uint64_t id) {
    pyd4j_agent_buffer_info_t i;
    EXPECT_EQ(pyd4j_agent_buffer_info(a_, id, &i), PYD4J_AGENT_OK) << pyd4j_agent_last_error();
    return i;
  }
  pyd4j_agent_stats_t stats() {
    pyd4j_agent_stats_t s;
    EXPECT_EQ(pyd4j_agent_get_stats(a_, &s), PYD4J_AGENT_OK);
    return s;
  }
  static void fill(void* p, size_t n, unsigned seed) {
    auto* c = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) c[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  }
  static bool same(const void* p, size_t n, unsigned seed) {
    std::vector<unsigned char> ref(n);
    fill(ref.data(), n, seed);
    return std::memcmp(p, ref.data(), n) == 0;
  }
  pyd4j_agent* a_ = nullptr;
};

#define HOST_ONLY()                                                           \
  if (pyd4j_agent_is_cuda()) GTEST_SKIP() << "reads device memory directly"

// ctypes mirrors these layouts (pyd4j/device/native_lib.py); keep them in step.
static_assert(sizeof(pyd4j_agent_stats_t) == 20 * 8, "stats layout changed: update native_lib.py");
static_assert(sizeof(pyd4j_agent_buffer_info_t) == 2 * 8 + 4 * 4 + 2 * 8, "info layout changed");

TEST(AgentAbi, VersionAndBuild) {
  EXPECT_EQ(pyd4j_agent_abi_version(), PYD4J_AGENT_ABI_VERSION);
  EXPECT_EQ(pyd4j_agent_alignment(), 256u);
  EXPECT_EQ(std::string(pyd4j_agent_build_kind()), pyd4j_agent_is_cuda() ? "cuda" : "host");
}

TEST(AgentAbi, CreateRejectsTinyPools) {
  pyd4j_agent* a = nullptr;
  EXPECT_EQ(pyd4j_agent_create(10, 1 << 20, 0, &a), PYD4J_AGENT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("device_bytes=10"), std::string::npos);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(pyd4j_agent_destroy(nullptr), PYD4J_AGENT_OK);
}

TEST_F(AgentTest, OffloadReleasePrefetchRoundTrip) {
  HOST_ONLY();
  const size_t n = 100000;
  uint64_t id;
  ASSERT_EQ(pyd4j_agent_alloc(a_, n, &id), PYD4J_AGENT_OK);
  auto i0 = info(id);
  EXPECT_EQ(i0.state, PYD4J_AGENT_RESIDENT);
  EXPECT_EQ(i0.reserved, 100096u);  // rounded up to 256
  fill(i0.device_ptr, n, 1);
  EXPECT_EQ(stats().device_in_use, 100096u);

  ASSERT_EQ(pyd4j_agent_offload(a_, id, 1), PYD4J_AGENT_OK);
  auto i1 = info(id);
  EXPECT_EQ(i1.state, PYD4J_AGENT_HOST);
  EXPECT_EQ(i1.device_ptr, nullptr);
  EXPECT_EQ(stats().device_in_use, 0u);  // released at once, stream-ordered

  // The next allocation lands on the same memory: the host build blocks until the offload
  // has read it, so scribbling over it cannot corrupt the copy.
  uint64_t other;
  ASSERT_EQ(pyd4j_agent_alloc(a_, n, &other), PYD4J_AGENT_OK);
  auto io = info(other);
  EXPECT_EQ(io.device_ptr, i0.device_ptr);
  std::memset(io.device_ptr, 0xAB, n);

  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  EXPECT_TRUE(same(i1.host_ptr, n, 1));
  ASSERT_EQ(pyd4j_agent_prefetch(a_, id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_acquire(a_, id), PYD4J_AGENT_OK);
  auto i2 = info(id);
  EXPECT_EQ(i2.state, PYD4J_AGENT_RESIDENT);
  EXPECT_EQ(i2.pending, 0u);
  EXPECT_NE(i2.device_ptr, i0.device_ptr);  // first fit after `other`
  EXPECT_TRUE(same(i2.device_ptr, n, 1));

  auto s = stats();
  EXPECT_EQ(s.bytes_offloaded, n);
  EXPECT_EQ(s.bytes_prefetched, n);
  EXPECT_EQ(s.n_offloads, 1u);
  EXPECT_EQ(s.n_prefetches, 1u);
  EXPECT_EQ(s.device_peak, 2u * 100096u);
  EXPECT_EQ(s.host_in_use, 100096u);
  EXPECT_GT(s.offload_seconds, 0.0);
  EXPECT_GE(s.copy_busy_seconds, 0.0);

  ASSERT_EQ(pyd4j_agent_free(a_, id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_free(a_, other), PYD4J_AGENT_OK);
  s = stats();
  EXPECT_EQ(s.device_in_use, 0u);
  EXPECT_EQ(s.host_in_use, 0u);
  EXPECT_EQ(s.n_buffers, 0u);
}

TEST_F(AgentTest, OffloadWithoutReleaseKeepsDeviceCopy) {
  HOST_ONLY();
  uint64_t id;
  ASSERT_EQ(pyd4j_agent_alloc(a_, 4096, &id), PYD4J_AGENT_OK);
  fill(info(id).device_ptr, 4096, 3);
  ASSERT_EQ(pyd4j_agent_offload(a_, id, 0), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  auto i = info(id);
  EXPECT_EQ(i.state, PYD4J_AGENT_RESIDENT);
  EXPECT_TRUE(same(i.host_ptr, 4096, 3));
  EXPECT_TRUE(same(i.device_ptr, 4096, 3));
  EXPECT_EQ(pyd4j_agent_prefetch(a_, id), PYD4J_AGENT_ERR_BAD_STATE);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("resident"), std::string::npos);
}

TEST_F(AgentTest, ExternalBufferRoundTripKeepsAddress) {
  HOST_ONLY();
  std::vector<unsigned char> mem(12345);
  fill(mem.data(), mem.size(), 9);
  uint64_t id;
  ASSERT_EQ(pyd4j_agent_register_external(a_, mem.data(), mem.size(), &id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_offload(a_, id, 1), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  std::memset(mem.data(), 0, mem.size());  // the owner reuses its memory meanwhile
  ASSERT_EQ(pyd4j_agent_prefetch(a_, id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  EXPECT_TRUE(same(mem.data(), mem.size(), 9));
  EXPECT_EQ(info(id).device_ptr, mem.data());
  auto s = stats();
  EXPECT_EQ(s.device_in_use, 0u);  // external memory is not the arena's
  EXPECT_EQ(s.bytes_offloaded, 12345u);
  EXPECT_EQ(s.bytes_prefetched, 12345u);
}

TEST_F(AgentTest, RebindExternalPrefetchesIntoFreshMemoryAgainAndAgain) {
  HOST_ONLY();
  const size_t n = 70001;
  std::vector<unsigned char> src(n), first(n, 0), second(n, 0);
  fill(src.data(), n, 4);
  uint64_t id;
  ASSERT_EQ(pyd4j_agent_register_external(a_, src.data(), n, &id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_offload(a_, id, 1), PYD4J_AGENT_OK);
  // Rebind and prefetch without waiting: the prefetch is ordered after the offload.
  ASSERT_EQ(pyd4j_agent_rebind_external(a_, id, first.data()), PYD4J_AGENT_OK) << pyd4j_agent_last_error();
  ASSERT_EQ(pyd4j_agent_prefetch(a_, id), PYD4J_AGENT_OK) << pyd4j_agent_last_error();
  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  std::memset(src.data(), 0, n);  // the owner gave the source memory back
  EXPECT_TRUE(same(first.data(), n, 4));
  EXPECT_EQ(info(id).device_ptr, first.data());
  EXPECT_EQ(info(id).state, PYD4J_AGENT_RESIDENT);

  // A second read of the same host slot into other memory (a checkpoint read twice).
  ASSERT_EQ(pyd4j_agent_release_device(a_, id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_rebind_external(a_, id, second.data()), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_prefetch(a_, id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  EXPECT_TRUE(same(second.data(), n, 4));
  EXPECT_TRUE(same(first.data(), n, 4));  // the first copy was left alone
  auto s = stats();
  EXPECT_EQ(s.bytes_offloaded, n);
  EXPECT_EQ(s.bytes_prefetched, 2 * n);
  EXPECT_EQ(s.host_in_use, 70144u);  // one slot, aligned to 256
  ASSERT_EQ(pyd4j_agent_free(a_, id), PYD4J_AGENT_OK);
  EXPECT_EQ(stats().host_in_use, 0u);
}

TEST_F(AgentTest, RebindExternalRefusesWhatItCannotDo) {
  std::vector<unsigned char> mem(1000), other(1000);
  uint64_t ext, arena;
  ASSERT_EQ(pyd4j_agent_register_external(a_, mem.data(), mem.size(), &ext), PYD4J_AGENT_OK);
  EXPECT_EQ(pyd4j_agent_rebind_external(a_, ext, other.data()), PYD4J_AGENT_ERR_BAD_STATE);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("RESIDENT"), std::string::npos);
  ASSERT_EQ(pyd4j_agent_offload(a_, ext, 1), PYD4J_AGENT_OK);
  EXPECT_EQ(pyd4j_agent_rebind_external(a_, ext, nullptr), PYD4J_AGENT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("1000 bytes"), std::string::npos);
  ASSERT_EQ(pyd4j_agent_alloc(a_, 1000, &arena), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_offload(a_, arena, 1), PYD4J_AGENT_OK);
  EXPECT_EQ(pyd4j_agent_rebind_external(a_, arena, other.data()), PYD4J_AGENT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("register_external"), std::string::npos);
  EXPECT_EQ(pyd4j_agent_rebind_external(a_, 999, other.data()), PYD4J_AGENT_ERR_UNKNOWN_BUFFER);
  ASSERT_EQ(pyd4j_agent_synchronize(a_), PYD4J_AGENT_OK);
}

TEST_F(AgentTest, ErrorsNameValuesAndFixes) {
  uint64_t id;
  EXPECT_EQ(pyd4j_agent_alloc(a_, 0, &id), PYD4J_AGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(pyd4j_agent_alloc(a_, (1 << 20) + 1, &id), PYD4J_AGENT_ERR_OUT_OF_DEVICE_MEMORY);
  std::string msg = pyd4j_agent_last_error();
  EXPECT_NE(msg.find("1048832 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("larger device arena"), std::string::npos) << msg;
  EXPECT_EQ(pyd4j_agent_offload(a_, 777, 1), PYD4J_AGENT_ERR_UNKNOWN_BUFFER);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("777"), std::string::npos);
  ASSERT_EQ(pyd4j_agent_alloc(a_, 10, &id), PYD4J_AGENT_OK);
  EXPECT_STREQ(pyd4j_agent_last_error(), "");
  ASSERT_EQ(pyd4j_agent_offload(a_, id, 1), PYD4J_AGENT_OK);
  EXPECT_EQ(pyd4j_agent_offload(a_, id, 1), PYD4J_AGENT_ERR_BAD_STATE);
  EXPECT_EQ(pyd4j_agent_mark_compute(a_, 0), PYD4J_AGENT_ERR_BAD_STATE);
  EXPECT_EQ(pyd4j_agent_stream_handle(a_, 5, nullptr), PYD4J_AGENT_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(pyd4j_agent_free(a_, id), PYD4J_AGENT_OK);
  EXPECT_EQ(pyd4j_agent_free(a_, id), PYD4J_AGENT_ERR_UNKNOWN_BUFFER);
}

TEST_F(AgentTest, HostPoolExhaustion) {
  uint64_t a, b;
  ASSERT_EQ(pyd4j_agent_alloc(a_, 600 << 10, &a), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_offload(a_, a, 1), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_alloc(a_, 600 << 10, &b), PYD4J_AGENT_OK);
  EXPECT_EQ(pyd4j_agent_offload(a_, b, 1), PYD4J_AGENT_ERR_OUT_OF_HOST_POOL);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("larger host pool"), std::string::npos);
  // The failed offload changed nothing.
  pyd4j_agent_buffer_info_t i;
  ASSERT_EQ(pyd4j_agent_buffer_info(a_, b, &i), PYD4J_AGENT_OK);
  EXPECT_EQ(i.state, PYD4J_AGENT_RESIDENT);
  EXPECT_EQ(stats().n_offloads, 1u);
}

TEST_F(AgentTest, ManyBuffersRandomSwapsStayExact) {
  HOST_ONLY();
  std::mt19937 rng(42);
  struct B {
    uint64_t id;
    size_t n;
    unsigned seed;
    bool host;
  };
  std::vector<B> bs;
  for (unsigned k = 0; k < 24; ++k) {
    B b{0, 1000 + rng() % 20000, k, false};
    ASSERT_EQ(pyd4j_agent_alloc(a_, b.n, &b.id), PYD4J_AGENT_OK) << pyd4j_agent_last_error();
    fill(info(b.id).device_ptr, b.n, b.seed);
    bs.push_back(b);
  }
  uint64_t moved_out = 0, moved_in = 0;
  for (int step = 0; step < 400; ++step) {
    B& b = bs[rng() % bs.size()];
    if (b.host) {
      ASSERT_EQ(pyd4j_agent_prefetch(a_, b.id), PYD4J_AGENT_OK) << pyd4j_agent_last_error();
      moved_in += b.n;
      if (rng() % 2) {
        ASSERT_EQ(pyd4j_agent_acquire(a_, b.id), PYD4J_AGENT_OK);
        ASSERT_TRUE(same(info(b.id).device_ptr, b.n, b.seed)) << "step " << step;
      }
    } else {
      ASSERT_EQ(pyd4j_agent_acquire(a_, b.id), PYD4J_AGENT_OK);
      ASSERT_TRUE(same(info(b.id).device_ptr, b.n, b.seed)) << "step " << step;
      ASSERT_EQ(pyd4j_agent_offload(a_, b.id, 1), PYD4J_AGENT_OK) << pyd4j_agent_last_error();
      moved_out += b.n;
      // Reused memory is scribbled over as soon as the compute thread gets it.
      uint64_t tmp;
      ASSERT_EQ(pyd4j_agent_alloc(a_, b.n, &tmp), PYD4J_AGENT_OK);
      std::memset(info(tmp).device_ptr, 0xEE, b.n);
      ASSERT_EQ(pyd4j_agent_free(a_, tmp), PYD4J_AGENT_OK);
    }
    b.host = !b.host;
  }
  for (B& b : bs) {
    if (b.host) {
      ASSERT_EQ(pyd4j_agent_prefetch(a_, b.id), PYD4J_AGENT_OK);
      moved_in += b.n;
    }
  }
  ASSERT_EQ(pyd4j_agent_synchronize(a_), PYD4J_AGENT_OK);
  for (B& b : bs) EXPECT_TRUE(same(info(b.id).device_ptr, b.n, b.seed));
  auto s = stats();
  EXPECT_EQ(s.bytes_offloaded, moved_out);
  EXPECT_EQ(s.bytes_prefetched, moved_in);
}

TEST_F(AgentTest, OverlapIsMeasuredAgainstComputeMarks) {
  HOST_ONLY();
  const size_t n = 512 << 10;
  uint64_t id;
  ASSERT_EQ(pyd4j_agent_alloc(a_, n, &id), PYD4J_AGENT_OK);
  fill(info(id).device_ptr, n, 5);
  ASSERT_EQ(pyd4j_agent_mark_compute(a_, 1), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_offload(a_, id, 1), PYD4J_AGENT_OK);
  // "Compute" on this thread while the worker copies.
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x += i * 0.5;
  ASSERT_EQ(pyd4j_agent_mark_compute(a_, 0), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  auto s = stats();
  EXPECT_GT(s.compute_seconds, 0.0);
  EXPECT_GT(s.offload_seconds, 0.0);
  EXPECT_LE(s.overlap_seconds, s.copy_busy_seconds + 1e-12);
  EXPECT_LE(s.overlap_seconds, s.compute_seconds + 1e-12);
  // The copy started after the compute mark and the loop outlasts a 512 KiB memcpy.
  EXPECT_GT(s.overlap_seconds, 0.5 * s.copy_busy_seconds);
  ASSERT_EQ(pyd4j_agent_reset_stats(a_), PYD4J_AGENT_OK);
  s = stats();
  EXPECT_EQ(s.bytes_offloaded, 0u);
  EXPECT_EQ(s.overlap_seconds, 0.0);
}

TEST_F(AgentTest, SplitLifetimesReserveReleaseDropHost) {
  HOST_ONLY();
  // The executor's sequence: alloc, offload (device kept), release_device, ... reserve_device,
  // prefetch, wait, drop_host.
  uint64_t id;
  ASSERT_EQ(pyd4j_agent_alloc(a_, 3000, &id), PYD4J_AGENT_OK);
  fill(info(id).device_ptr, 3000, 11);
  EXPECT_EQ(pyd4j_agent_release_device(a_, id), PYD4J_AGENT_ERR_BAD_STATE);  // no host copy yet
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("offload it first"), std::string::npos);
  ASSERT_EQ(pyd4j_agent_offload(a_, id, 0), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_release_device(a_, id), PYD4J_AGENT_OK);
  EXPECT_EQ(info(id).state, PYD4J_AGENT_HOST);
  EXPECT_EQ(stats().device_in_use, 0u);
  ASSERT_EQ(pyd4j_agent_reserve_device(a_, id), PYD4J_AGENT_OK);
  auto r = info(id);
  EXPECT_EQ(r.state, PYD4J_AGENT_RESERVED);
  EXPECT_EQ(r.reserved, 3072u);
  EXPECT_EQ(stats().device_in_use, 3072u);
  EXPECT_EQ(pyd4j_agent_offload(a_, id, 0), PYD4J_AGENT_ERR_BAD_STATE);
  EXPECT_EQ(pyd4j_agent_drop_host(a_, id), PYD4J_AGENT_ERR_BAD_STATE);
  std::memset(r.device_ptr, 0, 3000);
  ASSERT_EQ(pyd4j_agent_prefetch(a_, id), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_wait(a_, id), PYD4J_AGENT_OK);
  EXPECT_TRUE(same(info(id).device_ptr, 3000, 11));
  ASSERT_EQ(pyd4j_agent_drop_host(a_, id), PYD4J_AGENT_OK);
  EXPECT_EQ(info(id).has_host, 0u);
  EXPECT_EQ(stats().host_in_use, 0u);
  EXPECT_EQ(pyd4j_agent_drop_host(a_, id), PYD4J_AGENT_ERR_BAD_STATE);
  // Dropping the host copy of a HOST buffer frees it.
  ASSERT_EQ(pyd4j_agent_offload(a_, id, 1), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_drop_host(a_, id), PYD4J_AGENT_OK);
  pyd4j_agent_buffer_info_t gone;
  EXPECT_EQ(pyd4j_agent_buffer_info(a_, id, &gone), PYD4J_AGENT_ERR_UNKNOWN_BUFFER);
  EXPECT_EQ(stats().n_buffers, 0u);
}

TEST_F(AgentTest, LimitAndHighWater) {
  ASSERT_EQ(pyd4j_agent_set_device_limit(a_, 1000), PYD4J_AGENT_OK);  // 3 blocks of 256 fit
  uint64_t a, b, c, d;
  ASSERT_EQ(pyd4j_agent_alloc(a_, 256, &a), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_alloc(a_, 256, &b), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_alloc(a_, 256, &c), PYD4J_AGENT_OK);
  EXPECT_EQ(pyd4j_agent_alloc(a_, 1, &d), PYD4J_AGENT_ERR_OUT_OF_DEVICE_MEMORY);
  EXPECT_NE(std::string(pyd4j_agent_last_error()).find("a limit of 1000 bytes"), std::string::npos)
      << pyd4j_agent_last_error();
  ASSERT_EQ(pyd4j_agent_free(a_, a), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_alloc(a_, 200, &d), PYD4J_AGENT_OK);  // reuses offset 0
  auto s = stats();
  EXPECT_EQ(s.device_peak, 768u);
  EXPECT_EQ(s.device_high_water, 768u);
  EXPECT_EQ(s.device_limit, 1000u);
  ASSERT_EQ(pyd4j_agent_free(a_, b), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_set_device_limit(a_, 2000), PYD4J_AGENT_OK);
  ASSERT_EQ(pyd4j_agent_alloc(a_, 512, &b), PYD4J_AGENT_OK);  // hole of 256 too small: goes high
  s = stats();
  EXPECT_EQ(s.device_peak, 1024u);
  EXPECT_EQ(s.device_high_water, 1280u);
  ASSERT_EQ(pyd4j_agent_set_device_limit(a_, 0), PYD4J_AGENT_OK);
  EXPECT_EQ(stats().device_limit, 1u << 20);
}

TEST_F(AgentTest, PlainCopyBaseline) {
  double secs = -1;
  ASSERT_EQ(pyd4j_agent_bench_plain_copy(a_, 1 << 20, PYD4J_AGENT_HOST_TO_DEVICE, 3, &secs), PYD4J_AGENT_OK);
  EXPECT_GT(secs, 0.0);
  EXPECT_EQ(pyd4j_agent_bench_plain_copy(a_, 1 << 20, 7, 3, &secs), PYD4J_AGENT_ERR_INVALID_ARGUMENT);
}

}  // namespace
