// ptc's native Flight Recorder core: the ring buffer and the per-call hot path in C++.
//
// Built on first request by ptc/distributed/fr_native.py (torch.utils.cpp_extension, one
// build per torch version); the Python FlightRecorder owns everything else (groups and
// their names, dumps, the watchdog, signals).  What happens per recorded call:
//
//   begin    kind, (sizes, dtype) of the tensors, root/peer, thread, wall time; the
//            group's sequence counters advance                          -> "scheduled"
//   started  the backend returned its Work: time; a callback on the Work's future is
//            added (in C++, so the backend's thread runs it without the GIL); a Work
//            without a CPU future (gloo's send/recv, NCCL) goes to a poller thread
//                                                                          -> "started"
//   callback the Work finished: time; its error message if it failed  -> "completed" /
//            "failed"; a failure is queued for the watchdog, which a byte written to
//            the recorder's wake-up pipe wakes
//
// Calls reach begin/started either through torch's own C++ pre/post hooks on the
// process group (where torch has them: c10d/Hooks.hpp, torch 2.14), with no Python
// at all per call, or from ptc's Python method wrapper (fr_capture.py) elsewhere.
//
// Locking: one mutex per Tap guards the ring and the groups' counters.  It is never
// held while Python objects are made or Python code may run, nor while a future
// callback is added (that can run the callback inline), so the GIL and the mutex
// are never waited for in opposite orders.

#include <torch/extension.h>

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if __has_include(<torch/csrc/distributed/c10d/Hooks.hpp>)
#include <torch/csrc/distributed/c10d/Hooks.hpp>
#define PTC_FR_HOOKS 1
#else
#define PTC_FR_HOOKS 0
#endif

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// The op kinds, named as torch's HookOpName members (ptc.distributed.fr_ops.KINDS).
enum Kind : uint8_t {
  ALLREDUCE,
  BROADCAST,
  REDUCE,
  ALLGATHER,
  GATHER,
  SCATTER,
  REDUCE_SCATTER,
  ALLTOALL,
  BARRIER,
  SEND,
  RECV,
  SPLIT,
  NEW_WINDOW,
  OTHER,  // not recorded (counted as skipped)
};
const char* const kKindNames[] = {
    "ALLREDUCE", "BROADCAST", "REDUCE", "ALLGATHER", "GATHER", "SCATTER", "REDUCE_SCATTER",
    "ALLTOALL",  "BARRIER",   "SEND",   "RECV",      "SPLIT",  "NEW_WINDOW"};
constexpr int kRecordedKinds = OTHER;

bool isP2P(Kind k) { return k == SEND || k == RECV; }
bool inPlace(Kind k) { return k == ALLREDUCE || k == BROADCAST || k == REDUCE; }

Kind kindFromName(const std::string& name) {
  for (int k = 0; k < kRecordedKinds; ++k) {
    if (name == kKindNames[k]) return static_cast<Kind>(k);
  }
  return OTHER;
}

#if PTC_FR_HOOKS
Kind kindFromHook(c10d::HookOpName name) {
  switch (name) {
    case c10d::HookOpName::ALLREDUCE: return ALLREDUCE;
    case c10d::HookOpName::BROADCAST: return BROADCAST;
    case c10d::HookOpName::REDUCE: return REDUCE;
    case c10d::HookOpName::ALLGATHER: return ALLGATHER;
    case c10d::HookOpName::GATHER: return GATHER;
    case c10d::HookOpName::SCATTER: return SCATTER;
    case c10d::HookOpName::REDUCE_SCATTER: return REDUCE_SCATTER;
    case c10d::HookOpName::ALLTOALL: return ALLTOALL;
    case c10d::HookOpName::BARRIER: return BARRIER;
    case c10d::HookOpName::SEND: return SEND;
    case c10d::HookOpName::RECV: return RECV;
    case c10d::HookOpName::SPLIT: return SPLIT;
    case c10d::HookOpName::NEW_WINDOW: return NEW_WINDOW;
    default: return OTHER;
  }
}
#endif

