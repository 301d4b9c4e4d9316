// Atomic writes: the target appears complete or not at all, and failures leave nothing behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "io_test_util.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::io {
namespace {

using test::error_of;
using test::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string read_text(const std::string& path) {
  const test::Bytes b = test::read_file(path);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

TEST(AtomicFile, CommitMakesTheFileAppear) {
  ScratchDir dir;
  const std::string path = dir.file("out.bin");
  {
    AtomicFile f(path);
    f.write("hello ", 6);
    EXPECT_FALSE(std::filesystem::exists(path));  // invisible until committed
    EXPECT_THAT(f.temp_path(), StartsWith(dir.path() + "/.out.bin.tmp-"));
    EXPECT_TRUE(std::filesystem::exists(f.temp_path()));
    f.write("world", 5);
    EXPECT_EQ(f.bytes_written(), 11u);
    f.commit();
    EXPECT_TRUE(f.committed());
  }
  EXPECT_EQ(read_text(path), "hello world");
  EXPECT_THAT(dir.entries(), ElementsAre("out.bin"));
}

TEST(AtomicFile, UncommittedLeavesNothing) {
  ScratchDir dir;
  {
    AtomicFile f(dir.file("out.bin"));
    f.write("partial", 7);
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, ExistingFileSurvivesAFailedReplacement) {
  ScratchDir dir;
  const std::string path = dir.file("keep.bin");
  test::write_file(path, {std::byte{'o'}, std::byte{'l'}, std::byte{'d'}});
  try {
    AtomicFile f(path);
    f.write("new content", 11);
    throw std::runtime_error("the producer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_text(path), "old");
  EXPECT_THAT(dir.entries(), ElementsAre("keep.bin"));
}

TEST(AtomicFile, ReplacingKeepsPermissions) {
  ScratchDir dir;
  const std::string path = dir.file("secret.bin");
  test::write_file(path, {std::byte{1}});
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  AtomicFile f(path);
  f.write("x", 1);
  f.commit();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(AtomicFile, MissingDirectory) {
  ScratchDir dir;
  const std::string path = dir.file("no/such/dir/out.bin");
  EXPECT_EQ(error_of([&] { AtomicFile f(path, "test"); }),
            "[test] " + path + ": cannot create a temporary file in '" + dir.file("no/such/dir") +
                "': No such file or directory");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, NotAFileName) {
  EXPECT_THAT(error_of([] { AtomicFile f("some/dir/"); }), HasSubstr("some/dir/: not a file name"));
}

TEST(AtomicFile, RenameOntoADirectoryFailsCleanly) {
  ScratchDir dir;
  AtomicFile f(dir.file("target"));
  // A directory that appears while the file is written: rename(2) cannot replace it.
  std::filesystem::create_directory(dir.file("target"));
  std::filesystem::create_directory(dir.file("target/occupied"));
  f.write("x", 1);
  EXPECT_THAT(error_of([&] { f.commit(); }),
              HasSubstr("cannot rename the temporary file into place"));
  EXPECT_THAT(dir.entries(), ElementsAre("target"));  // the temporary is gone
  EXPECT_THAT(error_of([&] { f.write("y", 1); }), HasSubstr("write after the file was discarded"));
}

TEST(AtomicFile, UseAfterCommitIsAnError) {
  ScratchDir dir;
  AtomicFile f(dir.file("a.bin"));
  f.commit();
  EXPECT_THAT(error_of([&] { f.write("x", 1); }), HasSubstr("write after the file was committed"));
  EXPECT_THAT(error_of([&] { f.commit(); }), HasSubstr("commit after the file was committed"));
  EXPECT_THAT(dir.entries(), ElementsAre("a.bin"));
}

// ---- through save_safetensors ----

TEST(AtomicFile, SafetensorsIntoMissingDirectoryLeavesNothing) {
  ScratchDir dir;
  const std::string path = dir.file("missing/out.safetensors");
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"x", Tensor::ones({4})}});
              }),
              StartsWith("[safetensors] " + path + ": cannot create a temporary file"));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, SafetensorsProducerFailingMidwayLeavesNothing) {
  ScratchDir dir;
  const std::string path = dir.file("out.safetensors");
  const std::vector<TensorRecord> records = {{"a", "F32", {1024}}, {"b", "F32", {1024}}};
  EXPECT_THROW(write_safetensors(path, records, {},
                                 [](std::size_t i, AtomicFile& out) {
                                   const std::vector<float> zeros(1024);
                                   out.write(zeros.data(), 4096);
                                   if (i == 1)
                                     throw Error("[test] producer failed after its bytes");
                                 }),
               Error);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, SafetensorsWriteErrorMidwayLeavesNothing) {
  // A real mid-write failure: the file-size limit makes write(2) fail with EFBIG part way
  // through the data, as a full disk would with ENOSPC.
  ScratchDir dir;
  const std::string path = dir.file("big.safetensors");
  test::write_file(path, {std::byte{'o'}, std::byte{'l'}, std::byte{'d'}});
  rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process
  rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message = error_of([&] {
    save_safetensors(path, {{"x", Tensor::zeros({1 << 20})}});
  });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_THAT(message, HasSubstr("[safetensors] " + path + ": write failed: File too large"));
  EXPECT_EQ(read_text(path), "old");  // untouched
  EXPECT_THAT(dir.entries(), ElementsAre("big.safetensors"));
}

