#include "dist/communicator.h"

// The C API only (OpenMPI's and MPICH's mpi.h otherwise pull in the deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "perceiver/error.h"

namespace perceiver::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kArrivalTag = 7301;
constexpr int kPingTag = 7302, kPongTag = 7303;  // liveness probe after a timeout

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  PCV_CHECK(end && *end == '\0' && d > 0, "environment variable ", name, "='", v, "' is not a positive number");
  return d;
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  PCV_FAIL(call, " failed: ", std::string(msg, size_t(len)));
}

}  // namespace

CommOptions CommOptions::from_env() {
  CommOptions o;
  o.timeout_s = env_double("PERCEIVER_DIST_TIMEOUT", o.timeout_s);
  o.long_timeout_s = std::max(o.timeout_s, env_double("PERCEIVER_DIST_LONG_TIMEOUT", o.long_timeout_s));
  o.bucket_bytes = int64_t(env_double("PERCEIVER_ALLREDUCE_BUCKET_MB", double(o.bucket_bytes) / (1 << 20)) * (1 << 20));
  o.bucket_bytes = std::max<int64_t>(o.bucket_bytes, 4096);
  return o;
}

std::vector<int> local_cores(int cores, int local_rank, int local_size) {
  cores = std::max(cores, 1);
  local_size = std::max(local_size, 1);
  const int per = std::max(1, cores / local_size);
  std::vector<int> out;
  for (int i = 0; i < per; ++i) out.push_back((local_rank * per + i) % cores);
  return out;
}

// The MPI side: arrival notes exchanged at every collective so a timeout names the missing ranks.
struct Communicator::Impl {
  int64_t sync = 0;                  // collectives entered so far (the arrival note's payload)
  std::vector<int64_t> sent, got;    // one slot per peer
  int64_t ping = 0, pong = 0;
  MPI_Request ping_req = MPI_REQUEST_NULL;

  // Answers a peer's liveness probe (every rank waiting in a collective does, so a probe that
  // stays unanswered names a rank that stopped making progress).
  void serve_pings() {
    if (ping_req == MPI_REQUEST_NULL)
      check_mpi(MPI_Irecv(&ping, 1, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, MPI_COMM_WORLD, &ping_req), "MPI_Irecv");
    int flag = 0;
    MPI_Status st;
    check_mpi(MPI_Test(&ping_req, &flag, &st), "MPI_Test");
    if (!flag) return;
    MPI_Request r;
    check_mpi(MPI_Isend(&pong, 1, MPI_INT64_T, st.MPI_SOURCE, kPongTag, MPI_COMM_WORLD, &r), "MPI_Isend");
    MPI_Request_free(&r);
    ping_req = MPI_REQUEST_NULL;
  }

