// perceiver-prep's pipeline on a small synthetic set: shards equal a direct decode, broken and
// missing clips are skipped with reasons, a rerun resumes (finished shards kept, damaged ones
// redone) and the output bytes depend neither on the run nor on the number of workers.
#include <gtest/gtest.h>

#include <fstream>

#include "data/shards.h"
#include "perceiver/error.h"
#include "prep_fixtures.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

fs::path out_dir(const std::string& name) {
  const auto d = fixtures::dir() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(Prep, ShardsHoldTheDecodedWindows) {
  const fs::path data = fixtures::small_synthetic_set(), out = out_dir("prep_basic");
  const PrepOptions o = fixtures::small_prep_options(data, out);
  const PrepSummary s = prepare_kinetics(o);
  EXPECT_EQ(s.rows, 12);
  EXPECT_EQ(s.written, 12);
  EXPECT_EQ(s.skipped + s.missing, 0);
  EXPECT_EQ(s.shards, 3);
  EXPECT_EQ(s.num_classes, 3);

  const KineticsIndex idx = index_kinetics(data, KineticsSplit::kTrain);
  int64_t n = 0;
  for (int shard = 0; shard < 3; ++shard) {
    const ShardReader r = ShardReader::open(out / "train" / shard_file_name(shard));
    EXPECT_EQ(r.index().meta.class_names, idx.classes);
    for (int64_t i = 0; i < r.index().size(); ++i, ++n) {
      const KineticsClip& k = idx.clips[size_t(n)];
      EXPECT_EQ(r.index().youtube_id[size_t(i)], k.youtube_id);
      EXPECT_EQ(r.index().label[size_t(i)], k.label_index);
      WindowSpec w;
      w.num_frames = 8, w.image_dim = 32;
      const Clip c = read_clip_window(k.path, k.youtube_id, w, {}, 0.5);
      std::vector<uint8_t> v(c.video.size());
      std::vector<float> a(c.audio.size());
      r.read_clip(i, 0, 8, v.data(), a.data());
      EXPECT_EQ(v, c.video) << k.youtube_id;
      EXPECT_EQ(a, c.audio) << k.youtube_id;
    }
  }
  EXPECT_EQ(n, 12);
  EXPECT_EQ(fixtures::read_bytes(s.report), "youtube_id\ttime_start\ttime_end\treason\n");
}

// Breaks 3 clips in a copy of the set and removes a fourth.
fs::path broken_set(std::vector<std::string>* broken_ids) {
  const fs::path data = fixtures::copy_tree(fixtures::small_synthetic_set(), "prep_broken_data");
  const KineticsIndex idx = index_kinetics(data, KineticsSplit::kTrain);
  const std::string good = fixtures::read_bytes(idx.clips[0].path);
  std::ofstream(idx.clips[1].path, std::ios::binary) << good.substr(0, good.size() / 3);      // truncated
  std::ofstream(idx.clips[6].path, std::ios::binary) << std::string(5000, '\x5a');           // junk
  std::ofstream(idx.clips[7].path) << "#EXTM3U\n#EXTINF:1,\n" << idx.clips[0].path.string() << "\n";  // playlist
  fs::remove(idx.clips[11].path);
  for (int i : {1, 6, 7, 11}) broken_ids->push_back(idx.clips[size_t(i)].youtube_id);
  return data;
}

TEST(Prep, BrokenAndMissingClipsAreSkippedWithReasons) {
  std::vector<std::string> ids;
  const fs::path data = broken_set(&ids), out = out_dir("prep_broken");
  const PrepSummary s = prepare_kinetics(fixtures::small_prep_options(data, out));
  EXPECT_EQ(s.written, 8);
  EXPECT_EQ(s.skipped, 3);
  EXPECT_EQ(s.missing, 1);
  const std::string report = fixtures::read_bytes(s.report);
  for (const auto& id : ids) EXPECT_NE(report.find(id + "\t"), std::string::npos) << id << "\n" << report;
  EXPECT_NE(report.find("missing: no " + ids[3]), std::string::npos) << report;
  // One line per unusable row, no stray tabs or newlines from the reasons.
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 5);
  for (size_t pos = 0, end; (end = report.find('\n', pos)) != std::string::npos; pos = end + 1)
    EXPECT_EQ(std::count(report.begin() + long(pos), report.begin() + long(end), '\t'), 3);
  fs::remove_all(data);
}

