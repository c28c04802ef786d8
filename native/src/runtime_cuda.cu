// CUDA build of the runtime. One cudaMalloc for the arena, one cudaMallocHost for the pinned
// pool (both by the agent, once), non-blocking streams, cudaMemcpyAsync only on the copy
// streams, cudaEventRecord + cudaStreamWaitEvent for ordering. Nothing here synchronizes the
// device; the only host blocks are cudaEventSynchronize in sync_event (pyd4j_agent_wait) and
// the stream synchronize of the benchmark baseline.
#include <cuda_runtime.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "runtime.hpp"

namespace pyd4j {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw AgentError(PYD4J_AGENT_ERR_CUDA,
                     std::string(what) + " failed: " + cudaGetErrorName(err) + " (" +
                         cudaGetErrorString(err) + ")");
  }
}

// Events are recycled through a free list: creating one per copy would cost a driver call.
class EventPool {
 public:
  cudaEvent_t get() {
    std::lock_guard<std::mutex> lk(m_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e;
    // Timing stays enabled: copy durations and overlap come from these events.
    check(cudaEventCreate(&e), "cudaEventCreate");
    return e;
  }
  void put(cudaEvent_t e) {
    std::lock_guard<std::mutex> lk(m_);
    free_.push_back(e);
  }
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }

 private:
  std::mutex m_;
  std::vector<cudaEvent_t> free_;
};

class CudaEvent : public Event {
 public:
  CudaEvent(std::shared_ptr<EventPool> pool) : pool_(std::move(pool)), e_(pool_->get()) {}
  ~CudaEvent() override { pool_->put(e_); }
  cudaEvent_t get() const { return e_; }

 private:
  std::shared_ptr<EventPool> pool_;
  cudaEvent_t e_;
};

class CudaStream : public Stream {
 public:
  explicit CudaStream(bool compute) : compute_(compute) {
    check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~CudaStream() override { cudaStreamDestroy(s_); }
  cudaStream_t get() const { return s_; }
  bool compute() const { return compute_; }

 private:
  bool compute_;
  cudaStream_t s_;
};

cudaEvent_t ce(const EventPtr& e) { return static_cast<CudaEvent*>(e.get())->get(); }
CudaStream* cs(Stream* s) { return static_cast<CudaStream*>(s); }

class CudaRuntime : public Runtime {
 public:
  explicit CudaRuntime(int device) : device_(device), pool_(std::make_shared<EventPool>()) {
    int n = 0;
    check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    if (device < 0 || device >= n)
      throw AgentError(PYD4J_AGENT_ERR_INVALID_ARGUMENT,
                       "device ordinal " + std::to_string(device) + " is out of range: this machine has " +
                           std::to_string(n) + " CUDA device(s); pass 0.." + std::to_string(n - 1));
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  const char* kind() const override { return "cuda"; }

  void* device_alloc(uint64_t bytes) override {
    select();
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw AgentError(PYD4J_AGENT_ERR_OUT_OF_DEVICE_MEMORY,
                       "cudaMalloc of a " + std::to_string(bytes) + "-byte device arena failed: " +
                           std::to_string(free_b) + " of " + std::to_string(total_b) +
                           " bytes are free on device " + std::to_string(device_) +
                           "; ask for a smaller arena");
    }
    check(err, "cudaMalloc(arena)");
    return p;
  }
  void device_free(void* p) override {
    select();
    cudaFree(p);
  }
  void* pinned_alloc(uint64_t bytes) override {
    void* p = nullptr;
    cudaError_t err = cudaMallocHost(&p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw AgentError(PYD4J_AGENT_ERR_SYSTEM,
                       "cudaMallocHost of a " + std::to_string(bytes) + "-byte pinned pool failed (" +
                           cudaGetErrorString(err) +
                           "); ask for a smaller pool or raise the locked-memory limit (ulimit -l)");
    }
    return p;
  }
  void pinned_free(void* p) override { cudaFreeHost(p); }

  std::unique_ptr<Stream> create_stream(bool compute) override {
    select();
    return std::make_unique<CudaStream>(compute);
  }
  void* native_handle(Stream* s) override { return static_cast<void*>(cs(s)->get()); }

  void memcpy_async(void* dst, const void* src, uint64_t n, CopyKind kind, Stream* s) override {
    if (cs(s)->compute())
      throw AgentError(PYD4J_AGENT_ERR_INVALID_ARGUMENT, "copies never run on the compute stream");
    select();
    check(cudaMemcpyAsync(dst, src, n,
                          kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                          cs(s)->get()),
          "cudaMemcpyAsync");
  }
  EventPtr record(Stream* s) override {
    select();
    auto e = std::make_shared<CudaEvent>(pool_);
    check(cudaEventRecord(e->get(), cs(s)->get()), "cudaEventRecord");
    return e;
  }
  void stream_wait(Stream* s, const EventPtr& e) override {
    if (!e) return;
    select();
    check(cudaStreamWaitEvent(cs(s)->get(), ce(e), 0), "cudaStreamWaitEvent");
  }
  void sync_event(const EventPtr& e) override {
    if (e) check(cudaEventSynchronize(ce(e)), "cudaEventSynchronize");
  }
  bool query_event(const EventPtr& e) override {
    if (!e) return true;
    cudaError_t err = cudaEventQuery(ce(e));
    if (err == cudaErrorNotReady) return false;
    check(err, "cudaEventQuery");
    return true;
  }
  void sync_stream(Stream* s) override {
    select();
    check(cudaStreamSynchronize(cs(s)->get()), "cudaStreamSynchronize");
  }
  double event_time(const EventPtr& e) override {
    sync_event(e);
    sync_event(origin_);
    float ms = 0.f;
    check(cudaEventElapsedTime(&ms, ce(origin_), ce(e)), "cudaEventElapsedTime");
    return ms / 1000.0;
  }
  void reset_clock(Stream* compute) override { origin_ = record(compute); }

  double bench_plain_copy(uint64_t bytes, CopyKind kind, int reps) override {
    select();
    void* d = nullptr;
    void* h = nullptr;
    cudaStream_t s;
    check(cudaMalloc(&d, bytes), "cudaMalloc(baseline)");
    check(cudaMallocHost(&h, bytes), "cudaMallocHost(baseline)");
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    const cudaMemcpyKind k = kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    void* dst = kind == CopyKind::DeviceToHost ? h : d;
    const void* src = kind == CopyKind::DeviceToHost ? d : h;
    // One warm-up copy, not timed.
    check(cudaMemcpyAsync(dst, src, bytes, k, s), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) check(cudaMemcpyAsync(dst, src, bytes, k, s), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cudaStreamDestroy(s);
    cudaFreeHost(h);
    cudaFree(d);
    return secs;
  }

 private:
  void select() { cudaSetDevice(device_); }
  int device_;
  std::shared_ptr<EventPool> pool_;
  EventPtr origin_;
};

}  // namespace

std::unique_ptr<Runtime> make_runtime(int device_ordinal) {
  return std::make_unique<CudaRuntime>(device_ordinal);
}

}  // namespace pyd4j