  // Probes every peer for `seconds`; returns the ranks that did not answer.
  std::vector<int> unresponsive(const Communicator& c, double seconds) {
    std::vector<MPI_Request> reqs;
    std::vector<int> peer;
    std::vector<int64_t> in(size_t(c.world_), 0), out(size_t(c.world_), 1);
    for (int p = 0; p < c.world_; ++p) {
      if (p == c.rank_) continue;
      reqs.emplace_back();
      check_mpi(MPI_Irecv(&in[size_t(p)], 1, MPI_INT64_T, p, kPongTag, MPI_COMM_WORLD, &reqs.back()), "MPI_Irecv");
      peer.push_back(p);
      MPI_Request r;
      check_mpi(MPI_Isend(&out[size_t(p)], 1, MPI_INT64_T, p, kPingTag, MPI_COMM_WORLD, &r), "MPI_Isend");
      MPI_Request_free(&r);
    }
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::vector<int> answered(reqs.size(), 0);
    while (Clock::now() < end) {
      serve_pings();
      bool all = true;
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (!answered[i]) check_mpi(MPI_Test(&reqs[i], &answered[i], MPI_STATUS_IGNORE), "MPI_Test");
        all = all && answered[i];
      }
      if (all) break;
      timespec ts{0, 1000000};
      nanosleep(&ts, nullptr);
    }
    std::vector<int> silent;
    for (size_t i = 0; i < reqs.size(); ++i)
      if (!answered[i]) silent.push_back(peer[i]);
    return silent;  // (the job is aborted next: outstanding requests are left as they are)
  }

  // Completes `pending` plus this collective's arrival notes; aborts naming the ranks that did
  // not arrive when the deadline passes. Returns the seconds spent waiting.
  double complete(Communicator& c, std::vector<MPI_Request>& pending, const std::string& what, double timeout_s) {
    const int w = c.world_;
    ++sync;
    sent.assign(size_t(w), sync);
    got.assign(size_t(w), -1);
    std::vector<MPI_Request> notes;
    std::vector<int> note_from;  // for receives: the peer; -1 for sends
    for (int p = 0; p < w; ++p) {
      if (p == c.rank_) continue;
      notes.emplace_back();
      check_mpi(MPI_Irecv(&got[size_t(p)], 1, MPI_INT64_T, p, kArrivalTag, MPI_COMM_WORLD, &notes.back()), "MPI_Irecv");
      note_from.push_back(p);
      notes.emplace_back();
      check_mpi(MPI_Isend(&sent[size_t(p)], 1, MPI_INT64_T, p, kArrivalTag, MPI_COMM_WORLD, &notes.back()), "MPI_Isend");
      note_from.push_back(-1);
    }
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    bool done_pending = pending.empty(), done_notes = notes.empty();
    for (int64_t spins = 0;; ++spins) {
      int flag = 0;
      if (!done_pending) {
        check_mpi(MPI_Testall(int(pending.size()), pending.data(), &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
        done_pending = flag;
      }
      if (!done_notes) {
        check_mpi(MPI_Testall(int(notes.size()), notes.data(), &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
        done_notes = flag;
      }
      if (done_pending && done_notes) break;
      serve_pings();
      const auto now = Clock::now();
      if (now > deadline) {
        std::ostringstream os;
        std::vector<int> missing;
        for (size_t i = 0; i < notes.size(); ++i) {
          if (note_from[i] < 0) continue;
          int arrived = 0;
          check_mpi(MPI_Test(&notes[i], &arrived, MPI_STATUS_IGNORE), "MPI_Test");
          if (!arrived && got[size_t(note_from[i])] != sync) missing.push_back(note_from[i]);
        }
        os << what << " did not complete within " << timeout_s << " s: ";
        std::vector<int> silent;
        if (missing.empty()) silent = unresponsive(c, std::min(10.0, std::max(2.0, timeout_s)));
        if (missing.empty() && silent.empty()) {
          os << "every rank arrived and answers but the collective did not finish (network fault?)";
        } else if (missing.empty()) {
          for (size_t i = 0; i < silent.size(); ++i) os << (i ? ", " : "") << c.describe(silent[i]);
          os << " arrived but stopped responding (hung)";
        } else {
          for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << c.describe(missing[i]);
          os << (missing.size() == 1 ? " did" : " did") << " not arrive (dead or hung)";
        }
        os << "; aborting the job (HINT: PERCEIVER_DIST_TIMEOUT / PERCEIVER_DIST_LONG_TIMEOUT set the deadlines)";
        c.abort(kPeerFaultExit, os.str());
      }
      // Poll hot for a moment (libnbc progresses only inside MPI calls), then back off.
      if (spins > 2000) {
        timespec ts{0, 50000};
        nanosleep(&ts, nullptr);
      }
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

std::unique_ptr<Communicator> Communicator::single() { return std::unique_ptr<Communicator>(new Communicator()); }

std::unique_ptr<Communicator> Communicator::from_environment(const CommOptions& options, bool force_mpi) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->opts_ = options;
  if (!force_mpi && !launched_by_mpi()) return c;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  c->mpi_ = true;
  c->impl_ = std::make_unique<Impl>();
  PCV_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI_Init_thread: the MPI library does not provide MPI_THREAD_FUNNELED");
  // Errors come back as codes (turned into exceptions, then MPI_Abort by the app).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c->world_);
  MPI_Comm local;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank_, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(local, &c->local_rank_);
  MPI_Comm_size(local, &c->local_size_);
  MPI_Comm_free(&local);
  // Everyone's host and pid, for messages that name a rank.
  struct Who {
    char host[64];
    int64_t pid;
  };
  Who me{};
  gethostname(me.host, sizeof me.host - 1);
  me.pid = int64_t(getpid());
  std::vector<Who> all(size_t(c->world_));
  check_mpi(MPI_Allgather(&me, int(sizeof me), MPI_BYTE, all.data(), int(sizeof me), MPI_BYTE, MPI_COMM_WORLD),
            "MPI_Allgather");
  for (int r = 0; r < c->world_; ++r) {
    const Who& w = all[size_t(r)];
    c->peers_.push_back("rank " + std::to_string(r) + " (pid " + std::to_string(w.pid) + " on " +
                        std::string(w.host, strnlen(w.host, sizeof w.host)) + ")");
  }
  return c;
}

Communicator::~Communicator() {
  device_.reset();  // before MPI goes
  if (!mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (impl_ && impl_->ping_req != MPI_REQUEST_NULL) {  // the standing liveness-probe receive
    MPI_Cancel(&impl_->ping_req);
    MPI_Wait(&impl_->ping_req, MPI_STATUS_IGNORE);
  }
  MPI_Finalize();
}

std::string Communicator::describe(int rank) const {
  if (rank >= 0 && size_t(rank) < peers_.size()) return peers_[size_t(rank)];
  return "rank " + std::to_string(rank);
}

void Communicator::sum(double* v, int n, const std::string& what, double timeout_s) {
  if (!mpi_) return;
  std::vector<MPI_Request> reqs(1);
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &reqs[0]), "MPI_Iallreduce");
  impl_->complete(*this, reqs, what, timeout_s);
}

bool Communicator::same_everywhere(uint64_t v, const std::string& what, double timeout_s) {
  if (!mpi_) return true;
  uint64_t mm[2] = {v, ~v};  // min of v and of ~v (= ~max v)
  std::vector<MPI_Request> reqs(1);
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, mm, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &reqs[0]), "MPI_Iallreduce");
  impl_->complete(*this, reqs, what, timeout_s);
  return mm[0] == ~mm[1];
}

DeviceCollectives* Communicator::device_collectives(Backend& backend) {
  if (!mpi_ || backend.host_accessible() || backend.collectives_id_bytes() == 0) return nullptr;
  if (device_backend_ == &backend) return device_.get();
  PCV_CHECK(device_backend_ == nullptr, "device collectives already joined for another backend");
  // Rank 0's id reaches every rank; joining then blocks until all ranks have joined.
  std::vector<char> id(backend.collectives_id_bytes());
  if (rank_ == 0) backend.make_collectives_id(id.data());
  std::vector<MPI_Request> reqs(1);
  check_mpi(MPI_Ibcast(id.data(), int(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD, &reqs[0]), "MPI_Ibcast");
  impl_->complete(*this, reqs, "broadcast of the device collectives' id", opts_.long_timeout_s);
  device_ = backend.join_collectives(id.data(), rank_, world_);
  device_backend_ = &backend;
  return device_.get();
}

struct Communicator::Session::State {
  Backend* backend = nullptr;
  DeviceCollectives* device = nullptr;  // sums on the device (NCCL) instead of MPI
  float* g = nullptr;  // the backend's gradients
  // What MPI reads and writes: the gradients themselves when the backend's memory is host
  // memory, else this host copy (each bucket copied in when it starts, all copied back at the end).
  std::vector<float> staged;
  float* mpi_g = nullptr;
  int64_t n = 0, per = 1, next = 0;  // buckets [0, next) have not started
  std::vector<MPI_Request> reqs;
  Clock::time_point t0{};
  bool started = false;
};

// Fixed bucket layout (a function of n and bucket_bytes only); buckets start last first.
Communicator::Session::Session(Communicator& comm, Backend& backend, float* grads, int64_t n)
    : comm_(comm), s_(std::make_unique<State>()) {
  State& st = *s_;
  st.backend = &backend;
  st.g = grads;
  st.n = n;
  st.per = std::max<int64_t>(1, comm.opts_.bucket_bytes / int64_t(sizeof(float)));
  st.next = (n + st.per - 1) / st.per;
  st.device = comm.device_collectives(backend);
  if (comm.mpi_ && !backend.host_accessible() && !st.device) st.staged.resize(size_t(n));
  st.mpi_g = st.staged.empty() ? grads : st.staged.data();
}

Communicator::Session::~Session() = default;

void Communicator::Session::ready_from(int64_t offset) {
  if (!comm_.mpi_) return;
  State& st = *s_;
  if (!st.started) st.t0 = Clock::now(), st.started = true;
  while (st.next > 0 && (st.next - 1) * st.per >= offset) {
    --st.next;
    const int64_t lo = st.next * st.per, len = std::min(st.per, st.n - lo);
    if (st.device) {
      st.device->start_sum(st.g + lo, len);
      continue;
    }
    if (!st.staged.empty()) st.backend->copy_to_host(st.mpi_g + lo, st.g + lo, size_t(len) * sizeof(float));
    st.reqs.emplace_back();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, st.mpi_g + lo, int(len), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &st.reqs.back()),
              "MPI_Iallreduce");
  }
  // Non-blocking collectives advance only inside MPI calls: give the started ones a turn.
  int done = 0;
  if (!st.reqs.empty()) MPI_Testall(int(st.reqs.size()), st.reqs.data(), &done, MPI_STATUSES_IGNORE);
}

AllreduceTiming Communicator::Session::finish(float scale, double* scalars, int num_scalars, const std::string& what,
                                              double timeout_s) {
  AllreduceTiming t;
  State& st = *s_;
  const Kernels<float> k = st.backend->kernels<float>();
  if (!comm_.mpi_) {
    if (scale != 1.f) k.scale(st.n, scale, st.g);
    return t;
  }
  ready_from(0);
  if (num_scalars > 0) {
    st.reqs.emplace_back();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, scalars, num_scalars, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &st.reqs.back()),
              "MPI_Iallreduce");
  }
  t.buckets = int((st.n + st.per - 1) / st.per);
  t.waiting_s = comm_.impl_->complete(comm_, st.reqs, what, timeout_s);
  if (st.device) t.waiting_s += wait_device(what, timeout_s);
  if (!st.staged.empty()) st.backend->copy_to_device(st.g, st.staged.data(), st.staged.size() * sizeof(float));
  if (scale != 1.f) k.scale(st.n, scale, st.g);
  t.total_s = std::chrono::duration<double>(Clock::now() - st.t0).count();
  return t;
}