enum State : uint8_t { SCHEDULED, STARTED, COMPLETED, FAILED };
const char* const kStateNames[] = {"scheduled", "started", "completed", "failed"};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();  // the clock of Python's time.time_ns()
}

uint64_t threadId() {  // what Python's threading.get_ident() returns on this thread
  return static_cast<uint64_t>(pthread_self());
}

// threading.current_thread().name ("Dummy-<n>" for a thread Python did not start, as the
// Python core records it).  Takes the GIL: called once per thread, never under the Tap's
// lock.  Torch takes the GIL the same way on these threads for Python comm hooks.
std::string pythonThreadName() {
#if PY_VERSION_HEX >= 0x030D0000
  bool finalizing = Py_IsFinalizing();
#else
  bool finalizing = _Py_IsFinalizing();
#endif
  if (!Py_IsInitialized() || finalizing) return std::string();
  py::gil_scoped_acquire gil;
  try {
    return py::module_::import("threading").attr("current_thread")().attr("name").cast<std::string>();
  } catch (const std::exception&) {
    return std::string();
  }
}

struct Layout {
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
};

// Layouts are written into a record's existing vectors, so a ring slot that is
// reused keeps its allocations: steady-state recording allocates nothing.
void keepLayouts(std::vector<Layout>& into, const std::vector<at::Tensor>& tensors) {
  into.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto sizes = tensors[i].sizes();
    into[i].sizes.assign(sizes.begin(), sizes.end());
    into[i].dtype = tensors[i].scalar_type();
  }
}

struct Record {
  int64_t id = -1;  // -1: never used
  int32_t slot = 0;
  Kind kind = OTHER;
  State state = SCHEDULED;
  bool timed_out = false;
  int64_t collective_seq = 0, p2p_seq = 0, peer = -1;
  uint64_t thread = 0;
  std::string thread_name;  // Python's name for the thread
  int64_t created = 0, started = 0, completed = 0;  // ns since the epoch; 0: not yet
  std::string error;
  std::vector<Layout> inputs, outputs;  // outputs stay empty for in-place kinds
  c10::intrusive_ptr<c10d::Work> polled;  // held only for a Work without a usable future
};

// One group in one generation (the Python recorder's _Group, by its pg_id).
struct Slot {
  int64_t collective_seq = 0, p2p_seq = 0;  // the last ids handed out
  int64_t last_started = -1, last_completed = -1;
  int64_t timeout_ns = 0;
};

class Tap : public std::enable_shared_from_this<Tap> {
 public:
  Tap(int64_t capacity, int wake_fd) : ring_(capacity), wake_fd_(wake_fd) {
    TORCH_CHECK(capacity >= 1, "capacity must be at least 1");
  }

  ~Tap() { close(); }

