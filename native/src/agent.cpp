// The side-agent: buffers, the two pools, the three streams, statistics, and the C ABI.
// Build-independent: everything CUDA-specific is behind Runtime (runtime_cuda.cu /
// runtime_host.cpp).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "arena.hpp"
#include "runtime.hpp"

namespace pyd4j {
namespace {

thread_local std::string g_last_error;

std::string fmt_bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

struct Buffer {
  uint64_t size = 0;
  bool external = false;
  void* ext_ptr = nullptr;
  int state = PYD4J_AGENT_RESIDENT;
  bool has_dev = false;
  uint64_t dev_offset = 0;
  uint64_t dev_reserved = 0;
  bool has_host = false;
  uint64_t host_offset = 0;
  EventPtr last_copy;  // the last copy issued on this buffer (either direction)
};

struct CopyRecord {
  EventPtr start, end;
  bool offload;
};

using Interval = std::pair<double, double>;

// Sorted, disjoint union of intervals.
std::vector<Interval> merge(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}

double measure(const std::vector<Interval>& u) {
  double s = 0;
  for (const auto& iv : u) s += iv.second - iv.first;
  return s;
}

double intersect_measure(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first);
    const double hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return s;
}

}  // namespace
}  // namespace pyd4j

struct pyd4j_agent {
  std::mutex m;
  std::unique_ptr<pyd4j::Runtime> rt;
  void* dev_base = nullptr;
  void* host_base = nullptr;
  std::unique_ptr<pyd4j::Arena> dev, host;
  std::unique_ptr<pyd4j::Stream> compute, offload, prefetch;
  std::unordered_map<uint64_t, pyd4j::Buffer> buffers;
  uint64_t next_id = 1;

  // statistics
  uint64_t bytes_offloaded = 0, bytes_prefetched = 0, n_offloads = 0, n_prefetches = 0;
  double offload_seconds = 0, prefetch_seconds = 0, wait_seconds = 0;
  std::vector<pyd4j::CopyRecord> pending_copies;
  std::vector<pyd4j::Interval> copy_intervals;     // resolved, merged lazily
  std::vector<pyd4j::Interval> compute_intervals;  // resolved
  std::vector<std::pair<pyd4j::EventPtr, pyd4j::EventPtr>> pending_compute;
  pyd4j::EventPtr open_compute;

  ~pyd4j_agent() {
    // Drain the copy streams before the memory they copy goes away.
    try {
      if (offload) rt->sync_stream(offload.get());
      if (prefetch) rt->sync_stream(prefetch.get());
      if (compute) rt->sync_stream(compute.get());
    } catch (...) {
    }
    buffers.clear();
    pending_copies.clear();
    pending_compute.clear();
    open_compute.reset();
    offload.reset();
    prefetch.reset();
    compute.reset();
    dev.reset();
    host.reset();
    if (dev_base) rt->device_free(dev_base);
    if (host_base) rt->pinned_free(host_base);
  }
};

