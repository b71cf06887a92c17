#include "model/parity_dump.h"

#include <cstdio>
#include <filesystem>

#include "core/rng.h"
#include "io/hdf5_file.h"

namespace perceiver {
namespace {

struct DumpInputs {
  int64_t batch = 0;
  std::vector<float> video, audio;
  std::vector<int64_t> labels;
  OutputPoints pts;
  std::vector<uint8_t> mask;  // [B, M]
};

void expect_shape(const H5File& f, const std::string& name, std::vector<int64_t> want) {
  const auto got = f.shape(name);
  PCV_CHECK(got == want, f.path(), ": '", name, "' has shape ", Shape(got).str(), ", expected ", Shape(want).str());
}

std::vector<uint8_t> masks(const ModelConfig& c, const H5File& f, int64_t B, uint64_t seed) {
  const ModalityLayout lay(c);
  std::vector<uint8_t> mask(B * c.input_tokens(), 0);
  RngStream rng(seed, RngPurpose::kMask);
  for (auto [m, begin, count, p] :
       {std::tuple{"audio", lay.audio_begin, lay.audio_count, c.mask_prob_audio},
        {"image", lay.image_begin, lay.image_count, c.mask_prob_image}, {"label", lay.label_begin, int64_t(1), c.mask_prob_label}}) {
    const std::string name = std::string("masks/") + m;
    std::vector<float> given;
    if (f.has(name)) {
      expect_shape(f, name, {B, count});
      given = f.read<float>(name);
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < count; ++i)
        mask[b * c.input_tokens() + begin + i] = given.empty() ? (p >= 1 || (p > 0 && rng.bernoulli(p))) : given[b * count + i] > 0.5f;
  }
  return mask;
}

DumpInputs read_inputs(const ModelConfig& c, const std::string& path, uint64_t seed) {
  H5File f = H5File::open(path);
  DumpInputs in;
  for (const char* name : {"video", "audio", "label", "subsample/image", "subsample/audio"})
    PCV_CHECK(f.has(name), path, ": missing dataset '", name, "'");
  in.batch = f.shape("label").at(0);
  const int64_t B = in.batch;
  expect_shape(f, "video", {B, c.num_frames, c.frame_height, c.frame_width, 3});
  expect_shape(f, "audio", {B, c.audio_samples()});
  in.video = f.read<float>("video");
  in.audio = f.read<float>("audio");
  in.labels = f.read<int64_t>("label");
  in.pts.image = f.read<int64_t>("subsample/image");
  in.pts.audio = f.read<int64_t>("subsample/audio");
  for (int64_t a : in.pts.audio)
    PCV_CHECK(a >= 0 && a < c.audio_tokens(), path, ": subsample/audio index ", a, " outside [0, ", c.audio_tokens(), ")");
  in.mask = masks(c, f, B, seed);
  return in;
}

}  // namespace

LossValues forward_backward_dump(PerceiverNet<float>& net, const std::string& inputs_path, const std::string& dump_path,
                                const LossConfig& lc, uint64_t seed) {
  const ModelConfig& c = net.config();
  DumpInputs in = read_inputs(c, inputs_path, seed);
  const int64_t B = in.batch;
  net.encode(in.video.data(), in.audio.data(), in.labels.data(), B, in.mask);
  DecoderOutputs<float> out = net.decode(in.pts);
  const DecoderOutputs<float> d = net.output_grads();
  const LossValues t = compute_loss(net, lc, out, &d);
  net.store().zero_grad();
  net.backward(ConstView<float>(d.image), ConstView<float>(d.audio), ConstView<float>(d.label));

  // Written next to the target and renamed, so a reader never sees half a dump.
  const std::string tmp = dump_path + ".tmp";
  {
    H5File f = H5File::create(tmp);
    Backend& be = net.backend();
    auto put = [&](const std::string& name, ConstView<float> v) { f.write(name, download(be, v).data(), v.shape.dims()); };
    put("logits/image", out.image);
    put("logits/audio", out.audio);
    put("logits/label", out.label);
    const float loss = float(t.total), image = float(t.image), audio = float(t.audio), label = float(t.label);
    f.write("loss", &loss, {});
    f.write("loss_terms/image", &image, {});
    f.write("loss_terms/audio", &audio, {});
    f.write("loss_terms/label", &label, {});
    for (const auto& e : net.store().registry().entries()) put("grads/" + e.spec.name, net.store().grad(e.spec.name));
    put("intermediate/x", net.encoder_input());
    put("intermediate/z", net.latents());
    f.flush();
  }
  std::filesystem::rename(tmp, dump_path);
  return t;
}

}  // namespace perceiver