  void setSlot(int64_t slot, int64_t timeout_ns) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot >= static_cast<int64_t>(slots_.size())) slots_.resize(slot + 1);
    slots_[slot].timeout_ns = timeout_ns;
  }

  // A call was made: its record id, or -1 for a kind that is not recorded.
  int64_t begin(int32_t slot, Kind kind, const std::vector<at::Tensor>& inputs,
                const std::vector<at::Tensor>& outputs, int64_t peer) {
    if (kind == OTHER) {
      skipped_.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
    uint64_t thread = threadId();
    int64_t created = nowNs();
    // The thread's Python name, asked once per thread (before the lock: it takes the GIL).
    static thread_local std::string t_name;
    static thread_local bool t_named = false;
    if (!t_named) {
      t_name = pythonThreadName();
      t_named = true;
    }
    c10::intrusive_ptr<c10d::Work> dropped;  // released after the lock (see copyOf)
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot < 0 || slot >= static_cast<int64_t>(slots_.size())) return -1;
    Slot& group = slots_[slot];
    int64_t id = next_id_++;
    Record& r = at(id);
    r.id = id;
    r.slot = slot;
    r.kind = kind;
    r.state = SCHEDULED;
    r.timed_out = false;
    if (isP2P(kind)) {
      r.p2p_seq = ++group.p2p_seq;
      r.collective_seq = group.collective_seq;
    } else {
      r.collective_seq = ++group.collective_seq;
      r.p2p_seq = group.p2p_seq;
    }
    r.peer = peer;
    r.thread = thread;
    r.thread_name = t_name;  // per record: a new thread may reuse an ended one's id
    r.created = created;
    r.started = r.completed = 0;
    r.error.clear();
    dropped = std::move(r.polled);
    if (dropped) --polled_count_;
    keepLayouts(r.inputs, inputs);
    if (inPlace(kind) || outputs.empty()) {
      r.outputs.clear();
    } else {
      keepLayouts(r.outputs, outputs);
    }
    return id;
  }

  // The backend returned ``work`` for record ``id``.
  void started(int64_t id, const c10::intrusive_ptr<c10d::Work>& work) {
    int64_t now = nowNs();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Record* r = find(id);
      if (r == nullptr) return;
      r->started = now;
      if (r->state == SCHEDULED) r->state = STARTED;
      if (!isP2P(r->kind)) {
        Slot& group = slots_[r->slot];
        if (r->collective_seq > group.last_started) group.last_started = r->collective_seq;
      }
    }
    if (!work) return;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = work->getFuture();
    } catch (const std::exception&) {
      future.reset();  // e.g. Work::getFuture "not implemented": poll isCompleted() instead
    }
    // A device future (NCCL's) completes when the kernel is enqueued, not when it ends, so a
    // callback would close a hung collective as completed: such Works are polled through
    // isCompleted() (which asks the device, without blocking), as are Works without a future.
    if (future && !future->devices().empty()) future.reset();
    if (!future) {  // the poller thread watches isCompleted() (gloo's send/recv, NCCL)
      std::lock_guard<std::mutex> lock(mutex_);
      Record* r = find(id);
      if (r != nullptr && r->state == STARTED && !r->polled) {
        r->polled = work;
        ++polled_count_;
        startPollerLocked();
        poll_cv_.notify_one();
      }
      return;
    }
    std::weak_ptr<Tap> weak = weak_from_this();
    future->addCallback([weak, id](c10::ivalue::Future& f) {
      if (auto tap = weak.lock()) {
        tap->finish(id, f.hasError() ? f.tryRetrieveErrorMessage() : std::string(), f.hasError());
      }
    });
  }

  // Record ``id`` ended: completed, or failed with ``error``.
  void finish(int64_t id, const std::string& error, bool failed) {
    int64_t now = nowNs();
    c10::intrusive_ptr<c10d::Work> dropped;  // released after the lock (see copyOf)
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Record* r = find(id);
      if (r == nullptr || r->state == COMPLETED || r->state == FAILED) return;
      r->completed = now;
      dropped = std::move(r->polled);
      if (dropped) --polled_count_;
      if (failed) {
        r->state = FAILED;
        r->error = error.empty() ? std::string("failed") : error;
        failures_.push_back(id);
        wakeLocked();
      } else {
        r->state = COMPLETED;
        if (!isP2P(r->kind)) {
          Slot& group = slots_[r->slot];
          if (r->collective_seq > group.last_completed) group.last_completed = r->collective_seq;
        }
      }
    }
  }

  // Per-thread calls between a pre and a post hook (hooks path).  A pre hook
  // that finds its thread's previous call still open closes it as failed: the
  // post hook does not fire when the backend raises.
  void openOnThread(int64_t op_id, int64_t id) {
    uint64_t thread = threadId();
    int64_t stale = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = open_.find(thread);
      if (it != open_.end()) stale = it->second.second;
      if (id >= 0) {
        open_[thread] = {op_id, id};
      } else if (it != open_.end()) {
        open_.erase(it);
      }
    }
    if (stale >= 0) finish(stale, "the backend raised before returning a Work", true);
  }

  int64_t closeOnThread(int64_t op_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = open_.find(threadId());
    if (it == open_.end()) return -1;
    auto opened = it->second;
    open_.erase(it);
    return opened.first == op_id ? opened.second : -1;
  }

  // Finds polled Works that have finished (the poller thread, the watchdog and dumps call
  // this).  gloo's send/recv complete inside their wait(), so their end time is when wait()
  // returned, found within kPollInterval; NCCL's isCompleted() asks the GPU.  The poller
  // scans the ring once per kPollInterval while any such Work is open (a few us here).
  void poll() {
    std::vector<std::pair<int64_t, c10::intrusive_ptr<c10d::Work>>> held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& r : ring_) {
        if (r.polled) held.emplace_back(r.id, r.polled);
      }
    }
    for (auto& [id, work] : held) {
      bool done = false;
      std::string error;
      try {
        done = work->isCompleted();
        if (done && work->exception()) {
          try {
            std::rethrow_exception(work->exception());
          } catch (const std::exception& e) {
            error = e.what();
          } catch (...) {
            error = "failed";
          }
        }
      } catch (const std::exception& e) {
        done = true;
        error = e.what();
      }
      if (done) finish(id, error, !error.empty());
    }
  }

  std::vector<Record> records() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Record> out;
    out.reserve(ring_.size());
    int64_t first = std::max<int64_t>(0, next_id_ - static_cast<int64_t>(ring_.size()));
    for (int64_t id = first; id < next_id_; ++id) {
      const Record& r = at(id);
      if (r.id == id) out.push_back(copyOf(r));
    }
    return out;
  }

  std::vector<Record> takeFailures() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Record> out;
    for (int64_t id : failures_) {
      if (Record* r = find(id)) out.push_back(copyOf(*r));
    }
    failures_.clear();
    return out;
  }

  // Marks every unfinished call older than its group's timeout as timed out;
  // returns the oldest of those not marked before (or none).
  std::vector<Record> overdue(int64_t now) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Record> out;
    int64_t first = std::max<int64_t>(0, next_id_ - static_cast<int64_t>(ring_.size()));
    for (int64_t id = first; id < next_id_; ++id) {
      Record& r = at(id);
      if (r.id != id || r.state == COMPLETED || r.state == FAILED || r.timed_out) continue;
      if (now - r.created > slots_[r.slot].timeout_ns) {
        r.timed_out = true;
        if (out.empty()) out.push_back(copyOf(r));
      }
    }
    return out;
  }

  std::vector<Slot> slots() {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_;
  }

  int64_t recorded() {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_id_;
  }

  int64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }

  // The recorder closed: no more wake-up bytes (it closes its pipe next, and the fd number
  // may be reused at once) and no poller thread.  Records stay readable.
  void close() {
    std::thread poller;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_fd_ = -1;
      closed_ = true;
      poller.swap(poller_);
    }
    poll_cv_.notify_all();
    if (poller.joinable()) poller.join();  // never this thread: the poller holds no reference to the Tap
  }

 private:
  // A record without its Work: copies leave the ring's lock, and the last reference to a
  // Work must never be dropped under it (a Python backend's Work takes the GIL to die,
  // and a thread holding the GIL may be waiting for this lock).
  static Record copyOf(const Record& r) {
    Record copy;
    copy.id = r.id;
    copy.slot = r.slot;
    copy.kind = r.kind;
    copy.state = r.state;
    copy.timed_out = r.timed_out;
    copy.collective_seq = r.collective_seq;
    copy.p2p_seq = r.p2p_seq;
    copy.peer = r.peer;
    copy.thread = r.thread;
    copy.thread_name = r.thread_name;
    copy.created = r.created;
    copy.started = r.started;
    copy.completed = r.completed;
    copy.error = r.error;
    copy.inputs = r.inputs;
    copy.outputs = r.outputs;
    return copy;
  }

  // Wakes the recorder's watchdog thread (a failure to dump for).
  // Called under the lock, so that close() never races a write to a closed fd.
  void wakeLocked() {
    if (wake_fd_ >= 0) {
      char byte = 0;
      ssize_t ignored = ::write(wake_fd_, &byte, 1);  // a non-blocking pipe; full is fine
      (void)ignored;
    }
  }

  // The poller thread exists only once some Work had no future, and sleeps while none is held.
  void startPollerLocked() {
    if (poller_.joinable() || closed_) return;
    poller_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!closed_) {
        if (polled_count_ == 0) {
          poll_cv_.wait(lock);
          continue;
        }
        lock.unlock();
        poll();
        lock.lock();
        poll_cv_.wait_for(lock, kPollInterval);
      }
    });
  }

  Record& at(int64_t id) { return ring_[id % static_cast<int64_t>(ring_.size())]; }
  Record* find(int64_t id) {
    if (id < 0) return nullptr;
    Record& r = at(id);
    return r.id == id ? &r : nullptr;
  }

  std::mutex mutex_;
  std::vector<Record> ring_;
  std::vector<Slot> slots_;
  int64_t next_id_ = 0;
  std::atomic<int64_t> skipped_{0};
  std::vector<int64_t> failures_;
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> open_;  // thread -> (op_id, record id)
  static constexpr std::chrono::milliseconds kPollInterval{1};
  int64_t polled_count_ = 0;  // records holding a Work without a future
  bool closed_ = false;
  std::thread poller_;
  std::condition_variable poll_cv_;
  int wake_fd_;
};

