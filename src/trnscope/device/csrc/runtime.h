// The runtime's hot state in C++: the emulated host clock and each NeuronCore's execution queue.
//
// These are the C++ twins of src/trnscope/runtime/clock.py (EmulatedClock) and
// src/trnscope/runtime/queue.py (KernelQueue): the same state, the same arithmetic, line for line,
// so that an op served by the C++ eager path (eager.cpp) and one served by Python leave the clock
// and the queue exactly where the other would. On the C++ path the Python runtime uses these
// objects (runtime.CLOCK is a Clock, each NeuronCoreRuntime's queue a Queue), so there is one
// state, whichever side serves an op. tests/runtime/test_clock_and_queue.py runs its clock and
// queue tests on both implementations; tests/device/test_cpp_core.py compares whole timelines.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

struct _object;
typedef _object PyObject;

namespace trnscope::rt {

enum Mode : int { REAL = 0, MODELLED = 1 };

int64_t perf_ns();  // CLOCK_MONOTONIC, what Python's time.perf_counter_ns() reads

class Clock {
 public:
  Clock(int mode, int64_t start_emu);
  int mode();
  int set_mode(int mode);
  int64_t now();
  int64_t to_emulated(int64_t real_ns);
  bool in_cut(int64_t real_ns);
  int64_t advance(int64_t ns);
  int64_t wait_until(int64_t emulated_ns);
  void cut_enter();
  void cut_exit();
  int cut_depth();
  void hold();
  void release();
  bool held();
  int64_t waited_ns();
  int64_t segments();
  std::vector<std::pair<int64_t, int64_t>> cuts(size_t from);
  std::vector<std::pair<int64_t, int64_t>> waits(size_t from);
  size_t waits_count();

 private:
  int64_t at(int64_t real);  // lock held
  void append(int64_t real, int64_t emu, int rate, bool keep);
  std::mutex mu_;
  int mode_;
  std::vector<int64_t> real_, emu_;
  std::vector<int8_t> rate_;
  int cut_depth_ = 0;
  int64_t cut_start_ = 0;
  bool cut_kept_ = false;
  std::vector<std::pair<int64_t, int64_t>> cuts_, waits_;
  int holds_ = 0;
  bool tail_kept_ = true;
  int64_t waited_ns_ = 0;
};

// A cut of the clock for the scope (the clock's emulation() context).
struct Cut {
  explicit Cut(Clock& c) : clock(c) { clock.cut_enter(); }
  ~Cut() { clock.cut_exit(); }
  Clock& clock;
};

// The host-cost model's figures the queue and the eager path spend (runtime/hostcost.py).
struct Costs {
  int64_t framework_op_ns = 3000, backend_op_ns = 5000, submit_ns = 5000, alloc_ns = 1000, view_ns = 1000;
};
Costs costs();
void set_costs(const Costs& c);

// A dispatch plan of the eager path: how to serve a call signature seen before (eager.cpp).
struct Plan;

// One execution the C++ eager path made while its queue records (what a Python Execution is built
// from: the plan holds the label, Program and timeline).
struct Record {
  int64_t seq, host_start, host_end, device_start, device_end, queue_wait, span, hbm;
  uint64_t thread;
  int64_t native_tid;
  std::shared_ptr<Plan> plan;
};

struct Submitted {
  bool first;
  int64_t host_start, submit, start, end, ready;
};

class Queue {
 public:
  Queue(int index, int64_t launch_ns, int64_t capacity) : index(index), launch_ns(launch_ns), capacity(capacity) {}
  // NeuronCoreRuntime._run's arithmetic after the numerics: the backend's host work, the submit,
  // the device start at max(submit + launch, device free, the stream's waits)
  // A record is kept if the queue records and `plan` is given (the eager path's executions; the
  // Python runtime makes its own records). span: the profiler's dispatch span, 0 for none.
  Submitted submit(Clock& clock, uint64_t neff_id, int64_t duration, int64_t compiled_ns,
                   const std::shared_ptr<Plan>* plan = nullptr, int64_t span = 0, uint64_t thread = 0,
                   int64_t native_tid = 0);
  std::pair<int64_t, int64_t> enqueue(int64_t ready, int64_t duration, int64_t overhead);
  int64_t stream_done(int64_t stream);
  void stream_wait(int64_t stream, int64_t device_ns);
  void order_after(int64_t other_free);

  const int index;
  const int64_t launch_ns;
  const int64_t capacity;
  std::mutex mu;
  int64_t device_free = 0;
  int64_t current_stream = 0;
  std::unordered_map<int64_t, int64_t> stream_end, stream_ready;
  std::unordered_set<uint64_t> known;
  int64_t neffs_executed = 0, cache_hits = 0, dispatches = 0;
  bool recording = false;  // keep the eager path's records: the core records, or a deferred observer watches
  bool sample_hbm = false;  // records carry the core's allocated bytes (the profiler's HBM samples)
  std::vector<Record> records;
  // the eager path's dispatch plans: key hash -> (key, plan); see eager.cpp
  std::unordered_map<size_t, std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<Plan>>>> plans;
  int64_t plan_count = 0;

 private:
  std::pair<int64_t, int64_t> enqueue_locked(int64_t ready, int64_t duration, int64_t overhead);
};

// the clock and queues the eager path uses: those the Python runtime installed
std::shared_ptr<Clock> clock();
void set_clock(std::shared_ptr<Clock> c);
std::shared_ptr<Queue> queue(int index);
void set_queue(int index, std::shared_ptr<Queue> q);
void clear_queues();
int64_t next_seq();  // shared by every execution record, Python's and C++'s
int64_t next_span();  // the profiler's dispatch spans, Python's and C++'s
bool spans();  // deferred observers watch (runtime/observe.py): a span per device call served here
void set_spans(bool on);
int64_t capacity_override();  // -1: none (memory.set_capacity)
void set_capacity_override(int64_t nbytes);

}  // namespace trnscope::rt