namespace pyd4j {
namespace {

using Agent = pyd4j_agent;

Buffer& lookup(Agent* a, uint64_t id) {
  auto it = a->buffers.find(id);
  if (it == a->buffers.end())
    throw AgentError(PYD4J_AGENT_ERR_UNKNOWN_BUFFER,
                     "buffer id " + std::to_string(id) +
                         " is not registered (never allocated, or already freed); use the id "
                         "returned by pyd4j_agent_alloc/register_external");
  return it->second;
}

void* dev_ptr(Agent* a, const Buffer& b) {
  if (b.external) return b.ext_ptr;
  if (!b.has_dev) return nullptr;
  return static_cast<char*>(a->dev_base) + b.dev_offset;
}

void* host_ptr(Agent* a, const Buffer& b) {
  return b.has_host ? static_cast<char*>(a->host_base) + b.host_offset : nullptr;
}

void wait_all(Agent* a, Stream* s, const EventList& evs) {
  for (const auto& e : evs) a->rt->stream_wait(s, e);
}

Allocation alloc_device(Agent* a, uint64_t size, uint64_t id_for_msg) {
  Allocation al;
  if (!a->dev->allocate(size, &al)) {
    const ArenaStats st = a->dev->stats();
    const uint64_t need = Arena::align_up(size, a->dev->alignment());
    const bool over_limit = st.in_use + need > st.limit;
    throw AgentError(
        PYD4J_AGENT_ERR_OUT_OF_DEVICE_MEMORY,
        "device arena cannot fit " + fmt_bytes(need) +
            (id_for_msg ? " for buffer " + std::to_string(id_for_msg) : std::string()) + ": " +
            fmt_bytes(st.in_use) + " in use of " +
            (over_limit && st.limit < st.capacity ? "a limit of " + fmt_bytes(st.limit)
                                                   : fmt_bytes(st.capacity)) +
            ", largest free block " + fmt_bytes(st.largest_free) +
            (over_limit ? "" : " (fragmented)") +
            "; offload or free buffers first, or create the agent with a larger device arena");
  }
  return al;
}

// Gives b a device block of its size; stream s waits for the block's earlier users first.
void take_device_block(Agent* a, Buffer& b, Stream* s, uint64_t id_for_msg) {
  Allocation al = alloc_device(a, b.size, id_for_msg);
  wait_all(a, s, al.wait_for);
  b.has_dev = true;
  b.dev_offset = al.offset;
  b.dev_reserved = al.size;
}

Allocation alloc_host(Agent* a, uint64_t size, uint64_t id) {
  Allocation al;
  if (!a->host->allocate(size, &al)) {
    const ArenaStats st = a->host->stats();
    throw AgentError(PYD4J_AGENT_ERR_OUT_OF_HOST_POOL,
                     "pinned host pool cannot fit " +
                         fmt_bytes(Arena::align_up(size, a->host->alignment())) + " for buffer " +
                         std::to_string(id) + ": " + fmt_bytes(st.in_use) + " of " +
                         fmt_bytes(st.capacity) + " in use, largest free block " +
                         fmt_bytes(st.largest_free) +
                         "; free offloaded buffers, or create the agent with a larger host pool");
  }
  return al;
}

// Converts completed copy/compute records into intervals; with `block`, waits for all.
void resolve(Agent* a, bool block) {
  auto& pc = a->pending_copies;
  size_t keep = 0;
  for (size_t i = 0; i < pc.size(); ++i) {
    CopyRecord& r = pc[i];
    if (!block && !a->rt->query_event(r.end)) {
      pc[keep++] = std::move(r);
      continue;
    }
    const double t0 = a->rt->event_time(r.start), t1 = a->rt->event_time(r.end);
    (r.offload ? a->offload_seconds : a->prefetch_seconds) += t1 - t0;
    a->copy_intervals.emplace_back(t0, t1);
  }
  pc.resize(keep);
  auto& pm = a->pending_compute;
  keep = 0;
  for (size_t i = 0; i < pm.size(); ++i) {
    if (!block && !a->rt->query_event(pm[i].second)) {
      pm[keep++] = std::move(pm[i]);
      continue;
    }
    a->compute_intervals.emplace_back(a->rt->event_time(pm[i].first), a->rt->event_time(pm[i].second));
  }
  pm.resize(keep);
  if (a->copy_intervals.size() > 4096) a->copy_intervals = merge(std::move(a->copy_intervals));
  if (a->compute_intervals.size() > 4096) a->compute_intervals = merge(std::move(a->compute_intervals));
}

EventPtr issue_copy(Agent* a, Stream* s, void* dst, const void* src, uint64_t n, bool offload) {
  EventPtr start = a->rt->record(s);
  a->rt->memcpy_async(dst, src, n, offload ? CopyKind::DeviceToHost : CopyKind::HostToDevice, s);
  EventPtr end = a->rt->record(s);
  a->pending_copies.push_back({start, end, offload});
  if (a->pending_copies.size() > 1024) resolve(a, false);
  return end;
}

// Stream-ordered release of the device block; the buffer keeps its host slot.
void release_device(Agent* a, Buffer& b) {
  if (!b.external && b.has_dev) {
    EventList tags;
    if (b.last_copy) tags.push_back(b.last_copy);
    tags.push_back(a->rt->record(a->compute.get()));  // kernels still reading it
    a->dev->release(b.dev_offset, std::move(tags));
    b.has_dev = false;
    b.dev_reserved = 0;
  }
  b.state = PYD4J_AGENT_HOST;
}

void blocking_wait(Agent* a, std::unique_lock<std::mutex>& lk, const EventPtr& e) {
  if (!e) return;
  const auto t0 = std::chrono::steady_clock::now();
  lk.unlock();
  a->rt->sync_event(e);
  lk.lock();
  a->wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class F>
int guarded(F&& f) {
  try {
    f();
    g_last_error.clear();
    return PYD4J_AGENT_OK;
  } catch (const AgentError& e) {
    g_last_error = e.what();
    return e.code;
  } catch (const std::bad_alloc&) {
    g_last_error = "out of host memory for agent bookkeeping";
    return PYD4J_AGENT_ERR_SYSTEM;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return PYD4J_AGENT_ERR_SYSTEM;
  }
}

void need(bool ok, const std::string& msg) {
  if (!ok) throw AgentError(PYD4J_AGENT_ERR_INVALID_ARGUMENT, msg);
}

// One guarded API call on buffer `id`: f(buffer) runs under the agent's lock.
template <class F>
int on_buffer(Agent* a, uint64_t id, F&& f) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    f(lookup(a, id));
  });
}

}  // namespace
}  // namespace pyd4j

