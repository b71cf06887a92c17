// Data-parallel training across processes with MPI (DESIGN.md #9, issue 6).
//
// A Communicator owns MPI for the life of the process (MPI_Init_thread with
// MPI_THREAD_FUNNELED: only the main thread calls MPI; the OpenMP pool and loader threads never
// do). Launched by an MPI launcher (mpirun, mpiexec, Volcano's MPI plugin and the Kubeflow MPI
// Operator all run mpirun; detected from OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE) it joins
// MPI_COMM_WORLD; started directly it is world 1 and never touches MPI, so single-process
// runs behave exactly as before.
//
// Every collective is nonblocking and completed by polling with a deadline (MPI_Testall):
// each rank also sends every peer a small "arrived" note when it enters a collective, so a
// rank that times out names the ranks that never arrived (host, pid) and calls MPI_Abort —
// a dead or hung rank ends the job with a non-zero exit, never a silent hang. (mpirun itself
// ends the job as soon as a rank exits non-zero or is killed.)
//
// Gradients are averaged over the flat gradient arena in buckets of `bucket_bytes`, one
// MPI_Iallreduce(SUM) each, started from the end of the arena (the decoder, whose gradients
// the backward pass finishes first) towards the start, then scaled by the backend's kernel.
// On a backend with device collectives (Backend::join_collectives: NCCL on CUDA, one rank per
// GPU) the buckets are summed by those instead, on the device, with the same buckets in the same
// order and the same overlap; the communicator creates them once, through MPI (rank 0's id
// broadcast), and waits for them with the same deadline. Other device backends stage each
// bucket through a host copy. Every rank receives
// bit-identical sums (MPI's algorithms deliver one reduced value to all ranks; the trainer also
// cross-checks a parameter checksum at every log step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "perceiver/backend.h"

namespace perceiver::dist {

/// Exit code of a rank that aborts the job because a peer died or hung.
inline constexpr int kPeerFaultExit = 5;

struct CommOptions {
  double timeout_s = 300;        // deadline of an ordinary collective (PERCEIVER_DIST_TIMEOUT)
  double long_timeout_s = 3600;  // after work only rank 0 does: start-up, evaluation (PERCEIVER_DIST_LONG_TIMEOUT)
  int64_t bucket_bytes = 8 << 20;  // gradient allreduce bucket (PERCEIVER_ALLREDUCE_BUCKET_MB)
  /// Defaults overridden by the environment variables named above (seconds, MiB).
  static CommOptions from_env();
};

/// Time spent averaging gradients in one step.
struct AllreduceTiming {
  double total_s = 0;    // first bucket started → last bucket complete
  double waiting_s = 0;  // of which the main thread only waited (not overlapped with other work)
  int buckets = 0;
};

class Communicator {
 public:
  /// World 1 without MPI.
  static std::unique_ptr<Communicator> single();
  /// MPI_COMM_WORLD when launched by an MPI launcher (or when `force_mpi`), else single().
  static std::unique_ptr<Communicator> from_environment(const CommOptions& options = CommOptions::from_env(),
                                                        bool force_mpi = false);
  ~Communicator();  // MPI_Finalize (when MPI was initialised here)
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  /// Ranks on this node (MPI_Comm_split_type SHARED) and this rank's index among them.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  bool uses_mpi() const { return mpi_; }
  const CommOptions& options() const { return opts_; }
  /// "rank 1 (pid 4242 on node-a)".
  std::string describe(int rank) const;

  /// In-place sum of `v` over all ranks. `what` names the collective in a timeout message.
  void sum(double* v, int n, const std::string& what, double timeout_s);
  /// True when `v` is the same on every rank.
  bool same_everywhere(uint64_t v, const std::string& what, double timeout_s);
  /// Averages the flat gradient arena: grads ← scale · Σ_ranks grads, in buckets; sums the
  /// host values `scalars` (e.g. loss terms, a stop flag) alongside. The gradients are `backend`
  /// memory: MPI reads them in place where that is host memory, through host copies otherwise.
  /// The same result on every rank.
  AllreduceTiming allreduce_gradients(Backend& backend, float* grads, int64_t n, float scale, double* scalars,
                                      int num_scalars, const std::string& what, double timeout_s);
  /// The same as allreduce_gradients, in two halves so buckets can start while backward still
  /// runs: ready_from(offset) starts every bucket lying wholly in [offset, n) (last bucket first;
  /// call it at the same points on every rank, with decreasing offsets) and lets MPI progress;
  /// finish() starts the rest, sums `scalars`, waits and scales. Results equal allreduce_gradients.
  class Session {
   public:
    Session(Communicator& comm, Backend& backend, float* grads, int64_t n);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    void ready_from(int64_t offset);
    AllreduceTiming finish(float scale, double* scalars, int num_scalars, const std::string& what, double timeout_s);

   private:
    double wait_device(const std::string& what, double timeout_s);
    struct State;  // MPI requests and the bucket cursor (this header does not include mpi.h)
    Communicator& comm_;
    std::unique_ptr<State> s_;
  };

  /// Waits at a barrier with a deadline.
  void barrier(const std::string& what, double timeout_s);
  /// Prints `message` (prefixed with this rank) on stderr and ends every rank with `code`.
  [[noreturn]] void abort(int code, const std::string& message);

 private:
  Communicator() = default;
  /// The device collectives of `backend` (made on first use, through MPI), or nullptr when it
  /// has none.
  DeviceCollectives* device_collectives(Backend& backend);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<DeviceCollectives> device_;  // of device_backend_
  Backend* device_backend_ = nullptr;
  CommOptions opts_;
  bool mpi_ = false;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<std::string> peers_;  // describe() of every rank
};

/// The local compute cores of a rank: `local_size` ranks on a node with `cores` cores get
/// disjoint contiguous ranges of floor(cores / local_size) (at least 1) cores each.
std::vector<int> local_cores(int cores, int local_rank, int local_size);

}  // namespace perceiver::dist
