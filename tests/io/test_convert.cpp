// perceiver-convert end to end on the tiny model: the PyTorch reference writes model.safetensors
// (F32, F16, BF16, F64), the app converts it to our HDF5 checkpoint and back, and the result must
// equal the original byte for byte; the checkpoint must open in h5py; mismatched configs and
// files must fail, naming each tensor. Fixtures go to <build>/fixtures/io/gen (one generator run
// per dtype and build; a stamp newer than the scripts marks them current).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "io/hdf5_file.h"
#include "io/weights.h"
#include "io_test_util.h"
#include "model/perceiver_net.h"
#include "perceiver/config.h"

namespace perceiver {
namespace {

namespace fs = iotest::fs;
using iotest::run_command;
using iotest::shell_quote;
using iotest::slurp;
using iotest::test_dir;

const fs::path kSource = PERCEIVER_SOURCE_DIR;
const std::string kTinyConfig = (kSource / "configs" / "tiny.yaml").string();

bool stamp_is_current(const fs::path& stamp) {
  std::error_code ec;
  const auto t = fs::last_write_time(stamp, ec);
  if (ec) return false;
  for (const auto& e : fs::directory_iterator(kSource / "tests" / "reference"))
    if (e.path().extension() == ".py" && fs::last_write_time(e.path()) > t) return false;
  return fs::last_write_time(kTinyConfig) <= t;
}

struct Generated {
  std::string safetensors;  // the reference model's weights in one dtype
  std::string fixture;      // its HDF5 fixture (params/<name> in f32)
};

// Writes under per-process temporary names and renames, so concurrent tests (ctest -j) never
// see half a file.
Generated generate(const std::string& dtype) {
  const fs::path dir = fs::path(PERCEIVER_BINARY_DIR) / "fixtures" / "io" / "gen";
  fs::create_directories(dir);
  const Generated g{(dir / ("model_" + dtype + ".safetensors")).string(),
                    (dir / ("fixture_" + dtype + ".h5")).string()};
  const fs::path stamp = dir / ("stamp_" + dtype);
  if (stamp_is_current(stamp) && fs::exists(g.safetensors) && fs::exists(g.fixture)) return g;
  const std::string tmp = "." + std::to_string(getpid()) + ".tmp";
  const std::string cmd = shell_quote(PERCEIVER_PYTHON) + " " +
                          shell_quote((kSource / "tests" / "reference" / "gen_model_fixture.py").string()) +
                          " --config " + shell_quote(kTinyConfig) + " --seed 0 --batch 1 --out " +
                          shell_quote(g.fixture + tmp) + " --safetensors-out " + shell_quote(g.safetensors + tmp) +
                          " --safetensors-dtype " + dtype;
  std::string out;
  const int rc = run_command(cmd, &out);
  if (rc != 0) {
    ADD_FAILURE() << cmd << "\n"
                  << out << "\nHINT: " PERCEIVER_PYTHON " needs python3-torch, python3-h5py and python3-yaml";
    return g;
  }
  fs::rename(g.fixture + tmp, g.fixture);
  fs::rename(g.safetensors + tmp, g.safetensors);
  std::ofstream(stamp) << dtype << "\n";
  return g;
}

int convert(const std::string& config, const std::string& from, const std::string& to, std::string* out) {
  return run_command(shell_quote(PERCEIVER_CONVERT_BIN) + " --config " + shell_quote(config) + " --from " +
                         shell_quote(from) + " --to " + shell_quote(to),
                     out);
}

void expect_byte_exact_round_trip(const std::string& dtype) {
  const Generated g = generate(dtype);
  if (::testing::Test::HasFailure()) return;
  const fs::path dir = test_dir();
  const std::string h5 = (dir / "ckpt.h5").string(), back = (dir / "back.safetensors").string();
  std::string out;
  ASSERT_EQ(convert(kTinyConfig, g.safetensors, h5, &out), 0) << out;
  EXPECT_NE(out.find("87 tensors, 18038 parameters, dtype " + dtype), std::string::npos) << out;
  ASSERT_EQ(convert(kTinyConfig, h5, back, &out), 0) << out;
  EXPECT_NE(out.find("verbatim"), std::string::npos) << out;
  const std::string a = slurp(g.safetensors), b = slurp(back);
  ASSERT_GT(a.size(), 8u);
  EXPECT_TRUE(a == b) << dtype << ": " << back << " differs from " << g.safetensors;
}

TEST(ConvertApp, F32SafetensorsToH5AndBackIsByteExact) { expect_byte_exact_round_trip("F32"); }
TEST(ConvertApp, F16SafetensorsToH5AndBackIsByteExact) { expect_byte_exact_round_trip("F16"); }
TEST(ConvertApp, BF16SafetensorsToH5AndBackIsByteExact) { expect_byte_exact_round_trip("BF16"); }
TEST(ConvertApp, F64SafetensorsToH5AndBackIsByteExact) { expect_byte_exact_round_trip("F64"); }

// The values we load are PyTorch's, bit for bit, from the safetensors file, from the converted
// checkpoint and from the fixture's own /params.
TEST(ConvertApp, LoadedWeightsEqualTheReferenceModel) {
  const Generated g = generate("F32");
  ASSERT_FALSE(HasFailure());
  const fs::path dir = test_dir();
  const std::string h5 = (dir / "ckpt.h5").string();
  std::string out;
  ASSERT_EQ(convert(kTinyConfig, g.safetensors, h5, &out), 0) << out;
  const ParamRegistry registry = PerceiverNet<float>::make_registry(load_model_config(kTinyConfig));
  const H5File fixture = H5File::open(g.fixture);
  for (const std::string& file : {g.safetensors, h5, g.fixture}) {
    ParamStore<float> store(registry);
    EXPECT_EQ(load_weights(store, file).loaded, int64_t(registry.entries().size()));
    for (const auto& e : registry.entries()) {
      const std::vector<float> ref = fixture.read<float>("/params/" + e.spec.name);
      ASSERT_EQ(std::memcmp(ref.data(), store.param(e.spec.name).data, ref.size() * 4), 0)
          << file << " " << e.spec.name;
    }
  }
}

TEST(ConvertApp, CheckpointOpensInH5py) {
  const Generated g = generate("F16");
  ASSERT_FALSE(HasFailure());
  const std::string h5 = (test_dir() / "ckpt.h5").string();
  std::string out;
  ASSERT_EQ(convert(kTinyConfig, g.safetensors, h5, &out), 0) << out;
  out.clear();
  const std::string py =
      "import h5py,sys; f=h5py.File(sys.argv[1],'r'); p=f['params']; "
      "print(len(p), f.attrs['format'], p['perceiver.embeddings.latents'].attrs['source_dtype'], "
      "p['perceiver.embeddings.latents'].dtype)";
  ASSERT_EQ(run_command(shell_quote(PERCEIVER_PYTHON) + " -c " + shell_quote(py) + " " + shell_quote(h5), &out), 0)
      << out;
  EXPECT_EQ(out, "87 perceiver-checkpoint F16 float32\n");
}

TEST(ConvertApp, WrongConfigFailsNamingEachTensor) {
  const Generated g = generate("F32");
  ASSERT_FALSE(HasFailure());
  const std::string h5 = (test_dir() / "never.h5").string();
  std::string out;
  EXPECT_NE(convert((kSource / "configs" / "small.yaml").string(), g.safetensors, h5, &out), 0);
  EXPECT_NE(
      out.find("mis-shaped tensor 'perceiver.embeddings.latents': [8,16] in the file, the model expects [128,128]"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("missing tensor 'perceiver.encoder.self_attends.2.mlp.dense2.bias'"), std::string::npos) << out;
  EXPECT_NE(out.find("nothing written"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(h5));
}

TEST(ConvertApp, ExtraAndMissingTensorsFailByName) {
  const fs::path dir = test_dir();
  const ParamRegistry registry = PerceiverNet<float>::make_registry(load_model_config(kTinyConfig));
  ParamRegistry edited;  // the tiny model without its first parameter, plus one it does not have
  for (size_t i = 1; i < registry.entries().size(); ++i) edited.add(registry.entries()[i].spec);
  edited.add({"perceiver.not_a_parameter", Shape{2}, ParamRole::kBias, 0});
  ParamStore<float> store(edited);
  save_safetensors(store, (dir / "edited.safetensors").string());
  std::string out;
  EXPECT_EQ(convert(kTinyConfig, (dir / "edited.safetensors").string(), (dir / "never.h5").string(), &out), 1);
  EXPECT_NE(out.find("missing tensor '" + registry.entries()[0].spec.name + "'"), std::string::npos) << out;
  EXPECT_NE(out.find("unexpected tensor 'perceiver.not_a_parameter'"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "never.h5"));
}

TEST(ConvertApp, BadArgumentsGiveOneClearLine) {
  const fs::path dir = test_dir();
  iotest::write_bytes(dir / "junk.safetensors", "junk");
  std::string out;
  EXPECT_EQ(convert(kTinyConfig, (dir / "junk.safetensors").string(), (dir / "x.h5").string(), &out), 1);
  EXPECT_NE(out.find("too short"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(convert(kTinyConfig, (dir / "junk.safetensors").string(), (dir / "x.bin").string(), &out), 1);
  EXPECT_NE(out.find("--to"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_command(shell_quote(PERCEIVER_CONVERT_BIN) + " --help", &out), 0);
  EXPECT_NE(out.find("Examples:"), std::string::npos) << out;
}

// A converted checkpoint whose dataset `name` is replaced by `make(file, name, space)`.
std::string edited_checkpoint(const Generated& g, const fs::path& dir, const std::string& name,
                              const std::function<void(hid_t, const char*, hid_t)>& make) {
  const std::string h5 = (dir / "edited.h5").string();
  std::string out;
  EXPECT_EQ(convert(kTinyConfig, g.safetensors, h5, &out), 0) << out;
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t space = H5Dget_space(ds);
  H5Dclose(ds);
  H5Ldelete(f, name.c_str(), H5P_DEFAULT);
  make(f, name.c_str(), space);
  H5Sclose(space);
  EXPECT_GE(H5Fclose(f), 0);
  return h5;
}

// Issue 15, High 1: an attribute stored as an array where one integer belongs crashed
// perceiver-convert with SIGSEGV; now it is one line and exit 1.
TEST(ConvertApp, ArrayAttributeIsOneLineAndExitOne) {
  const Generated g = generate("F32");
  ASSERT_FALSE(HasFailure());
  const fs::path dir = test_dir();
  const std::string h5 = (dir / "ckpt.h5").string();
  std::string out;
  ASSERT_EQ(convert(kTinyConfig, g.safetensors, h5, &out), 0) << out;
  {
    const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete(f, "format_version");
    const hsize_t n = 4000;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const std::vector<int64_t> v(n, 1);
    const hid_t a = H5Acreate2(f, "format_version", H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, v.data());
    H5Aclose(a);
    H5Sclose(space);
    ASSERT_GE(H5Fclose(f), 0);
  }
  out.clear();
  EXPECT_EQ(convert(kTinyConfig, h5, (dir / "back.safetensors").string(), &out), 1) << out;
  EXPECT_NE(out.find(h5 + ": attribute 'format_version' on '/' must be one integer, found 4000 integers"),
            std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists(dir / "back.safetensors"));
}

// Issue 15, Medium 6: a dataset whose raw data is another local file (HDF5 external storage)
// was read transparently, and perceiver-convert copied that file's bytes into its output.
TEST(ConvertApp, ExternalStorageIsRefusedAndNothingIsCopied) {
  const Generated g = generate("F32");
  ASSERT_FALSE(HasFailure());
  const fs::path dir = test_dir();
  std::string secret_bytes;
  while (secret_bytes.size() < 512) secret_bytes += "SECRET-TOKEN-42!";  // latents: 8×16 f32
  const std::string secret = (dir / "secret.txt").string();
  iotest::write_bytes(secret, secret_bytes);
  const std::string h5 = edited_checkpoint(g, dir, "/params/perceiver.embeddings.latents",
                                           [&](hid_t f, const char* name, hid_t space) {
                                             const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
                                             H5Pset_external(dcpl, secret.c_str(), 0, 512);
                                             H5Dclose(H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                                                 H5P_DEFAULT));
                                             H5Pclose(dcpl);
                                           });
  const std::string to = (dir / "stolen.safetensors").string();
  std::string out;
  EXPECT_EQ(convert(kTinyConfig, h5, to, &out), 1) << out;
  EXPECT_NE(out.find("refusing a dataset with external storage '/params/perceiver.embeddings.latents'"),
            std::string::npos) << out;
  EXPECT_FALSE(fs::exists(to));
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path() == secret) continue;
    EXPECT_EQ(slurp(e.path()).find("SECRET-TOKEN"), std::string::npos) << e.path() << " holds the secret";
  }
}

// Low: the output is written through a unique temporary name (created exclusively, fsync'ed,
// renamed), so a symlink planted at the old predictable "<to>.tmp" is never written through.
TEST(ConvertApp, PlantedSymlinkAtTheTemporaryNameIsNotFollowed) {
  const Generated g = generate("F32");
  ASSERT_FALSE(HasFailure());
  const fs::path dir = test_dir();
  const fs::path victim = dir / "victim.txt";
  iotest::write_bytes(victim, "precious");
  const std::string h5 = (dir / "ckpt.h5").string(), back = (dir / "back.safetensors").string();
  fs::create_symlink(victim, h5 + ".tmp");
  fs::create_symlink(victim, back + ".tmp");
  std::string out;
  ASSERT_EQ(convert(kTinyConfig, g.safetensors, h5, &out), 0) << out;
  ASSERT_EQ(convert(kTinyConfig, h5, back, &out), 0) << out;
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(h5));
  EXPECT_FALSE(fs::is_symlink(back));
  EXPECT_TRUE(slurp(back) == slurp(g.safetensors));
  // victim, the two symlinks and the two outputs: no temporary left behind
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 5);
}

}  // namespace
}  // namespace perceiver