// What one attached process group records into: a Tap and the group's current slot
// (the Python recorder moves it to a new slot when the group is reconfigured).
class Attachment {
 public:
  Attachment(std::shared_ptr<Tap> tap, int32_t slot)
      : tap_(std::move(tap)), slot_(std::make_shared<std::atomic<int32_t>>(slot)) {}

  void setSlot(int32_t slot) { slot_->store(slot); }

  // The wrapper path's begin/started/done (fr_capture.Calls).
  py::object begin(const std::string& kind, const std::vector<at::Tensor>& inputs,
                   const std::vector<at::Tensor>& outputs, int64_t peer) {
    int64_t id = tap_->begin(slot_->load(), kindFromName(kind), inputs, outputs, peer);
    return id < 0 ? py::object(py::none()) : py::object(py::int_(id));
  }

  void started(int64_t id, c10d::Work* work) {
    c10::intrusive_ptr<c10d::Work> held;
    if (work != nullptr) held = c10::intrusive_ptr<c10d::Work>::reclaim_copy(work);
    tap_->started(id, held);
  }

  // ``error``: the exception the call raised ("TypeName: message", as the Python core
  // writes it), or None when it completed.
  void done(int64_t id, const py::handle& error) {
    std::string message;
    if (!error.is_none()) {
      message = std::string(py::str(error.get_type().attr("__name__"))) + ": " + std::string(py::str(error));
    }
    tap_->finish(id, message, !error.is_none());
  }