TEST(Prep, ResumeKeepsFinishedShardsAndRedoesDamagedOnes) {
  std::vector<std::string> ids;
  const fs::path data = broken_set(&ids), out = out_dir("prep_resume");
  const PrepOptions o = fixtures::small_prep_options(data, out);
  prepare_kinetics(o);
  const auto first = fixtures::tree_bytes(out);
  // An interrupted run: shard 0 cut short, shard 1 never renamed (only its .tmp exists).
  const fs::path s0 = out / "train" / shard_file_name(0), s1 = out / "train" / shard_file_name(1);
  const std::string b0 = fixtures::read_bytes(s0);
  std::ofstream(s0, std::ios::binary) << b0.substr(0, b0.size() / 2);
  fs::rename(s1, s1.string() + ".tmp");
  const PrepSummary s = prepare_kinetics(o);
  EXPECT_EQ(s.shards_reused, 1);
  EXPECT_EQ(s.written, 8);
  EXPECT_EQ(s.skipped, 3);  // the reused shard's skipped clips are still reported
  EXPECT_TRUE(fixtures::tree_bytes(out) == first) << "resumed output differs from the uninterrupted one";
  // Other options make every shard stale.
  PrepOptions o2 = o;
  o2.image_dim = 24;
  EXPECT_EQ(prepare_kinetics(o2).shards_reused, 0);
  fs::remove_all(data);
}

TEST(Prep, SameBytesForAnyRunAndWorkerCount) {
  const fs::path data = fixtures::small_synthetic_set();
  std::vector<std::map<std::string, std::string>> trees;
  for (int workers : {1, 3, 3}) {
    const fs::path out = out_dir("prep_det_" + std::to_string(trees.size()));
    PrepOptions o = fixtures::small_prep_options(data, out);
    o.num_workers = workers;
    prepare_kinetics(o);
    trees.push_back(fixtures::tree_bytes(out));
  }
  ASSERT_EQ(trees[0].size(), 4u);  // 3 shards + the report
  EXPECT_TRUE(trees[0] == trees[1]);
  EXPECT_TRUE(trees[1] == trees[2]);
}

TEST(Prep, ValidationSplitAndBadOptions) {
  const fs::path data = fixtures::small_synthetic_set(), out = out_dir("prep_val");
  PrepOptions o = fixtures::small_prep_options(data, out);
  o.split = KineticsSplit::kValidate;
  const PrepSummary s = prepare_kinetics(o);  // validate.csv says `val`
  EXPECT_EQ(s.written, 3);
  EXPECT_EQ(ShardReader::open(out / "validate" / shard_file_name(0)).index().meta.split, "validate");
  o.image_dim = 2;
  EXPECT_THROW(prepare_kinetics(o), Error);
  o = fixtures::small_prep_options(fixtures::dir() / "nowhere", out);
  EXPECT_THROW(prepare_kinetics(o), Error);
}

TEST(Prep, ProgressIsReported) {
  const fs::path out = out_dir("prep_progress");
  PrepOptions o = fixtures::small_prep_options(fixtures::small_synthetic_set(), out);
  std::vector<PrepProgress> seen;
  o.on_progress = [&](const PrepProgress& p) { seen.push_back(p); };
  prepare_kinetics(o);
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().finished);
  EXPECT_EQ(seen.back().clips_done, 12);
  EXPECT_EQ(seen.back().shards_done, 3);
  // The console printer writes plain lines to a file.
  std::FILE* f = std::tmpfile();
  auto print = console_progress(f, "train", 0);
  for (const auto& p : seen) print(p);
  std::rewind(f);
  char line[256] = {};
  ASSERT_TRUE(std::fgets(line, sizeof line, f));
  EXPECT_NE(std::string(line).find("train:"), std::string::npos) << line;
  std::fclose(f);
}

}  // namespace
}  // namespace perceiver
