// libFuzzer target for the annotation CSV parser (build with -DPERCEIVER_FUZZ=ON and clang, or
// run through fuzz_replay_main.cpp). Properties checked on every input:
//  - parsing returns or throws perceiver::Error; nothing else escapes, nothing crashes;
//  - parse_csv is a fixed point of quoting: re-serialising the records with every field quoted
//    and parsing again gives the same records.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/kinetics_index.h"
#include "perceiver/error.h"

namespace {

std::string quote_all(const perceiver::CsvTable& t) {
  std::string out;
  for (const auto& rec : t.records) {
    for (size_t i = 0; i < rec.size(); ++i) {
      out += i ? ",\"" : "\"";
      for (char c : rec[i]) out += c == '"' ? std::string("\"\"") : std::string(1, c);
      out += '"';
    }
    out += '\n';
  }
  return out;
}

void check_round_trip(const std::string& text) {
  perceiver::CsvTable t;
  try {
    t = perceiver::parse_csv(text, "fuzz.csv");
  } catch (const perceiver::Error&) {
    return;
  }
  const perceiver::CsvTable again = perceiver::parse_csv(quote_all(t), "again.csv");
  if (again.records != t.records) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_round_trip(text);
  for (auto split : {perceiver::KineticsSplit::kTrain, perceiver::KineticsSplit::kTest}) {
    try {
      perceiver::parse_annotations(text, "fuzz.csv", split);
    } catch (const perceiver::Error&) {
    }
  }
  return 0;
}