using namespace pyd4j;

extern "C" {

int pyd4j_agent_abi_version(void) { return PYD4J_AGENT_ABI_VERSION; }

int pyd4j_agent_is_cuda(void) {
#ifdef PYD4J_AGENT_CUDA
  return 1;
#else
  return 0;
#endif
}

const char* pyd4j_agent_build_kind(void) { return pyd4j_agent_is_cuda() ? "cuda" : "host"; }

const char* pyd4j_agent_last_error(void) { return g_last_error.c_str(); }

size_t pyd4j_agent_alignment(void) { return PYD4J_AGENT_ALIGNMENT; }

int pyd4j_agent_create(uint64_t device_bytes, uint64_t host_bytes, int device_ordinal, pyd4j_agent** out) {
  return guarded([&] {
    need(out != nullptr, "out must not be NULL");
    *out = nullptr;
    need(device_bytes >= PYD4J_AGENT_ALIGNMENT,
         "device_bytes=" + std::to_string(device_bytes) + " is below the minimum of " +
             std::to_string(PYD4J_AGENT_ALIGNMENT) + " bytes; pass the arena size in bytes");
    need(host_bytes >= PYD4J_AGENT_ALIGNMENT,
         "host_bytes=" + std::to_string(host_bytes) + " is below the minimum of " +
             std::to_string(PYD4J_AGENT_ALIGNMENT) + " bytes; pass the pinned pool size in bytes");
    device_bytes = device_bytes / PYD4J_AGENT_ALIGNMENT * PYD4J_AGENT_ALIGNMENT;
    host_bytes = host_bytes / PYD4J_AGENT_ALIGNMENT * PYD4J_AGENT_ALIGNMENT;
    auto a = std::make_unique<pyd4j_agent>();
    a->rt = make_runtime(device_ordinal);
    Runtime* rt = a->rt.get();
    auto done = [rt](const EventPtr& e) { return rt->query_event(e); };
    a->dev_base = rt->device_alloc(device_bytes);
    a->host_base = rt->pinned_alloc(host_bytes);
    a->dev = std::make_unique<Arena>(device_bytes, PYD4J_AGENT_ALIGNMENT, done);
    a->host = std::make_unique<Arena>(host_bytes, PYD4J_AGENT_ALIGNMENT, done);
    a->compute = rt->create_stream(true);
    a->offload = rt->create_stream(false);
    a->prefetch = rt->create_stream(false);
    rt->reset_clock(a->compute.get());
    *out = a.release();
  });
}

int pyd4j_agent_destroy(pyd4j_agent* agent) {
  return guarded([&] { delete agent; });
}

int pyd4j_agent_alloc(pyd4j_agent* a, uint64_t size, uint64_t* out_id) {
  return guarded([&] {
    need(a && out_id, "agent and out_id must not be NULL");
    need(size > 0, "size=0: buffers must hold at least one byte");
    std::lock_guard<std::mutex> lk(a->m);
    Buffer b;
    b.size = size;
    take_device_block(a, b, a->compute.get(), 0);
    const uint64_t id = a->next_id++;
    a->buffers.emplace(id, std::move(b));
    *out_id = id;
  });
}

int pyd4j_agent_register_external(pyd4j_agent* a, void* ptr, uint64_t size, uint64_t* out_id) {
  return guarded([&] {
    need(a && out_id, "agent and out_id must not be NULL");
    need(ptr != nullptr, "ptr is NULL: register the address of existing memory");
    need(size > 0, "size=0: buffers must hold at least one byte");
    std::lock_guard<std::mutex> lk(a->m);
    Buffer b;
    b.size = size;
    b.external = true;
    b.ext_ptr = ptr;
    const uint64_t id = a->next_id++;
    a->buffers.emplace(id, std::move(b));
    *out_id = id;
  });
}

int pyd4j_agent_offload(pyd4j_agent* a, uint64_t id, int release) {
  return on_buffer(a, id, [&](Buffer& b) {
    if (b.state != PYD4J_AGENT_RESIDENT)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) + " has no device contents (state " +
                           (b.state == PYD4J_AGENT_HOST ? "HOST" : "RESERVED") +
                           "); prefetch it before offloading again");
    Stream* s = a->offload.get();
    if (!b.has_host) {
      Allocation al = alloc_host(a, b.size, id);
      wait_all(a, s, al.wait_for);  // earlier copies still reading that host memory
      b.has_host = true;
      b.host_offset = al.offset;
    }
    a->rt->stream_wait(s, a->rt->record(a->compute.get()));  // the data is produced on compute
    if (b.last_copy) a->rt->stream_wait(s, b.last_copy);      // e.g. a prefetch still writing it
    b.last_copy = issue_copy(a, s, host_ptr(a, b), dev_ptr(a, b), b.size, true);
    a->bytes_offloaded += b.size;
    a->n_offloads += 1;
    if (release) release_device(a, b);
  });
}

