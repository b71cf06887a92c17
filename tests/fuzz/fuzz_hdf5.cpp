// libFuzzer target: every reader of HDF5 files (training checkpoints: newest_valid_checkpoint,
// read_checkpoint_state, load_checkpoint; weights: list_weight_tensors, load_weights,
// convert_h5_to_safetensors; data shards: ShardReader::open and read_clip), fed well-formed
// HDF5 files of any content built from a program (h5_program.h). Properties on every input:
//  - each reader returns or throws perceiver::Error; nothing else escapes, nothing crashes;
//  - a checkpoint that loads holds only finite values;
//  - a conversion that succeeds writes a safetensors file that opens again.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/params.h"
#include "data/shards.h"
#include "fuzz_common.h"
#include "h5_program.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace {

using namespace perceiver;

void read_as_checkpoint(const std::filesystem::path& logdir, const std::filesystem::path& file) {
  std::vector<std::string> warnings;
  newest_valid_checkpoint(logdir, &warnings);
  fuzz::accepts([&] { read_checkpoint_state(file); });
  ParamStore<float> store(fuzz::h5::model_registry());
  OptimizerOptions o;
  o.name = "adamw";
  const auto opt = make_optimizer(o, store.registry(), store.backend());
  if (fuzz::accepts([&] { load_checkpoint(file, store, opt.get()); }))
    for (size_t i = 0; i < store.params().size(); ++i)
      fuzz::require(std::isfinite(store.params().data()[i]), "a loaded checkpoint holds a non-finite value");
}

void read_as_weights(const std::filesystem::path& file) {
  fuzz::accepts([&] { list_weight_tensors(file.string()); });
  ParamStore<float> store(fuzz::h5::model_registry());
  fuzz::accepts([&] { load_weights(store, file.string(), /*strict=*/false); });
  const auto out = fuzz::scratch() / "converted.safetensors";
  if (fuzz::accepts([&] { convert_h5_to_safetensors(file.string(), out.string()); }))
    fuzz::require(fuzz::accepts([&] { SafetensorsFile::open(out.string()); }), "a converted file does not open");
}

void read_as_shard(const std::filesystem::path& file) {
  fuzz::accepts([&] {
    const ShardReader r = ShardReader::open(file);
    const ShardMeta& m = r.index().meta;
    if (r.index().size() == 0 || m.frame_bytes() > (1 << 20)) return;
    std::vector<uint8_t> video(size_t(m.frame_bytes()));
    std::vector<float> audio(size_t(m.audio_samples()));
    r.read_clip(0, 0, 1, video.data(), audio.data());
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> image = fuzz::h5::build(data, size);
  if (image.empty()) return 0;
  const auto logdir = fuzz::scratch() / "run";
  const auto file = checkpoint_path(logdir, 1);
  std::filesystem::create_directories(file.parent_path());
  fuzz::put("run/checkpoints/" + file.filename().string(), image.data(), image.size());
  read_as_checkpoint(logdir, file);
  read_as_weights(file);
  read_as_shard(file);
  return 0;
}
