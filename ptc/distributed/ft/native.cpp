// ptc's native DDP communication hook for the fault-tolerant Trainer (ddp=True).
//
// Built on first request by ptc/distributed/ft_native.py (torch.utils.cpp_extension, one build
// per torch version).  It does in C++ what ft_train's Python hook does per gradient bucket, so a
// step runs no Python per bucket, and each bucket is averaged by the backend's own thread as soon
// as its allreduce completes (a future callback, without the GIL):
//
//   run      DDP hands bucket i over: it is reduced in place in DDP's buffer, or, when it carries
//            the step's vote, copied into a wire buffer with the vote appended (one collective).
//            The vote rides with the previous step's smallest bucket or the last one, when it has
//            at most copy_max bytes; a bigger last bucket finds it unsent and the vote follows in
//            an allreduce of its own (the bucket's future then waits for both).
//   callback the allreduce completed: the bucket becomes the sum divided by the group's size (in
//            place, or out of the wire buffer: the same IEEE division as the Python hook), the
//            vote's sums are kept; the future DDP waits for is completed.  A failed one records
//            its error and completes the future with the bucket as it is (never committed).
//   abort    news from the coordinator (ft_group): every pending bucket's future completes at once
//            with its local gradients, so backward never waits for a dead peer; an in-place
//            allreduce left running is handed back as abandoned (the Trainer waits for it to end
//            before the next attempt touches a gradient, as with the Python hook).
//   end      after backward: (error, the vote's sums, abandoned Works) for the Trainer to commit.
//
// Everything else (the vote's values, PeerFailure, recovery, which group) stays in Python: the
// Trainer calls begin() before each attempt with the generation's process group.
//
// Locking: one mutex guards the state.  It is never held while a future is completed, a
// callback is added (either can run code inline) or Python is called.

#include <torch/extension.h>

#include <ATen/ScalarOps.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

using FuturePtr = c10::intrusive_ptr<c10::ivalue::Future>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// The future DDP waits for, and how many collectives must end before it completes.
struct Bucket {
  FuturePtr result;
  at::Tensor buffer;  // DDP's bucket (what the future returns)
  int remaining = 0;
};

// One collective of a step.
struct Entry {
  enum State { kPending, kClaimed, kDone };
  State state = kPending;
  std::shared_ptr<Bucket> bucket;
  at::Tensor flat;   // what is reduced: the bucket itself (in place) or a wire buffer
  int64_t wire_key;  // the wire buffer's key (bucket index, -1: the vote alone), unused in place
  bool in_place;     // flat is DDP's bucket
  bool fills;        // the bucket takes the mean (false: the vote alone)
  int64_t vote;      // elements of the vote at flat's end (0: none)
  int64_t size;      // the group's size for this attempt
  WorkPtr work;
};

// A Python callable kept by C++ (after each issued collective, with fault injection): released
// with the GIL, wherever its last owner goes.
using PyCallback = std::shared_ptr<py::object>;

