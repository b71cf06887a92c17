// perceiver-train: the trainer run in the container. Flags, config file and exit codes are
// described by --help and train/trainer.h; SIGTERM/SIGINT finish the step, checkpoint, exit 0.
// Under mpirun (or Volcano's MPI plugin / the Kubeflow MPI Operator, which run mpirun) it trains
// data-parallel: rank and world size come from MPI (dist/communicator.h). Built with media
// (PERCEIVER_WITH_MEDIA), it registers the media component: videos, preparation of a
// Kinetics-layout folder and evaluation media; without, it trains from prepared shards only.
#include <csignal>
#include <cstdio>

#include "dist/communicator.h"
#include "perceiver/threads.h"
#include "train/trainer.h"

#if PERCEIVER_WITH_MEDIA
#include "perceiver/media.h"
#endif

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  perceiver::threads::use_fastest_cpu_kernels(argv);
#if PERCEIVER_WITH_MEDIA
  perceiver::register_media();  // before the config is parsed: its defaults depend on it
#endif
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered logs, also when piped to a file
  std::unique_ptr<perceiver::dist::Communicator> comm;
  try {
    bool help = false;
    std::string help_text;
    const perceiver::TrainConfig cfg = perceiver::parse_train_config(argc, argv, &help, &help_text);
    if (help) {
      std::printf("%s", help_text.c_str());
      return 0;
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    comm = perceiver::dist::Communicator::from_environment();
    return perceiver::run_training(cfg, g_stop, *comm);
  } catch (const std::exception& e) {
    // With peers, a rank that fails alone must take the job down (they would wait for it).
    if (comm && comm->world_size() > 1) comm->abort(perceiver::kTrainError, e.what());
    std::fprintf(stderr, "perceiver-train: error: %s\n", e.what());
    return perceiver::kTrainError;
  }
}