TEST(AtomicFile, AnExistingDirectoryIsRefusedBeforeAnyWork) {
  ScratchDir dir;
  std::filesystem::create_directory(dir.file("frames"));
  EXPECT_THAT(error_of([&] { AtomicFile f(dir.file("frames"), "gif"); }),
              HasSubstr("[gif] " + dir.file("frames") + ": is a directory"));
  EXPECT_THAT(dir.entries(), ElementsAre("frames"));
}

TEST(AtomicFile, ASymlinkIsWrittenThroughNotReplaced) {
  ScratchDir dir;
  const std::string target = dir.file("real.bin"), link = dir.file("link.bin");
  test::write_file(target, {std::byte{'o'}, std::byte{'l'}, std::byte{'d'}});
  std::filesystem::create_symlink("real.bin", link);
  {
    AtomicFile f(link);
    f.write("new", 3);
    f.commit();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link));  // the link stays a link
  EXPECT_EQ(read_text(target), "new");             // the file it points to is replaced
  EXPECT_THAT(dir.entries(), ElementsAre("link.bin", "real.bin"));
}

TEST(AtomicFile, StaleTemporariesOfDeadProcessesAreRemoved) {
  ScratchDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // reaped: its pid names no process now
  const std::string dead = dir.file(".out.bin.tmp-" + std::to_string(child) + "-0-1f");
  const std::string alive = dir.file(".out.bin.tmp-" + std::to_string(::getppid()) + "-0-1f");
  const std::string other = dir.file(".other.bin.tmp-" + std::to_string(child) + "-0-1f");
  for (const std::string& p : {dead, alive, other}) test::write_file(p, {std::byte{'x'}});
  {
    AtomicFile f(dir.file("out.bin"));
    f.write("ok", 2);
    f.commit();
  }
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));  // a live process may still be writing it
  EXPECT_TRUE(std::filesystem::exists(other));  // another target's: not this writer's business
}

TEST(AtomicFile, RemoveTemporariesNowRemovesOpenTemporaries) {
  ScratchDir dir;
  AtomicFile a(dir.file("a.bin")), b(dir.file("b.bin"));
  AtomicFile done(dir.file("done.bin"));
  done.write("x", 1);
  done.commit();
  EXPECT_TRUE(std::filesystem::exists(a.temp_path()));
  remove_temporaries_now();  // what a signal handler calls
  EXPECT_FALSE(std::filesystem::exists(a.temp_path()));
  EXPECT_FALSE(std::filesystem::exists(b.temp_path()));
  EXPECT_TRUE(std::filesystem::exists(dir.file("done.bin")));
}

}  // namespace
}  // namespace mixprec::io
