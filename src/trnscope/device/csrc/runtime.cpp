// The emulated host clock and the NeuronCores' queues in C++ (see runtime.h). Every method is the
// Python method of the same name in runtime/clock.py or runtime/queue.py, statement for statement.
#include "runtime.h"

#include "core.h"

#include <algorithm>
#include <atomic>
#include <ctime>

namespace trnscope::rt {

int64_t perf_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// --- clock ------------------------------------------------------------------------------------------

Clock::Clock(int mode, int64_t start_emu) : mode_(mode) {
  real_.push_back(perf_ns());
  emu_.push_back(start_emu);
  rate_.push_back(mode == REAL ? 1 : 0);
}

int Clock::mode() {
  std::lock_guard<std::mutex> lock(mu_);
  return mode_;
}

int Clock::set_mode(int mode) {
  std::lock_guard<std::mutex> lock(mu_);
  int old = mode_;
  if (mode != old) {
    int64_t real = perf_ns();
    int64_t emu = at(real);
    mode_ = mode;
    append(real, emu, (mode_ == REAL && cut_depth_ == 0) ? 1 : 0, holds_ > 0);
  }
  return old;
}

int64_t Clock::at(int64_t real) {
  if (real >= real_.back()) return emu_.back() + (real - real_.back()) * rate_.back();
  auto it = std::upper_bound(real_.begin(), real_.end(), real);
  auto i = static_cast<int64_t>(it - real_.begin()) - 1;
  if (i < 0) return emu_[0] - (real_[0] - real) * rate_[0];
  return emu_[i] + (real - real_[i]) * rate_[i];
}

int64_t Clock::now() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!rate_.back()) return emu_.back();
  int64_t real = perf_ns();
  if (real >= real_.back()) return emu_.back() + real - real_.back();
  return at(real);
}

int64_t Clock::to_emulated(int64_t real_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  return at(real_ns);
}

bool Clock::in_cut(int64_t real_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cut_depth_ && real_ns >= cut_start_) return true;
  auto it = std::upper_bound(cuts_.begin(), cuts_.end(), real_ns,
                             [](int64_t v, const std::pair<int64_t, int64_t>& c) { return v < c.first; });
  if (it == cuts_.begin()) return false;
  --it;
  return it->first <= real_ns && real_ns < it->second;
}

int64_t Clock::advance(int64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t real = perf_ns();
  int64_t emu = at(real) + std::max<int64_t>(0, ns);
  append(real, emu, rate_.back(), holds_ > 0 || (cut_depth_ > 0 && cut_kept_));
  return emu;
}

int64_t Clock::wait_until(int64_t emulated_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t real = perf_ns();
  int64_t now = at(real);
  if (emulated_ns <= now) return 0;
  append(real, emulated_ns, rate_.back(), holds_ > 0 || (cut_depth_ > 0 && cut_kept_));
  waited_ns_ += emulated_ns - now;
  if (holds_) waits_.emplace_back(now, emulated_ns);
  return emulated_ns - now;
}

void Clock::append(int64_t real, int64_t emu, int rate, bool keep) {
  if (real <= real_.back()) {  // the same instant (or the OS clock did not move): restate it
    emu_.back() = emu;
    rate_.back() = static_cast<int8_t>(rate);
    tail_kept_ = tail_kept_ || keep;
  } else if (keep || tail_kept_) {
    real_.push_back(real);
    emu_.push_back(emu);
    rate_.push_back(static_cast<int8_t>(rate));
    tail_kept_ = keep;
  } else {  // nobody will map a timestamp from between the two: the new entry replaces the old
    real_.back() = real;
    emu_.back() = emu;
    rate_.back() = static_cast<int8_t>(rate);
  }
}

void Clock::cut_enter() {
  std::lock_guard<std::mutex> lock(mu_);
  cut_depth_ += 1;
  if (cut_depth_ == 1) {
    bool keep = cut_kept_ = holds_ > 0;
    int64_t real = cut_start_ = perf_ns();
    if (rate_.back()) append(real, emu_.back() + real - real_.back(), 0, keep);
  }
}

void Clock::cut_exit() {
  std::lock_guard<std::mutex> lock(mu_);
  cut_depth_ -= 1;
  if (cut_depth_ == 0) {
    int64_t end = perf_ns();
    bool keep = cut_kept_ || holds_ > 0;
    if (keep) cuts_.emplace_back(cut_start_, end);
    if (mode_ == REAL) append(end, emu_.back(), 1, keep);
  }
}

int Clock::cut_depth() {
  std::lock_guard<std::mutex> lock(mu_);
  return cut_depth_;
}

void Clock::hold() {
  std::lock_guard<std::mutex> lock(mu_);
  holds_ += 1;
  tail_kept_ = true;
}

void Clock::release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (holds_) holds_ -= 1;
}

bool Clock::held() {
  std::lock_guard<std::mutex> lock(mu_);
  return holds_ > 0;
}

int64_t Clock::waited_ns() {
  std::lock_guard<std::mutex> lock(mu_);
  return waited_ns_;
}

