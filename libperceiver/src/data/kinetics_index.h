// The Kinetics index: the official annotation CSVs (DESIGN.md "Data set layout") and the clip
// files they name. Kinetics-400/600/700 all work: columns are found by name in the header
// (label,youtube_id,time_start,time_end,split; extra columns such as is_cc are ignored; the test
// split may have no label column), fields follow RFC 4180 (quoted labels with spaces, commas,
// parentheses and "" quotes), and clips are found in flat or per-label folders.
// Depends only on the standard library (the fuzz target compiles this file on its own).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace perceiver {

enum class KineticsSplit { kTrain, kValidate, kTest };

/// "train", "validate" (or "val"), "test"; throws perceiver::Error on anything else.
KineticsSplit parse_split(std::string_view name);
/// "train", "validate", "test" (the annotation file stem and the split's canonical name).
const char* split_name(KineticsSplit s);
/// "train", "val", "test" (the folder holding the split's clips).
const char* split_folder(KineticsSplit s);

/// Splits one CSV text into records of fields (RFC 4180: "" escapes a quote inside a quoted
/// field; quoted fields may hold commas and line breaks; CRLF, LF or CR end a record; blank
/// lines and a UTF-8 BOM are skipped). `lines[i]` is the 1-based line where record i starts.
/// Throws perceiver::Error naming `source` and the line on malformed quoting.
struct CsvTable {
  std::vector<std::vector<std::string>> records;
  std::vector<int64_t> lines;
};
CsvTable parse_csv(std::string_view text, const std::string& source);

struct AnnotationRow {
  std::string label;  // empty in the test split
  std::string youtube_id;
  int64_t time_start = 0, time_end = 0;  // seconds in the source video
  std::string split;                     // as written ("train", "val", "validate", "test")
  int64_t line = 0;                      // 1-based line in the CSV
};

struct Annotations {
  bool has_labels = false;  // a label column with a value on every row
  std::vector<AnnotationRow> rows;
};

/// Parses an annotation CSV. Checks the header (youtube_id, time_start, time_end required),
/// field counts, the split column against `expect` (val and validate are the same split),
/// ids and labels that could escape the data set folder, and the times. Errors name `source`
/// and the line.
Annotations parse_annotations(std::string_view text, const std::string& source,
                              std::optional<KineticsSplit> expect = std::nullopt);
Annotations read_annotations(const std::filesystem::path& csv,
                             std::optional<KineticsSplit> expect = std::nullopt);

/// `<youtube_id>_<start:06d>_<end:06d>`, the stem of a clip file.
std::string clip_stem(const std::string& youtube_id, int64_t time_start, int64_t time_end);

struct KineticsClip {
  std::string youtube_id;
  int64_t time_start = 0, time_end = 0;
  std::string label;             // empty without labels
  int32_t label_index = -1;      // index into KineticsIndex::classes, -1 without labels
  std::filesystem::path path;    // the clip file
  int64_t line = 0;              // line in the annotation CSV
};

/// A row of the annotations that has no usable clip.
struct UnusableRow {
  std::string youtube_id;
  int64_t time_start = 0, time_end = 0;
  int64_t line = 0;
  std::string reason;  // "missing: ..." or "duplicate of line N"
};

struct KineticsIndex {
  KineticsSplit split = KineticsSplit::kTrain;
  std::vector<std::string> classes;  // sorted set of labels over all annotation files
  std::vector<KineticsClip> clips;   // found clips in CSV order
  std::vector<UnusableRow> missing;  // rows without a clip file, and duplicate rows
  bool has_labels = false;
};

/// Reads DATASET_DIR/annotations/<split>.csv and finds each row's clip in
/// DATASET_DIR/<folder>/[<label>/]<stem>.{mp4,webm,mkv}. When a stem exists more than once, the
/// file in its label's folder wins over a flat one, then .mp4 over .webm over .mkv. The class list
/// is the sorted set of labels of every annotation file present, so all splits share it.
KineticsIndex index_kinetics(const std::filesystem::path& dataset_dir, KineticsSplit split);

}  // namespace perceiver
