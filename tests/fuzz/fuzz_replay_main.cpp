// A stand-in for libFuzzer's driver when the build uses GCC: replays every file of the corpus
// folders given on the command line, then runs random mutations of them (byte flips, inserts of
// CSV-significant characters, deletions, splices) for --runs iterations from --seed. Any
// crash, abort or foreign exception fails the test.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int run(const std::string& s) { return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

std::string mutate(std::string s, const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  static const std::string kSpecial = "\",\r\n \xEF\xBB\xBF.-0123456789/\\";
  const int edits = 1 + int(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0: if (!s.empty()) s[pos % s.size()] = char(rng()); break;
      case 1: s.insert(pos, 1, kSpecial[rng() % kSpecial.size()]); break;
      case 2: if (!s.empty()) s.erase(pos % s.size(), 1 + rng() % 4); break;
      case 3: { const auto& o = corpus[rng() % corpus.size()]; s = s.substr(0, pos) + o.substr(rng() % (o.size() + 1)); break; }
      default: s.insert(pos, s.substr(pos, rng() % 16)); break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 10000;
  unsigned long long seed = 1;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) runs = std::stol(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else
      for (const auto& e : std::filesystem::directory_iterator(a)) {
        std::ifstream in(e.path(), std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        corpus.push_back(ss.str());
      }
  }
  if (corpus.empty()) corpus.push_back("");
  for (const auto& c : corpus) run(c);
  std::mt19937_64 rng(seed);
  for (long r = 0; r < runs; ++r) run(mutate(corpus[rng() % corpus.size()], corpus, rng));
  std::printf("fuzz replay: %zu corpus files and %ld mutations passed\n", corpus.size(), runs);
  return 0;
}
