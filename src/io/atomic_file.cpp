#include "mixprec/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mixprec/core/error.h"

namespace mixprec::io {
namespace {

// "dir/name" -> {"dir", "name"}; "name" -> {".", "name"}; "/name" -> {"/", "name"}.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// A suffix no other writer picks: the pid separates processes, the counter separates files of
// one process, the clock separates a reused pid from a stale temporary of a dead process.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  const auto ticks =
      static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%ld-%llu-%llx", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)), ticks & 0xFFFFFFull);
  return buf;
}

// The temporaries this process is writing, for remove_temporaries_now(). A signal handler may
// read it at any moment, so it is fixed storage with atomic slot states, no allocation or lock:
// a slot is free (0), being filled (1) or holds a path (2).
constexpr int kRegistrySlots = 64;
struct RegistrySlot {
  std::atomic<int> state{0};
  char path[4096];
};
RegistrySlot g_registry[kRegistrySlots];

int register_temporary(const std::string& path) {
  if (path.size() >= sizeof g_registry[0].path) return -1;  // not tracked; still removed normally
  for (int i = 0; i < kRegistrySlots; ++i) {
    int expected = 0;
    if (g_registry[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_registry[i].path, path.c_str(), path.size() + 1);
      g_registry[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_temporary(int& slot) {
  if (slot >= 0) g_registry[slot].state.store(0, std::memory_order_release);
  slot = -1;
}

// Removes ".<base>.tmp-<pid>-..." files in `dir` whose process no longer exists: what a process
// killed outright (SIGKILL, power loss) left behind. A live process's temporaries, this one's
// included, are never touched.
void remove_stale_temporaries(const std::string& dir, const std::string& base) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string prefix = "." + base + ".tmp-";
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.substr(0, prefix.size()) != prefix) continue;
    const std::string_view rest = name.substr(prefix.size());
    long pid = 0;
    std::size_t digits = 0;
    for (; digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9'; ++digits)
      pid = pid * 10 + (rest[digits] - '0');
    if (digits == 0 || digits > 9 || digits == rest.size() || rest[digits] != '-') continue;
    const bool dead =
        pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if (dead) (void)::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
}

// The file a write to `path` replaces: the target of a symbolic link (followed through every
// link, which may not exist yet), else `path` itself. Renaming onto the link would replace the
// link with a regular file and leave the file it pointed to unchanged.
std::string write_target(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(path, ec)) return path;
  const std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : target.string();
}

}  // namespace

void remove_temporaries_now() noexcept {
  for (RegistrySlot& slot : g_registry)
    if (slot.state.load(std::memory_order_acquire) == 2) (void)::unlink(slot.path);
}

AtomicFile::AtomicFile(std::string path, std::string op)
    : path_(write_target(path)), op_(std::move(op)) {
  const auto [dir, base] = split_path(path_);
  if (base.empty() || base == "." || base == "..")
    throw Error(detail::concat("[", op_, "] ", path_, ": not a file name"));
  // Refused now, not at the rename: a command writes its output after all its work.
  if (std::filesystem::is_directory(path_))
    throw Error(detail::concat("[", op_, "] ", path_, ": is a directory, expected a file name"));
  remove_stale_temporaries(dir, base);
  // O_EXCL makes the name ours alone; mode 0666 lets the umask decide the permissions, as for
  // any newly created file.
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_path_ = (dir == "/" ? "/" : dir + "/") + "." + base + ".tmp-" + unique_suffix();
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) fail("cannot create a temporary file in '" + dir + "'", errno);
  }
  if (fd_ < 0) fail("cannot create a temporary file in '" + dir + "'", EEXIST);
  registry_slot_ = register_temporary(temp_path_);
  // Replacing a file keeps its permissions (a 0600 secret stays 0600).
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    (void)::fchmod(fd_, st.st_mode & 07777);
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::fail(const std::string& what, int err) const {
  throw Error(detail::concat("[", op_, "] ", path_, ": ", what, ": ", std::strerror(err)));
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (fd_ < 0)
    throw Error(detail::concat("[", op_, "] ", path_, ": write after the file was ",
                               committed_ ? "committed" : "discarded"));
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux moves at most ~2 GiB per write(2); larger requests come back short and loop.
    const ssize_t done = ::write(fd_, p, n);
    if (done < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      discard();  // a failed file must never be committed
      fail("write failed", err);
    }
    p += done;
    n -= static_cast<std::size_t>(done);
    written_ += static_cast<uint64_t>(done);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0)
    throw Error(detail::concat("[", op_, "] ", path_, ": commit after the file was ",
                               committed_ ? "committed" : "discarded"));
  // fsync before rename: otherwise a crash can leave the new name pointing at empty blocks.
  if (::fsync(fd_) != 0) {
    const int err = errno;
    discard();
    fail("fsync failed", err);
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {  // NFS and friends report deferred write errors here
    const int err = errno;
    ::unlink(temp_path_.c_str());
    unregister_temporary(registry_slot_);
    fail("close failed", err);
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    unregister_temporary(registry_slot_);
    fail("cannot rename the temporary file into place", err);
  }
  unregister_temporary(registry_slot_);
  committed_ = true;
  // Make the rename itself durable. The file is already complete and in place, so a failure
  // here (some file systems refuse fsync on directories) is not worth undoing it for.
  const int dir_fd = ::open(split_path(path_).first.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void AtomicFile::discard() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
  unregister_temporary(registry_slot_);
}

}  // namespace mixprec::io