int pyd4j_agent_release_device(pyd4j_agent* a, uint64_t id) {
  return on_buffer(a, id, [&](Buffer& b) {
    if (!b.has_host)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) +
                           " has no host copy: releasing its device block would lose its "
                           "contents; offload it first, or free it");
    if (b.state == PYD4J_AGENT_HOST)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) + " has no device block (state HOST)");
    release_device(a, b);
  });
}

int pyd4j_agent_reserve_device(pyd4j_agent* a, uint64_t id) {
  return on_buffer(a, id, [&](Buffer& b) {
    if (b.state != PYD4J_AGENT_HOST)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) +
                           " already has a device block; only HOST buffers can reserve one");
    if (!b.external) {
      take_device_block(a, b, a->prefetch.get(), id);  // the prefetch writes it first
    }
    b.state = PYD4J_AGENT_RESERVED;
  });
}

int pyd4j_agent_drop_host(pyd4j_agent* a, uint64_t id) {
  return on_buffer(a, id, [&](Buffer& b) {
    if (!b.has_host)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) + " has no host copy to drop");
    if (b.state == PYD4J_AGENT_RESERVED)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) +
                           " is RESERVED: its host copy is the only copy; prefetch it first, or free it");
    EventList tags;
    if (b.last_copy) tags.push_back(b.last_copy);
    a->host->release(b.host_offset, tags);
    b.has_host = false;
    if (b.state == PYD4J_AGENT_HOST) a->buffers.erase(id);
  });
}

int pyd4j_agent_prefetch(pyd4j_agent* a, uint64_t id) {
  return on_buffer(a, id, [&](Buffer& b) {
    if (b.state == PYD4J_AGENT_RESIDENT)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) +
                           " is resident on the device; only offloaded (HOST or RESERVED) buffers "
                           "can be prefetched");
    Stream* s = a->prefetch.get();
    if (b.state == PYD4J_AGENT_RESERVED) {
      // block allocated by reserve_device, which ordered the prefetch stream already
      if (b.external) a->rt->stream_wait(s, a->rt->record(a->compute.get()));
    } else if (!b.external) {
      take_device_block(a, b, s, id);
    } else {
      // The owner may have used its memory on the compute stream meanwhile.
      a->rt->stream_wait(s, a->rt->record(a->compute.get()));
    }
    if (b.last_copy) a->rt->stream_wait(s, b.last_copy);  // the offload writing the host slot
    b.last_copy = issue_copy(a, s, dev_ptr(a, b), host_ptr(a, b), b.size, false);
    a->bytes_prefetched += b.size;
    a->n_prefetches += 1;
    b.state = PYD4J_AGENT_RESIDENT;
  });
}