  // The hooks path: torch's own pre/post hooks on the group, in C++.
  void hook(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t hook_id) {
#if PTC_FR_HOOKS
    std::shared_ptr<Tap> tap = tap_;
    std::shared_ptr<std::atomic<int32_t>> slot = slot_;
    pg->registerPreHook(hook_id, [tap, slot](const c10d::PreHookArgs& args) {
      int64_t id = tap->begin(slot->load(), kindFromHook(args.name), args.input_tensors,
                              args.output_tensors, args.root);
      tap->openOnThread(args.op_id, id);
    });
    pg->registerPostHook(hook_id, [tap](const c10d::PostHookArgs& args) {
      int64_t id = tap->closeOnThread(args.op_id);
      if (id >= 0) tap->started(id, args.work);
    });
    hooked_ = pg;
    hook_id_ = hook_id;
#else
    (void)pg;
    (void)hook_id;
    TORCH_CHECK(false, "this torch has no process-group hooks (c10d/Hooks.hpp)");
#endif
  }

  void unhook() {
#if PTC_FR_HOOKS
    if (hooked_) {
      hooked_->unregisterPreHook(hook_id_);
      hooked_->unregisterPostHook(hook_id_);
      hooked_.reset();
    }
#endif
  }

 private:
  std::shared_ptr<Tap> tap_;
  std::shared_ptr<std::atomic<int32_t>> slot_;  // shared with the hooks' closures
  c10::intrusive_ptr<c10d::ProcessGroup> hooked_;
  int64_t hook_id_ = 0;
};

