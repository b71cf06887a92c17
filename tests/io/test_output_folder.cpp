// output_folder_problem (io/atomic_file.h): the check the tools make of their output folders
// before any work.
#include <gtest/gtest.h>

#include "io/atomic_file.h"
#include "io_test_util.h"

namespace perceiver::iotest {
namespace {

TEST(OutputFolder, ExistingOrCreatableFoldersHaveNoProblem) {
  const fs::path d = test_dir();
  EXPECT_EQ(output_folder_problem(d), "");
  EXPECT_EQ(output_folder_problem(d / "new" / "deeper"), "");
  EXPECT_EQ(output_folder_problem(fs::path("a-relative-folder-that-does-not-exist") / "run"), "");
}

TEST(OutputFolder, AFileInTheWayIsNamed) {
  const fs::path d = test_dir(), file = d / "a_file";
  write_bytes(file, "x");
  EXPECT_EQ(output_folder_problem(file), "'" + file.string() + "' is a file, not a folder");
  const fs::path under = file / "sub" / "run";
  EXPECT_EQ(output_folder_problem(under), "'" + under.string() + "': '" + file.string() + "' is a file, not a folder");
}

}  // namespace
}  // namespace perceiver::iotest