int pyd4j_agent_rebind_external(pyd4j_agent* a, uint64_t id, void* ptr) {
  return on_buffer(a, id, [&](Buffer& b) {
    need(b.external, "buffer " + std::to_string(id) +
                         " lives in the device arena; only buffers registered with "
                         "pyd4j_agent_register_external can be pointed at other memory");
    need(ptr != nullptr, "ptr is NULL: pass the address of " + fmt_bytes(b.size) + " of memory");
    if (b.state == PYD4J_AGENT_RESIDENT)
      throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                       "buffer " + std::to_string(id) +
                           " is RESIDENT: its contents are still at the old address; offload it "
                           "with release=1 (or release_device after the offload) first");
    b.ext_ptr = ptr;  // copies already issued captured the old address
  });
}

int pyd4j_agent_acquire(pyd4j_agent* a, uint64_t id) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::unique_lock<std::mutex> lk(a->m);
    Buffer& b = lookup(a, id);
    if (!b.last_copy) return;
    EventPtr e = b.last_copy;
    if (a->rt->native_handle(a->compute.get()) != nullptr) {
      a->rt->stream_wait(a->compute.get(), e);  // device: no host block
    } else {
      blocking_wait(a, lk, e);  // host build: this thread is the compute stream
    }
  });
}

int pyd4j_agent_wait(pyd4j_agent* a, uint64_t id) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::unique_lock<std::mutex> lk(a->m);
    EventPtr e = lookup(a, id).last_copy;
    blocking_wait(a, lk, e);
    auto it = a->buffers.find(id);
    if (it != a->buffers.end() && it->second.last_copy == e) it->second.last_copy.reset();
  });
}

int pyd4j_agent_synchronize(pyd4j_agent* a) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::unique_lock<std::mutex> lk(a->m);
    EventPtr e1 = a->rt->record(a->offload.get());
    EventPtr e2 = a->rt->record(a->prefetch.get());
    blocking_wait(a, lk, e1);
    blocking_wait(a, lk, e2);
  });
}

int pyd4j_agent_free(pyd4j_agent* a, uint64_t id) {
  return on_buffer(a, id, [&](Buffer& b) {
    EventList tags;
    if (b.last_copy) tags.push_back(b.last_copy);
    if (b.has_dev && !b.external) {
      EventList dev_tags = tags;
      dev_tags.push_back(a->rt->record(a->compute.get()));  // kernels still using it
      a->dev->release(b.dev_offset, std::move(dev_tags));
    }
    if (b.has_host) a->host->release(b.host_offset, tags);
    a->buffers.erase(id);
  });
}

int pyd4j_agent_buffer_info(pyd4j_agent* a, uint64_t id, pyd4j_agent_buffer_info_t* out) {
  return guarded([&] {
    need(a && out, "agent and out must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    const Buffer& b = lookup(a, id);
    std::memset(out, 0, sizeof(*out));
    out->size = b.size;
    out->reserved = b.external ? 0 : b.dev_reserved;
    out->state = static_cast<uint32_t>(b.state);
    out->external = b.external ? 1 : 0;
    out->pending = (b.last_copy && !a->rt->query_event(b.last_copy)) ? 1 : 0;
    out->has_host = b.has_host ? 1 : 0;
    out->device_ptr = dev_ptr(a, b);
    out->host_ptr = host_ptr(a, b);
  });
}

int pyd4j_agent_stream_handle(pyd4j_agent* a, int stream, void** out) {
  return guarded([&] {
    need(a && out, "agent and out must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    Stream* s = stream == PYD4J_AGENT_STREAM_COMPUTE    ? a->compute.get()
                : stream == PYD4J_AGENT_STREAM_OFFLOAD  ? a->offload.get()
                : stream == PYD4J_AGENT_STREAM_PREFETCH ? a->prefetch.get()
                                                        : nullptr;
    need(s != nullptr, "stream=" + std::to_string(stream) +
                           " is not a stream: use 0 (compute), 1 (offload) or 2 (prefetch)");
    *out = a->rt->native_handle(s);
  });
}

int pyd4j_agent_mark_compute(pyd4j_agent* a, int begin) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    if (begin) {
      if (a->open_compute)
        throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                         "a compute interval is already open; mark its end (begin=0) first");
      a->open_compute = a->rt->record(a->compute.get());
    } else {
      if (!a->open_compute)
        throw AgentError(PYD4J_AGENT_ERR_BAD_STATE,
                         "no compute interval is open; mark its start (begin=1) first");
      a->pending_compute.emplace_back(std::move(a->open_compute), a->rt->record(a->compute.get()));
      a->open_compute.reset();
    }
  });
}