py::tuple layoutsToPython(const std::vector<Layout>& layouts) {
  py::tuple out(layouts.size());
  for (size_t i = 0; i < layouts.size(); ++i) {
    py::tuple sizes(layouts[i].sizes.size());
    for (size_t d = 0; d < layouts[i].sizes.size(); ++d) sizes[d] = py::int_(layouts[i].sizes[d]);
    auto dtype = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(layouts[i].dtype)));
    out[i] = py::make_tuple(sizes, dtype);
  }
  return out;
}

py::object orNone(int64_t ns) { return ns ? py::object(py::int_(ns)) : py::object(py::none()); }

// (id, slot, kind, collective_seq, p2p_seq, peer, thread, thread_name, created, started,
//  completed, state, error, timed_out, inputs, outputs): what the recorder turns into entries.
py::list recordsToPython(const std::vector<Record>& records) {
  py::list out;
  for (const Record& r : records) {
    out.append(py::make_tuple(
        r.id, r.slot, kKindNames[r.kind], r.collective_seq, r.p2p_seq, r.peer, r.thread, r.thread_name, r.created,
        orNone(r.started), orNone(r.completed), kStateNames[r.state],
        r.error.empty() ? py::object(py::none()) : py::object(py::str(r.error)), r.timed_out,
        layoutsToPython(r.inputs), layoutsToPython(r.outputs)));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ptc's native Flight Recorder core (see ptc/distributed/fr_native.py)";
  m.attr("HOOKS") = py::bool_(PTC_FR_HOOKS);
  m.attr("KINDS") = py::make_tuple(
      kKindNames[0], kKindNames[1], kKindNames[2], kKindNames[3], kKindNames[4], kKindNames[5], kKindNames[6],
      kKindNames[7], kKindNames[8], kKindNames[9], kKindNames[10], kKindNames[11], kKindNames[12]);

  py::class_<Tap, std::shared_ptr<Tap>>(m, "Tap")
      .def(py::init<int64_t, int>(), py::arg("capacity"), py::arg("wake_fd"))
      .def("set_slot", &Tap::setSlot, py::arg("slot"), py::arg("timeout_ns"))
      .def("records", [](Tap& t) { return recordsToPython(t.records()); })
      .def("take_failures", [](Tap& t) { return recordsToPython(t.takeFailures()); })
      .def("overdue", [](Tap& t, int64_t now) { return recordsToPython(t.overdue(now)); }, py::arg("now_ns"))
      .def("poll", &Tap::poll, py::call_guard<py::gil_scoped_release>())
      .def("status", [](Tap& t) {
        py::list out;
        for (const Slot& s : t.slots()) {
          out.append(py::make_tuple(s.collective_seq, s.p2p_seq, s.last_started, s.last_completed));
        }
        return out;
      })
      .def_property_readonly("recorded", &Tap::recorded)
      .def_property_readonly("skipped", &Tap::skipped)
      .def("close", &Tap::close, py::call_guard<py::gil_scoped_release>())
      .def("attachment", [](std::shared_ptr<Tap> tap, int32_t slot) {
        return std::make_shared<Attachment>(std::move(tap), slot);
      }, py::arg("slot"));

  py::class_<Attachment, std::shared_ptr<Attachment>>(m, "Attachment")
      .def("set_slot", &Attachment::setSlot, py::arg("slot"))
      .def("begin", &Attachment::begin)
      .def("started", &Attachment::started)
      .def("done", &Attachment::done)
      .def("hook", &Attachment::hook, py::arg("pg"), py::arg("hook_id"))
      .def("unhook", &Attachment::unhook);
}
