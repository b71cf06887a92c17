#include "data/kinetics_index.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "perceiver/error.h"

namespace perceiver {
namespace fs = std::filesystem;

KineticsSplit parse_split(std::string_view name) {
  if (name == "train") return KineticsSplit::kTrain;
  if (name == "validate" || name == "val") return KineticsSplit::kValidate;
  if (name == "test") return KineticsSplit::kTest;
  PCV_FAIL("unknown split '", name, "' (expected train, validate or test)");
}

const char* split_name(KineticsSplit s) {
  return s == KineticsSplit::kTrain ? "train" : s == KineticsSplit::kValidate ? "validate" : "test";
}

const char* split_folder(KineticsSplit s) {
  return s == KineticsSplit::kTrain ? "train" : s == KineticsSplit::kValidate ? "val" : "test";
}

namespace {

// A character-level RFC 4180 scanner. Tracks the physical line so errors point at the file.
class CsvScanner {
 public:
  CsvScanner(std::string_view text, const std::string& source) : t_(text), source_(source) {
    if (t_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte order mark
  }

  CsvTable run() {
    CsvTable table;
    while (pos_ < t_.size()) {
      const int64_t start_line = line_;
      std::vector<std::string> record = read_record();
      if (record.size() == 1 && record[0].empty() && !quoted_) continue;  // blank line
      table.records.push_back(std::move(record));
      table.lines.push_back(start_line);
    }
    return table;
  }

 private:
  // Consumes a line break at pos_ if there is one (CRLF, LF or CR).
  bool eat_newline() {
    if (t_[pos_] == '\r') {
      pos_ += (pos_ + 1 < t_.size() && t_[pos_ + 1] == '\n') ? 2 : 1;
    } else if (t_[pos_] == '\n') {
      ++pos_;
    } else {
      return false;
    }
    ++line_;
    return true;
  }

  std::vector<std::string> read_record() {
    std::vector<std::string> fields;
    quoted_ = false;
    while (true) {
      fields.push_back(read_field());
      if (pos_ >= t_.size() || eat_newline()) return fields;
      PCV_ASSERT(t_[pos_] == ',');
      ++pos_;
    }
  }

  std::string read_field() {
    if (pos_ < t_.size() && t_[pos_] == '"') return read_quoted();
    const size_t start = pos_;
    while (pos_ < t_.size() && t_[pos_] != ',' && t_[pos_] != '\n' && t_[pos_] != '\r') {
      PCV_CHECK(t_[pos_] != '"', source_, ":", line_, ": a '\"' inside an unquoted field (quote the whole field)");
      ++pos_;
    }
    return std::string(t_.substr(start, pos_ - start));
  }

  std::string read_quoted() {
    const int64_t open_line = line_;
    quoted_ = true;
    ++pos_;
    std::string out;
    while (true) {
      PCV_CHECK(pos_ < t_.size(), source_, ":", open_line, ": quoted field is never closed");
      const char c = t_[pos_];
      if (c == '"' && pos_ + 1 < t_.size() && t_[pos_ + 1] == '"') {
        out += '"';
        pos_ += 2;
      } else if (c == '"') {
        ++pos_;
        break;
      } else if (c == '\r' || c == '\n') {
        const size_t before = pos_;
        eat_newline();
        out.append(t_.substr(before, pos_ - before));
      } else {
        out += c;
        ++pos_;
      }
    }
    PCV_CHECK(pos_ >= t_.size() || t_[pos_] == ',' || t_[pos_] == '\n' || t_[pos_] == '\r', source_, ":", line_,
              ": unexpected character after a closing quote");
    return out;
  }

  std::string_view t_;
  const std::string& source_;
  size_t pos_ = 0;
  int64_t line_ = 1;
  bool quoted_ = false;  // the current record had a quoted field (so "" is not a blank line)
};

// Times are whole seconds; "13" and "13.0" are accepted, nothing else.
int64_t parse_seconds(const std::string& s, const std::string& source, int64_t line, const char* column) {
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  bool ok = digits > 0 && digits <= 9;
  if (ok && digits < s.size()) {
    ok = s[digits] == '.' && digits + 1 < s.size();
    for (size_t i = digits + 1; ok && i < s.size(); ++i) ok = s[i] == '0';
  }
  PCV_CHECK(ok, source, ":", line, ": ", column, " '", s, "' is not a whole number of seconds");
  return std::stoll(s.substr(0, digits));
}

// Ids and labels become path components: refuse anything that could leave the data set folder.
bool safe_path_component(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

struct Columns {
  int label = -1, id = -1, start = -1, end = -1, split = -1;
};

Columns find_columns(const std::vector<std::string>& header, const std::string& source, int64_t line) {
  Columns c;
  std::set<std::string> seen;
  for (int i = 0; i < int(header.size()); ++i) {
    const std::string& h = header[size_t(i)];
    PCV_CHECK(seen.insert(h).second, source, ":", line, ": column '", h, "' appears twice in the header");
    if (h == "label") c.label = i;
    if (h == "youtube_id") c.id = i;
    if (h == "time_start") c.start = i;
    if (h == "time_end") c.end = i;
    if (h == "split") c.split = i;
  }
  PCV_CHECK(c.id >= 0 && c.start >= 0 && c.end >= 0, source, ":", line,
            ": header must name the columns youtube_id, time_start and time_end "
            "(the official label,youtube_id,time_start,time_end,split); found '",
            [&] {
              std::string s;
              for (const auto& h : header) s += (s.empty() ? "" : ",") + h;
              return s;
            }(),
            "'");
  return c;
}

AnnotationRow parse_row(const std::vector<std::string>& f, const Columns& c, const std::string& source,
                        int64_t line, std::optional<KineticsSplit> expect) {
  AnnotationRow r;
  r.line = line;
  r.youtube_id = f[size_t(c.id)];
  PCV_CHECK(safe_path_component(r.youtube_id), source, ":", line, ": bad youtube_id '", r.youtube_id, "'");
  if (c.label >= 0) r.label = f[size_t(c.label)];
  PCV_CHECK(r.label.find('\0') == std::string::npos, source, ":", line, ": label holds a NUL byte");
  r.time_start = parse_seconds(f[size_t(c.start)], source, line, "time_start");
  r.time_end = parse_seconds(f[size_t(c.end)], source, line, "time_end");
  PCV_CHECK(r.time_end >= r.time_start, source, ":", line, ": time_end ", r.time_end, " is before time_start ",
            r.time_start);
  if (c.split >= 0) {
    r.split = f[size_t(c.split)];
    if (expect) {
      KineticsSplit s;
      try {
        s = parse_split(r.split);
      } catch (const Error&) {
        PCV_FAIL(source, ":", line, ": unknown split '", r.split, "'");
      }
      PCV_CHECK(s == *expect, source, ":", line, ": split '", r.split, "' in the ", split_name(*expect), " annotations");
    }
  }
  return r;
}

}  // namespace

CsvTable parse_csv(std::string_view text, const std::string& source) { return CsvScanner(text, source).run(); }

Annotations parse_annotations(std::string_view text, const std::string& source, std::optional<KineticsSplit> expect) {
  const CsvTable t = parse_csv(text, source);
  PCV_CHECK(!t.records.empty(), source, ": empty file (expected a header label,youtube_id,time_start,time_end,split)");
  const Columns c = find_columns(t.records[0], source, t.lines[0]);
  Annotations a;
  a.has_labels = c.label >= 0;
  for (size_t i = 1; i < t.records.size(); ++i) {
    const auto& f = t.records[i];
    PCV_CHECK(f.size() == t.records[0].size(), source, ":", t.lines[i], ": expected ", t.records[0].size(),
              " fields as in the header, found ", f.size());
    a.rows.push_back(parse_row(f, c, source, t.lines[i], expect));
    if (a.rows.back().label.empty()) a.has_labels = false;
  }
  // A label column that is empty on some rows is only acceptable in the test split.
  if (c.label >= 0 && !a.has_labels && expect != KineticsSplit::kTest)
    for (const auto& r : a.rows) PCV_CHECK(!r.label.empty(), source, ":", r.line, ": empty label");
  return a;
}

Annotations read_annotations(const fs::path& csv, std::optional<KineticsSplit> expect) {
  std::ifstream in(csv, std::ios::binary);
  PCV_CHECK(in, "cannot open annotation file '", csv.string(), "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_annotations(ss.str(), csv.string(), expect);
}

std::string clip_stem(const std::string& youtube_id, int64_t time_start, int64_t time_end) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "_%06lld_%06lld", static_cast<long long>(time_start), static_cast<long long>(time_end));
  return youtube_id + buf;
}

namespace {

constexpr std::array<const char*, 3> kExtensions = {".mp4", ".webm", ".mkv"};

int extension_rank(const fs::path& p) {
  for (size_t i = 0; i < kExtensions.size(); ++i)
    if (p.extension() == kExtensions[i]) return int(i);
  return -1;
}

// Every candidate clip file under the split folder (flat and one level of subfolders), by stem.
std::map<std::string, std::vector<fs::path>> scan_clips(const fs::path& root) {
  std::map<std::string, std::vector<fs::path>> by_stem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return by_stem;
  auto add_dir = [&](const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir, fs::directory_options::skip_permission_denied, ec))
      if (extension_rank(e.path()) >= 0 && !e.is_directory(ec)) by_stem[e.path().stem().string()].push_back(e.path());
  };
  add_dir(root);
  for (const auto& e : fs::directory_iterator(root, fs::directory_options::skip_permission_denied, ec))
    if (e.is_directory(ec)) add_dir(e.path());
  return by_stem;
}

// Preference: the label's own folder (also with spaces as underscores), then flat, then any
// other folder; then extension order; then the path, so the choice never depends on listing order.
fs::path pick_clip(std::vector<fs::path> candidates, const fs::path& root, const std::string& label) {
  std::string underscored = label;
  std::replace(underscored.begin(), underscored.end(), ' ', '_');
  auto place = [&](const fs::path& p) {
    const fs::path dir = p.parent_path();
    if (!label.empty() && (dir == root / label || dir == root / underscored)) return 0;
    return dir == root ? 1 : 2;
  };
  std::sort(candidates.begin(), candidates.end(), [&](const fs::path& a, const fs::path& b) {
    return std::tuple(place(a), extension_rank(a), a.string()) < std::tuple(place(b), extension_rank(b), b.string());
  });
  return candidates.front();
}

std::vector<std::string> class_list(const fs::path& dir, KineticsSplit split, const Annotations& own) {
  std::set<std::string> labels;
  for (const auto& r : own.rows)
    if (!r.label.empty()) labels.insert(r.label);
  for (KineticsSplit s : {KineticsSplit::kTrain, KineticsSplit::kValidate, KineticsSplit::kTest}) {
    const fs::path csv = dir / "annotations" / (std::string(split_name(s)) + ".csv");
    if (s == split || !fs::exists(csv)) continue;
    for (const auto& r : read_annotations(csv, s).rows)
      if (!r.label.empty()) labels.insert(r.label);
  }
  return {labels.begin(), labels.end()};
}

}  // namespace