// Every rank arrived (complete() checked that); the device sums still have the deadline.
double Communicator::Session::wait_device(const std::string& what, double timeout_s) {
  State& st = *s_;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  while (!st.device->done()) {
    comm_.impl_->serve_pings();
    if (Clock::now() > deadline)
      comm_.abort(kPeerFaultExit, what + ": the device collectives (NCCL) did not complete within " +
                                      std::to_string(timeout_s) + " s although every rank arrived (a GPU or "
                                      "interconnect fault?); aborting the job (HINT: PERCEIVER_DIST_TIMEOUT)");
    timespec ts{0, 50000};
    nanosleep(&ts, nullptr);
  }
  st.device->join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

AllreduceTiming Communicator::allreduce_gradients(Backend& backend, float* g, int64_t n, float scale, double* scalars,
                                                  int num_scalars, const std::string& what, double timeout_s) {
  Session session(*this, backend, g, n);
  return session.finish(scale, scalars, num_scalars, what, timeout_s);
}

void Communicator::barrier(const std::string& what, double timeout_s) {
  if (!mpi_) return;
  std::vector<MPI_Request> reqs(1);
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &reqs[0]), "MPI_Ibarrier");
  impl_->complete(*this, reqs, what, timeout_s);
}

void Communicator::abort(int code, const std::string& message) {
  std::fprintf(stderr, "perceiver-train: rank %d of %d: error: %s\n", rank_, world_, message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace perceiver::dist
