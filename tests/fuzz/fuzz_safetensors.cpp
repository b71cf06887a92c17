// libFuzzer target: the safetensors reader (8-byte header length, header JSON, layout rules,
// dtype conversion) and loading by name into a model's registry. Properties on every input:
//  - open() and every read return or throw perceiver::Error; nothing else escapes, nothing crashes;
//  - a file that opens is reproduced byte for byte by the writer from its own header and tensors.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "h5_program.h"
#include "io/safetensors.h"
#include "io/weights.h"

namespace {

using namespace perceiver;

void check_rewrite(const SafetensorsFile& st, const std::string& original) {
  std::vector<StOutTensor> tensors;
  for (const StTensorInfo& t : st.tensors()) tensors.push_back({t.name, t.dtype, t.shape, st.raw(t)});
  const auto again = fuzz::scratch() / "again.safetensors";
  fuzz::require(fuzz::accepts([&] { write_safetensors_with_header(again.string(), st.header_json(), tensors); }),
                "the writer refuses a header the reader accepted");
  std::ifstream in(again, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fuzz::require(bytes == original, "rewriting a file that opened changed its bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::put("in.safetensors", data, size);
  fuzz::accepts([&] {
    const SafetensorsFile st = SafetensorsFile::open(path.string());
    for (const StTensorInfo& t : st.tensors()) {
      if (!st_dtype_is_float(t.dtype) || t.numel() > (1 << 20)) continue;
      std::vector<float> f(size_t(t.numel()));
      std::vector<double> d(size_t(t.numel()));
      st.read_float(t, f.data(), t.numel());
      st.read_double(t, d.data(), t.numel());
    }
    check_rewrite(st, std::string(reinterpret_cast<const char*>(data), size));
  });
  ParamStore<float> store(fuzz::h5::model_registry());
  fuzz::accepts([&] { load_weights(store, path.string(), /*strict=*/false); });
  return 0;
}