int64_t Clock::segments() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(real_.size());
}

std::vector<std::pair<int64_t, int64_t>> Clock::cuts(size_t from) {
  std::lock_guard<std::mutex> lock(mu_);
  return {cuts_.begin() + std::min(from, cuts_.size()), cuts_.end()};
}

std::vector<std::pair<int64_t, int64_t>> Clock::waits(size_t from) {
  std::lock_guard<std::mutex> lock(mu_);
  return {waits_.begin() + std::min(from, waits_.size()), waits_.end()};
}

size_t Clock::waits_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_.size();
}

// --- host costs -------------------------------------------------------------------------------------

namespace {
std::mutex g_mu;
Costs g_costs;
std::shared_ptr<Clock> g_clock;
std::vector<std::shared_ptr<Queue>> g_queues;
std::atomic<int64_t> g_seq{0};
std::atomic<int64_t> g_span{0};
std::atomic<bool> g_spans{false};
std::atomic<int64_t> g_capacity_override{-1};
}  // namespace

Costs costs() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_costs;
}

void set_costs(const Costs& c) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_costs = c;
}

// --- queue ------------------------------------------------------------------------------------------

std::pair<int64_t, int64_t> Queue::enqueue_locked(int64_t ready, int64_t duration, int64_t overhead) {
  int64_t sid = current_stream;
  auto r = stream_ready.find(sid);
  int64_t start = std::max({ready, device_free, r == stream_ready.end() ? int64_t(0) : r->second}) + overhead;
  int64_t end = start + duration;
  device_free = end;
  stream_end[sid] = end;
  return {start, end};
}

std::pair<int64_t, int64_t> Queue::enqueue(int64_t ready, int64_t duration, int64_t overhead) {
  std::lock_guard<std::mutex> lock(mu);
  return enqueue_locked(ready, duration, overhead);
}

Submitted Queue::submit(Clock& clock, uint64_t neff_id, int64_t duration, int64_t compiled_ns,
                        const std::shared_ptr<Plan>* plan, int64_t span, uint64_t thread, int64_t native_tid) {
  Costs c = costs();
  clock.advance(c.backend_op_ns);
  Submitted s;
  s.host_start = clock.now();
  if (compiled_ns) clock.advance(compiled_ns);
  s.submit = clock.advance(c.submit_ns);
  std::lock_guard<std::mutex> lock(mu);
  s.first = known.insert(neff_id).second;
  if (s.first) {
    neffs_executed += 1;
  } else {
    cache_hits += 1;
  }
  dispatches += 1;
  s.ready = s.submit + launch_ns;
  auto se = enqueue_locked(s.submit, duration, launch_ns);
  s.start = se.first;
  s.end = se.second;
  if (recording && plan != nullptr) {
    int64_t hbm = sample_hbm ? stats(index).allocated : 0;
    records.push_back(Record{next_seq(), s.host_start, s.submit, s.start, s.end, s.start - s.ready, span, hbm, thread,
                             native_tid, *plan});
  }
  return s;
}

int64_t Queue::stream_done(int64_t stream) {
  std::lock_guard<std::mutex> lock(mu);
  auto e = stream_end.find(stream);
  auto r = stream_ready.find(stream);
  return std::max(e == stream_end.end() ? int64_t(0) : e->second, r == stream_ready.end() ? int64_t(0) : r->second);
}

void Queue::stream_wait(int64_t stream, int64_t device_ns) {
  std::lock_guard<std::mutex> lock(mu);
  auto r = stream_ready.find(stream);
  if (device_ns > (r == stream_ready.end() ? int64_t(0) : r->second)) stream_ready[stream] = device_ns;
}

void Queue::order_after(int64_t other_free) {
  std::lock_guard<std::mutex> lock(mu);
  device_free = std::max(device_free, other_free);
}

// --- what the eager path uses -------------------------------------------------------------------------

std::shared_ptr<Clock> clock() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_clock;
}

void set_clock(std::shared_ptr<Clock> c) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_clock = std::move(c);
}

std::shared_ptr<Queue> queue(int index) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (index < 0 || static_cast<size_t>(index) >= g_queues.size()) return nullptr;
  return g_queues[index];
}

void set_queue(int index, std::shared_ptr<Queue> q) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (static_cast<size_t>(index) >= g_queues.size()) g_queues.resize(index + 1);
  g_queues[index] = std::move(q);
}

void clear_queues() {
  std::vector<std::shared_ptr<Queue>> old;  // released after the lock
  std::lock_guard<std::mutex> lock(g_mu);
  old.swap(g_queues);
}

int64_t next_seq() { return ++g_seq; }
int64_t next_span() { return ++g_span; }
bool spans() { return g_spans.load(std::memory_order_relaxed); }
void set_spans(bool on) { g_spans = on; }
int64_t capacity_override() { return g_capacity_override.load(std::memory_order_relaxed); }
void set_capacity_override(int64_t nbytes) { g_capacity_override = nbytes; }

}  // namespace trnscope::rt
