// The stream/event/memory layer under the agent. Two implementations with the same
// semantics: runtime_cuda.cu (CUDA streams and events) and runtime_host.cpp (worker threads
// standing in for the copy streams; the calling thread is the compute stream).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "arena.hpp"
#include "pyd4j_agent.h"

namespace pyd4j {

// Raised by runtimes and the agent; the C ABI turns it into a status code and a message.
struct AgentError : std::runtime_error {
  AgentError(int code, const std::string& msg) : std::runtime_error(msg), code(code) {}
  int code;
};

class Event {
 public:
  virtual ~Event() = default;
};

class Stream {
 public:
  virtual ~Stream() = default;
};

enum class CopyKind { DeviceToHost, HostToDevice };

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual const char* kind() const = 0;  // "cuda" or "host"

  // Memory, allocated once per agent.
  virtual void* device_alloc(uint64_t bytes) = 0;
  virtual void device_free(void* p) = 0;
  virtual void* pinned_alloc(uint64_t bytes) = 0;
  virtual void pinned_free(void* p) = 0;

  // Streams. `compute` is true for the compute stream.
  virtual std::unique_ptr<Stream> create_stream(bool compute) = 0;
  virtual void* native_handle(Stream* s) = 0;  // cudaStream_t or nullptr

  // Enqueue a copy on a copy stream (never the compute stream).
  virtual void memcpy_async(void* dst, const void* src, uint64_t n, CopyKind kind, Stream* s) = 0;
  // Record an event on `s` (completes when everything enqueued before it has).
  virtual EventPtr record(Stream* s) = 0;
  // Make `s` wait for `e` without blocking the host (host build: the compute stream is the
  // calling thread, so waiting there blocks it).
  virtual void stream_wait(Stream* s, const EventPtr& e) = 0;
  virtual void sync_event(const EventPtr& e) = 0;
  virtual bool query_event(const EventPtr& e) = 0;
  virtual void sync_stream(Stream* s) = 0;
  // Seconds from the runtime's time origin to a completed event.
  virtual double event_time(const EventPtr& e) = 0;
  // Time origin for event_time(): (re)set at creation and on reset_stats.
  virtual void reset_clock(Stream* compute) = 0;

  // Plain baseline transfer (see pyd4j_agent_bench_plain_copy).
  virtual double bench_plain_copy(uint64_t bytes, CopyKind kind, int reps) = 0;
};

std::unique_ptr<Runtime> make_runtime(int device_ordinal);

}  // namespace pyd4j