PyCallback holdCallback(py::object fn) {
  if (fn.is_none()) {
    return nullptr;
  }
  return PyCallback(new py::object(std::move(fn)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

class HookState : public std::enable_shared_from_this<HookState> {
 public:
  void begin(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t size, std::vector<double> vote,
             int64_t copy_max, const std::string& aborted, py::object after_issue) {
    PyCallback callback = holdCallback(std::move(after_issue));  // the old one dies after the lock: never under it
    std::lock_guard<std::mutex> lock(mu_);
    ++attempt_;
    pg_ = pg;
    size_ = size;
    vote_ = std::move(vote);
    copy_max_ = copy_max;
    aborted_ = !aborted.empty();
    abort_reason_ = aborted;
    error_ = aborted;
    vote_sent_ = false;
    last_seen_ = false;
    have_summed_ = false;
    summed_.clear();
    entries_.clear();
    after_issue_.swap(callback);
  }

  FuturePtr run(c10d::GradBucket& grad_bucket) {
    at::Tensor buffer = grad_bucket.getBufferRef();
    const auto index = static_cast<int64_t>(grad_bucket.getIndex());
    const bool last = grad_bucket.isLast();
    auto bucket = std::make_shared<Bucket>();
    bucket->result = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
    bucket->buffer = buffer;
    std::vector<std::shared_ptr<Entry>> issued;
    PyCallback after_issue;
    bool nothing_out = true;  // no collective of this bucket registered: nobody else completes its future
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t nbytes = buffer.numel() * static_cast<int64_t>(buffer.element_size());
      bucket_bytes_[index] = nbytes;
      const bool small = nbytes <= copy_max_;
      const bool vote_here = !vote_sent_ && (last || (index == vote_index_ && small));
      const bool in_place = !(vote_here && small);
      vote_sent_ = vote_sent_ || vote_here;
      if (last) {
        last_seen_ = true;
        chooseVoteBucket(index);
      }
      if (aborted_ || !pg_) {
        if (error_.empty()) {
          error_ = aborted_ ? abort_reason_ : "no process group for this attempt";
        }
      } else {
        std::vector<std::shared_ptr<Entry>> entries;
        if (in_place) {
          entries.push_back(makeEntry(bucket, buffer, -2, true, true, 0));
          if (vote_here) {
            entries.push_back(makeEntry(bucket, wire(-1, 0, buffer), -1, false, false, vote_.size()));
          }
        } else {
          at::Tensor flat = wire(index, buffer.numel(), buffer);
          flat.narrow(0, 0, buffer.numel()).copy_(buffer);
          entries.push_back(makeEntry(bucket, flat, index, false, true, vote_here ? vote_.size() : 0));
        }
        bucket->remaining = static_cast<int>(entries.size());
        for (auto& e : entries) {
          try {
            std::vector<at::Tensor> tensors{e->flat};
            e->work = pg_->allreduce(tensors);
            entries_.push_back(e);
            issued.push_back(e);
          } catch (const std::exception& ex) {
            e->state = Entry::kDone;
            --bucket->remaining;
            if (error_.empty()) {
              error_ = ex.what();
            }
          }
        }
        after_issue = after_issue_;
        nothing_out = issued.empty();
      }
    }
    if (nothing_out) {
      bucket->result->markCompleted(c10::IValue(buffer));
    }
    for (auto& e : issued) {
      if (after_issue) {
        py::gil_scoped_acquire gil;
        try {
          (*after_issue)();
        } catch (py::error_already_set& ex) {
          fail(std::string("after_issue: ") + ex.what());
        }
      }
      auto self = shared_from_this();
      e->work->getFuture()->addCallback([self, e](c10::ivalue::Future& f) { self->done(e, f); });
    }
    return bucket->result;
  }

  // News (a newer generation, fenced, the coordinator lost): complete every pending bucket now.
  // `attempt` 0 aborts whatever attempt runs; another value only that attempt (a delayed abort).
  void abort(const std::string& reason, int64_t attempt) {
    std::vector<std::shared_ptr<Bucket>> complete;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (attempt != 0 && attempt != attempt_) {
        return;
      }
      aborted_ = true;
      if (abort_reason_.empty()) {
        abort_reason_ = reason;
      }
      bool any = false;
      for (auto& e : entries_) {
        if (e->state != Entry::kPending) {
          continue;
        }
        any = true;
        e->state = Entry::kDone;
        if (e->in_place) {
          abandoned_.push_back(e->work);  // it may still write into DDP's bucket
        } else {
          wires_.erase(e->wire_key);  // its collective may still write into it: never reused
        }
        if (--e->bucket->remaining == 0) {
          complete.push_back(e->bucket);
        }
      }
      if (any && error_.empty()) {
        error_ = reason;
      }
    }
    for (auto& b : complete) {
      b->result->markCompleted(c10::IValue(b->buffer));
    }
  }

  // After backward: (error or None, the vote's sums or None, abandoned Works).  Collectives still
  // pending (a backward that stopped early) are abandoned first.
  py::tuple end() {
    std::string error;
    std::vector<double> summed;
    bool have_summed = false;
    std::vector<WorkPtr> abandoned;
    PyCallback after_issue;  // released after the lock (its deleter takes the GIL)
    {
      py::gil_scoped_release nogil;
      abortPending();
      std::lock_guard<std::mutex> lock(mu_);
      error = error_;
      have_summed = have_summed_ && last_seen_;
      summed = summed_;
      abandoned.swap(abandoned_);
      entries_.clear();
      pg_.reset();
      after_issue.swap(after_issue_);
    }
    py::list works;
    for (auto& w : abandoned) {
      works.append(py::cast(w));
    }
    py::object err = error.empty() ? py::object(py::none()) : py::object(py::str(error));
    py::object sums = have_summed ? py::object(py::cast(summed)) : py::object(py::none());
    return py::make_tuple(err, sums, works);
  }

  int64_t attempt() {
    std::lock_guard<std::mutex> lock(mu_);
    return attempt_;
  }

  py::dict status() {
    std::lock_guard<std::mutex> lock(mu_);
    py::dict out;
    out["vote_index"] = vote_index_ < 0 ? py::object(py::none()) : py::object(py::int_(vote_index_));
    py::list keys;
    for (auto& kv : wires_) {
      keys.append(py::make_tuple(kv.first, kv.second.numel()));
    }
    out["wires"] = keys;
    int64_t pending = 0;
    for (auto& e : entries_) {
      pending += e->state != Entry::kDone ? 1 : 0;
    }
    out["pending"] = py::int_(pending);
    return out;
  }

 private:
  std::shared_ptr<Entry> makeEntry(const std::shared_ptr<Bucket>& bucket, at::Tensor flat, int64_t key,
                                   bool in_place, bool fills, size_t vote) {
    auto e = std::make_shared<Entry>();
    e->bucket = bucket;
    e->flat = std::move(flat);
    e->wire_key = key;
    e->in_place = in_place;
    e->fills = fills;
    e->vote = static_cast<int64_t>(vote);
    e->size = size_;
    if (vote > 0) {
      auto values = torch::tensor(vote_, torch::dtype(torch::kFloat64));
      e->flat.narrow(0, e->flat.numel() - e->vote, e->vote).copy_(values);
    }
    return e;
  }

  // The wire buffer of `key` (head elements like `like`, then the vote): the one it had, when it fits.
  at::Tensor wire(int64_t key, int64_t head, const at::Tensor& like) {
    const int64_t numel = head + static_cast<int64_t>(vote_.size());
    auto it = wires_.find(key);
    if (it != wires_.end() && it->second.numel() == numel && it->second.dtype() == like.dtype() &&
        it->second.device() == like.device()) {
      return it->second;
    }
    at::Tensor fresh = at::empty({numel}, like.options());
    wires_[key] = fresh;
    return fresh;
  }

  void chooseVoteBucket(int64_t last_index) {
    for (auto it = bucket_bytes_.begin(); it != bucket_bytes_.end();) {
      it = it->first > last_index ? bucket_bytes_.erase(it) : std::next(it);
    }
    int64_t best = -1;
    int64_t best_bytes = 0;
    for (auto& kv : bucket_bytes_) {  // ascending index: ties go to the lowest
      if (best < 0 || kv.second < best_bytes) {
        best = kv.first;
        best_bytes = kv.second;
      }
    }
    vote_index_ = (best >= 0 && best_bytes <= copy_max_) ? best : -1;
  }

  void done(const std::shared_ptr<Entry>& e, c10::ivalue::Future& f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (e->state != Entry::kPending) {
        return;  // aborted: its bucket was completed then
      }
      e->state = Entry::kClaimed;
    }
    bool ok = !f.hasError();
    std::string error = ok ? std::string() : f.tryRetrieveErrorMessage();
    std::vector<double> votes;
    if (ok) {
      try {
        at::Tensor buffer = e->bucket->buffer;
        at::Tensor size = at::native::wrapped_scalar_tensor(c10::Scalar(e->size));
        if (e->fills && e->in_place) {
          buffer.div_(size);
        } else if (e->fills) {
          at::div_out(buffer, e->flat.narrow(0, 0, buffer.numel()), size);
        }
        if (e->vote > 0) {
          at::Tensor tail = e->flat.narrow(0, e->flat.numel() - e->vote, e->vote).to(torch::kFloat64).contiguous();
          const double* p = tail.data_ptr<double>();
          votes.assign(p, p + e->vote);
        }
      } catch (const std::exception& ex) {
        ok = false;
        error = ex.what();
      }
    }
    std::shared_ptr<Bucket> complete;
    {
      std::lock_guard<std::mutex> lock(mu_);
      e->state = Entry::kDone;
      if (!ok) {
        if (error_.empty()) {
          error_ = error.empty() ? "allreduce failed" : error;
        }
        if (!e->in_place) {
          wires_.erase(e->wire_key);
        }
      } else if (e->vote > 0) {
        summed_ = std::move(votes);
        have_summed_ = true;
      }
      if (--e->bucket->remaining == 0) {
        complete = e->bucket;
      }
    }
    if (complete) {
      complete->result->markCompleted(c10::IValue(complete->buffer));
    }
  }

  void fail(const std::string& error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) {
      error_ = error;
    }
  }

  void abortPending() {
    int64_t attempt;
    {
      std::lock_guard<std::mutex> lock(mu_);
      attempt = attempt_;
    }
    abort("backward ended before this collective completed", attempt);
  }

  std::mutex mu_;
  int64_t attempt_ = 0;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  int64_t size_ = 1;
  std::vector<double> vote_;
  int64_t copy_max_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  std::string error_;
  bool vote_sent_ = false;
  bool last_seen_ = false;
  int64_t vote_index_ = -1;
  std::map<int64_t, int64_t> bucket_bytes_;
  std::map<int64_t, at::Tensor> wires_;
  std::vector<std::shared_ptr<Entry>> entries_;
  std::vector<double> summed_;
  bool have_summed_ = false;
  std::vector<WorkPtr> abandoned_;
  PyCallback after_issue_;
};

