// The Kinetics index: RFC 4180 edge cases of the annotation CSVs, header and row errors that
// name the file and line, and finding clips in flat and per-label folders.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "data/kinetics_index.h"
#include "fixtures.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

std::string error_of(const std::string& csv, std::optional<KineticsSplit> split = std::nullopt) {
  try {
    parse_annotations(csv, "ann.csv", split);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CSV_ERROR(csv, where, what)                                   \
  do {                                                                       \
    const std::string msg_ = error_of(csv);                                  \
    EXPECT_NE(msg_.find(where), std::string::npos) << "message: " << msg_;   \
    EXPECT_NE(msg_.find(what), std::string::npos) << "message: " << msg_;    \
  } while (0)

TEST(KineticsCsv, QuotedFieldsWithCommasQuotesParenthesesAndNewlines) {
  const std::string text =
      "\xEF\xBB\xBFlabel,youtube_id,time_start,time_end,split\r\n"
      "\"passing American football (not in game)\",abc,1,11,train\r\n"
      "\"drinking, \"\"shots\"\"\",def,2,12,train\n"
      "plain,ghi,3,13,train\r"
      "\"two\nlines\",jkl,4,14,train\n"
      "\n"
      "\"\",mno,5,15,train";
  const CsvTable t = parse_csv(text, "x.csv");
  ASSERT_EQ(t.records.size(), 6u);
  EXPECT_EQ(t.records[0][0], "label");  // the byte order mark is not part of the first name
  EXPECT_EQ(t.records[1][0], "passing American football (not in game)");
  EXPECT_EQ(t.records[2][0], "drinking, \"shots\"");
  EXPECT_EQ(t.records[3][0], "plain");
  EXPECT_EQ(t.records[4][0], "two\nlines");
  EXPECT_EQ(t.records[5][0], "");  // a quoted empty field is a record, not a blank line
  EXPECT_EQ((std::vector<int64_t>{1, 2, 3, 4, 5, 8}), t.lines);
}

TEST(KineticsCsv, AnnotationsByColumnName) {
  // Kinetics-400 has an extra is_cc column; columns are found by name.
  const Annotations a = parse_annotations(
      "youtube_id,label,time_start,time_end,split,is_cc\n"
      "---QUuC4vJs,\"testifying\",84,94,validate,0\n"
      "--33Lscn6sk,\"tying bow tie\",4.0,14.0,val,1\n",
      "k400.csv", KineticsSplit::kValidate);
  ASSERT_EQ(a.rows.size(), 2u);
  EXPECT_TRUE(a.has_labels);
  EXPECT_EQ(a.rows[0].youtube_id, "---QUuC4vJs");
  EXPECT_EQ(a.rows[1].label, "tying bow tie");
  EXPECT_EQ(a.rows[1].time_start, 4);
  EXPECT_EQ(a.rows[1].time_end, 14);
  EXPECT_EQ(a.rows[1].line, 3);
}

TEST(KineticsCsv, TestSplitWithoutLabels) {
  const Annotations a =
      parse_annotations("youtube_id,time_start,time_end,split\nabc,0,10,test\n", "test.csv", KineticsSplit::kTest);
  EXPECT_FALSE(a.has_labels);
  ASSERT_EQ(a.rows.size(), 1u);
  EXPECT_EQ(a.rows[0].label, "");
  // An empty label is fine in the test split only.
  EXPECT_NO_THROW(parse_annotations("label,youtube_id,time_start,time_end,split\n,abc,0,10,test\n", "t.csv",
                                    KineticsSplit::kTest));
  EXPECT_NE(error_of("label,youtube_id,time_start,time_end,split\n,abc,0,10,train\n", KineticsSplit::kTrain)
                .find("ann.csv:2: empty label"),
            std::string::npos);
}

TEST(KineticsCsv, ErrorsNameFileAndLine) {
  const std::string h = "label,youtube_id,time_start,time_end,split\n";
  EXPECT_CSV_ERROR("", "ann.csv", "empty file");
  EXPECT_CSV_ERROR("label,id,start\n", "ann.csv:1", "youtube_id, time_start and time_end");
  EXPECT_CSV_ERROR("label,label,youtube_id,time_start,time_end\n", "ann.csv:1", "appears twice");
  EXPECT_CSV_ERROR(h + "a,b,1,11,train\n\"open,c,1,11,train\n", "ann.csv:3", "never closed");
  EXPECT_CSV_ERROR(h + "\"a\"x,b,1,11,train\n", "ann.csv:2", "after a closing quote");
  EXPECT_CSV_ERROR(h + "a\"b,c,1,11,train\n", "ann.csv:2", "unquoted field");
  EXPECT_CSV_ERROR(h + "a,b,1,11\n", "ann.csv:2", "expected 5 fields");
  EXPECT_CSV_ERROR(h + "a,b,1.5,11,train\n", "ann.csv:2", "time_start '1.5'");
  EXPECT_CSV_ERROR(h + "a,b,-1,11,train\n", "ann.csv:2", "time_start '-1'");
  EXPECT_CSV_ERROR(h + "a,b,x,11,train\n", "ann.csv:2", "not a whole number");
  EXPECT_CSV_ERROR(h + "a,b,12,11,train\n", "ann.csv:2", "before time_start");
  EXPECT_CSV_ERROR(h + "a,../x,1,11,train\n", "ann.csv:2", "bad youtube_id");
  EXPECT_CSV_ERROR(h + "a,,1,11,train\n", "ann.csv:2", "bad youtube_id");
  EXPECT_CSV_ERROR(h + "a,b,1,99999999999,train\n", "ann.csv:2", "time_end");
  const std::string wrong = error_of(h + "a,b,1,11,train\n", KineticsSplit::kValidate);
  EXPECT_NE(wrong.find("ann.csv:2: split 'train' in the validate annotations"), std::string::npos) << wrong;
  EXPECT_NE(error_of(h + "a,b,1,11,bogus\n", KineticsSplit::kTrain).find("unknown split 'bogus'"), std::string::npos);
}

TEST(KineticsCsv, SplitNames) {
  EXPECT_EQ(parse_split("val"), KineticsSplit::kValidate);
  EXPECT_EQ(parse_split("validate"), KineticsSplit::kValidate);
  EXPECT_STREQ(split_folder(KineticsSplit::kValidate), "val");
  EXPECT_STREQ(split_name(KineticsSplit::kValidate), "validate");
  EXPECT_THROW(parse_split("dev"), Error);
  EXPECT_EQ(clip_stem("abc", 3, 13), "abc_000003_000013");
}

void touch(const std::filesystem::path& p) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

TEST(KineticsIndex, FindsClipsInFlatAndLabelFoldersAndReportsMissing) {
  const auto root = fixtures::dir() / ("kinetics_index_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "annotations");
  std::ofstream(root / "annotations" / "train.csv")
      << "label,youtube_id,time_start,time_end,split\n"
         "\"zumba, (fast)\",aaa,0,10,train\n"
         "\"air drumming\",bbb,5,15,train\n"
         "\"air drumming\",ccc,1,11,train\n"
         "\"air drumming\",ddd,1,11,train\n"
         "\"air drumming\",bbb,5,15,train\n";
  std::ofstream(root / "annotations" / "validate.csv")
      << "label,youtube_id,time_start,time_end,split\nabseiling,eee,0,10,val\n";
  touch(root / "train" / "zumba, (fast)" / "aaa_000000_000010.mp4");
  touch(root / "train" / "bbb_000005_000015.webm");                  // flat
  touch(root / "train" / "air drumming" / "bbb_000005_000015.mkv");  // label folder beats flat
  touch(root / "train" / "air_drumming" / "ccc_000001_000011.webm");  // underscored folder
  touch(root / "train" / "air_drumming" / "ccc_000001_000011.mp4");   // .mp4 beats .webm
  touch(root / "train" / "notes.txt");

  const KineticsIndex idx = index_kinetics(root, KineticsSplit::kTrain);
  EXPECT_EQ(idx.classes, (std::vector<std::string>{"abseiling", "air drumming", "zumba, (fast)"}));
  ASSERT_EQ(idx.clips.size(), 3u);
  EXPECT_EQ(idx.clips[0].label_index, 2);
  EXPECT_EQ(idx.clips[1].path, root / "train" / "air drumming" / "bbb_000005_000015.mkv");
  EXPECT_EQ(idx.clips[1].label_index, 1);
  EXPECT_EQ(idx.clips[2].path, root / "train" / "air_drumming" / "ccc_000001_000011.mp4");
  ASSERT_EQ(idx.missing.size(), 2u);
  EXPECT_EQ(idx.missing[0].youtube_id, "ddd");
  EXPECT_NE(idx.missing[0].reason.find("missing"), std::string::npos);
  EXPECT_EQ(idx.missing[1].reason, "duplicate of line 3");
  std::filesystem::remove_all(root);
}

TEST(KineticsIndex, MissingAnnotationFileIsAClearError) {
  try {
    index_kinetics(fixtures::dir() / "no_such_dataset", KineticsSplit::kTest);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.csv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perceiver