int pyd4j_agent_get_stats(pyd4j_agent* a, pyd4j_agent_stats_t* out) {
  return guarded([&] {
    need(a && out, "agent and out must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    resolve(a, true);
    a->copy_intervals = merge(std::move(a->copy_intervals));
    a->compute_intervals = merge(std::move(a->compute_intervals));
    std::memset(out, 0, sizeof(*out));
    const ArenaStats d = a->dev->stats(), h = a->host->stats();
    out->device_capacity = d.capacity;
    out->device_in_use = d.in_use;
    out->device_peak = d.peak;
    out->device_largest_free = d.largest_free;
    out->host_capacity = h.capacity;
    out->host_in_use = h.in_use;
    out->host_peak = h.peak;
    out->bytes_offloaded = a->bytes_offloaded;
    out->bytes_prefetched = a->bytes_prefetched;
    out->n_offloads = a->n_offloads;
    out->n_prefetches = a->n_prefetches;
    out->n_buffers = a->buffers.size();
    out->offload_seconds = a->offload_seconds;
    out->prefetch_seconds = a->prefetch_seconds;
    out->copy_busy_seconds = measure(a->copy_intervals);
    out->compute_seconds = measure(a->compute_intervals);
    out->overlap_seconds = intersect_measure(a->copy_intervals, a->compute_intervals);
    out->wait_seconds = a->wait_seconds;
    out->device_high_water = d.high_water;
    out->device_limit = d.limit;
  });
}

int pyd4j_agent_set_device_limit(pyd4j_agent* a, uint64_t bytes) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    a->dev->set_limit(bytes);
  });
}

int pyd4j_agent_reset_peak(pyd4j_agent* a) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    a->dev->reset_peak();
    a->host->reset_peak();
  });
}

int pyd4j_agent_reset_stats(pyd4j_agent* a) {
  return guarded([&] {
    need(a != nullptr, "agent must not be NULL");
    std::lock_guard<std::mutex> lk(a->m);
    resolve(a, true);  // let in-flight records finish against the old clock
    a->bytes_offloaded = a->bytes_prefetched = a->n_offloads = a->n_prefetches = 0;
    a->offload_seconds = a->prefetch_seconds = a->wait_seconds = 0;
    a->copy_intervals.clear();
    a->compute_intervals.clear();
    a->open_compute.reset();
    a->dev->reset_peak();
    a->host->reset_peak();
    a->rt->reset_clock(a->compute.get());
  });
}

int pyd4j_agent_bench_plain_copy(pyd4j_agent* a, uint64_t bytes, int direction, int reps,
                                 double* out_seconds) {
  return guarded([&] {
    need(a && out_seconds, "agent and out_seconds must not be NULL");
    need(bytes > 0, "bytes=0: copy at least one byte");
    need(reps > 0, "reps=" + std::to_string(reps) + ": repeat at least once");
    need(direction == PYD4J_AGENT_DEVICE_TO_HOST || direction == PYD4J_AGENT_HOST_TO_DEVICE,
         "direction=" + std::to_string(direction) + ": use 0 (device->host) or 1 (host->device)");
    *out_seconds = a->rt->bench_plain_copy(
        bytes, direction == PYD4J_AGENT_DEVICE_TO_HOST ? CopyKind::DeviceToHost : CopyKind::HostToDevice,
        reps);
  });
}

}  // extern "C"