// What DDP's reducer holds: the state, weakly (the Trainer owns it); with no Trainer left, a
// bucket is handed back as it is (nothing will commit the step).
class FtCommHook : public c10d::CommHookInterface {
 public:
  explicit FtCommHook(std::weak_ptr<HookState> state) : state_(std::move(state)) {}

  FuturePtr runHook(c10d::GradBucket& bucket) override {
    if (auto state = state_.lock()) {
      return state->run(bucket);
    }
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
    future->markCompleted(c10::IValue(bucket.getBufferRef()));
    return future;
  }

  at::Tensor parseHookResult(const c10::IValue& result) override { return result.toTensor(); }

 private:
  std::weak_ptr<HookState> state_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ptc's native DDP communication hook for the fault-tolerant Trainer (see ptc/distributed/ft_native.py)";
  py::class_<HookState, std::shared_ptr<HookState>>(m, "HookState")
      .def(py::init<>())
      .def("begin", &HookState::begin, py::arg("pg"), py::arg("size"), py::arg("vote"), py::arg("copy_max"),
           py::arg("aborted"), py::arg("after_issue"))
      .def("abort", &HookState::abort, py::arg("reason"), py::arg("attempt") = 0,
           py::call_guard<py::gil_scoped_release>())
      .def("end", &HookState::end)
      .def("attempt", &HookState::attempt, py::call_guard<py::gil_scoped_release>())
      .def("status", &HookState::status);
  m.def(
      "register",
      [](py::object reducer, const std::shared_ptr<HookState>& state) {
        auto& r = py::cast<c10d::Reducer&>(reducer);
        r.register_comm_hook(std::make_unique<FtCommHook>(state));
      },
      py::arg("reducer"), py::arg("state"));
}
