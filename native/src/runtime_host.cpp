// Host build of the runtime: "device" memory is host memory, each copy stream is a worker
// thread running a FIFO queue, events are completion flags with a timestamp. The compute
// stream is the calling thread: work "enqueued" on it has already happened.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#if defined(__linux__)
#include <pthread.h>
#endif

#include "runtime.hpp"

namespace pyd4j {
namespace {

using Clock = std::chrono::steady_clock;

class HostEvent : public Event {
 public:
  void complete(Clock::time_point t) {
    std::lock_guard<std::mutex> lk(m_);
    t_ = t;
    done_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [this] { return done_; });
  }
  bool done() {
    std::lock_guard<std::mutex> lk(m_);
    return done_;
  }
  Clock::time_point time() {
    std::lock_guard<std::mutex> lk(m_);
    return t_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  Clock::time_point t_{};
};

class HostStream : public Stream {
 public:
  explicit HostStream(bool compute) : compute_(compute) {
    if (!compute_) worker_ = std::thread([this] {
#if defined(__linux__)
      pthread_setname_np(pthread_self(), "pyd4j-copy");  // visible in /proc, top -H, gdb
#endif
      run();
    });
  }
  ~HostStream() override {
    if (!compute_) {
      {
        std::lock_guard<std::mutex> lk(m_);
        stop_ = true;
      }
      cv_.notify_all();
      worker_.join();
    }
  }
  bool compute() const { return compute_; }
  void enqueue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lk(m_);
      q_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [this] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;  // stop requested and drained
        task = std::move(q_.front());
        q_.pop_front();
      }
      task();
    }
  }

  bool compute_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::thread worker_;
};

HostEvent* he(const EventPtr& e) { return static_cast<HostEvent*>(e.get()); }
HostStream* hs(Stream* s) { return static_cast<HostStream*>(s); }

void* aligned(uint64_t bytes) {
  const uint64_t n = Arena::align_up(bytes == 0 ? 1 : bytes, PYD4J_AGENT_ALIGNMENT);
  void* p = std::aligned_alloc(PYD4J_AGENT_ALIGNMENT, n);
  if (!p)
    throw AgentError(PYD4J_AGENT_ERR_SYSTEM,
                     "host allocation of " + std::to_string(bytes) +
                         " bytes failed; ask for a smaller arena or pool, or free host memory");
  return p;
}

class HostRuntime : public Runtime {
 public:
  HostRuntime() : origin_(Clock::now()) {}
  const char* kind() const override { return "host"; }

  void* device_alloc(uint64_t bytes) override { return aligned(bytes); }
  void device_free(void* p) override { std::free(p); }
  void* pinned_alloc(uint64_t bytes) override { return aligned(bytes); }
  void pinned_free(void* p) override { std::free(p); }

  std::unique_ptr<Stream> create_stream(bool compute) override {
    return std::make_unique<HostStream>(compute);
  }
  void* native_handle(Stream*) override { return nullptr; }

  void memcpy_async(void* dst, const void* src, uint64_t n, CopyKind, Stream* s) override {
    if (hs(s)->compute())
      throw AgentError(PYD4J_AGENT_ERR_INVALID_ARGUMENT, "copies never run on the compute stream");
    hs(s)->enqueue([dst, src, n] { std::memcpy(dst, src, n); });
  }
  EventPtr record(Stream* s) override {
    auto e = std::make_shared<HostEvent>();
    if (hs(s)->compute()) {
      e->complete(Clock::now());
    } else {
      HostEvent* raw = e.get();
      EventPtr keep = e;
      hs(s)->enqueue([raw, keep] { raw->complete(Clock::now()); });
    }
    return e;
  }
  void stream_wait(Stream* s, const EventPtr& e) override {
    if (!e) return;
    if (hs(s)->compute()) {
      he(e)->wait();
    } else {
      EventPtr keep = e;
      hs(s)->enqueue([keep] { he(keep)->wait(); });
    }
  }
  void sync_event(const EventPtr& e) override {
    if (e) he(e)->wait();
  }
  bool query_event(const EventPtr& e) override { return !e || he(e)->done(); }
  void sync_stream(Stream* s) override { sync_event(record(s)); }
  double event_time(const EventPtr& e) override {
    he(e)->wait();
    return std::chrono::duration<double>(he(e)->time() - origin_).count();
  }
  void reset_clock(Stream*) override { origin_ = Clock::now(); }

  double bench_plain_copy(uint64_t bytes, CopyKind, int reps) override {
    void* a = aligned(bytes);
    void* b = aligned(bytes);
    std::memset(a, 1, bytes);
    std::memset(b, 0, bytes);  // touch both so page faults are not timed
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) std::memcpy(b, a, bytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    volatile unsigned char sink = static_cast<unsigned char*>(b)[bytes - 1];  // keep the copies
    (void)sink;
    std::free(a);
    std::free(b);
    return s;
  }

 private:
  Clock::time_point origin_;
};

}  // namespace

std::unique_ptr<Runtime> make_runtime(int) { return std::make_unique<HostRuntime>(); }

}  // namespace pyd4j