KineticsIndex index_kinetics(const fs::path& dataset_dir, KineticsSplit split) {
  const fs::path csv = dataset_dir / "annotations" / (std::string(split_name(split)) + ".csv");
  const Annotations ann = read_annotations(csv, split);
  KineticsIndex idx;
  idx.split = split;
  idx.has_labels = ann.has_labels;
  idx.classes = class_list(dataset_dir, split, ann);
  const fs::path root = dataset_dir / split_folder(split);
  auto files = scan_clips(root);
  std::map<std::string, int64_t> first_line;  // stem -> line of its first row
  for (const AnnotationRow& r : ann.rows) {
    const std::string stem = clip_stem(r.youtube_id, r.time_start, r.time_end);
    UnusableRow bad{r.youtube_id, r.time_start, r.time_end, r.line, ""};
    if (auto [it, fresh] = first_line.emplace(stem, r.line); !fresh) {
      bad.reason = "duplicate of line " + std::to_string(it->second);
    } else if (auto f = files.find(stem); f == files.end()) {
      bad.reason = "missing: no " + stem + ".{mp4,webm,mkv} in " + root.string() + " or its label folders";
    } else {
      KineticsClip c{r.youtube_id, r.time_start, r.time_end, ann.has_labels ? r.label : "", -1,
                     pick_clip(f->second, root, r.label), r.line};
      if (ann.has_labels)
        c.label_index = int32_t(std::lower_bound(idx.classes.begin(), idx.classes.end(), r.label) - idx.classes.begin());
      idx.clips.push_back(std::move(c));
      continue;
    }
    idx.missing.push_back(std::move(bad));
  }
  return idx;
}

}  // namespace perceiver
