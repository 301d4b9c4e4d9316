#pragma once
// AtomicFile: write a file so that nobody ever sees it half-written (DESIGN.md section 6).
//
// The bytes go to a fresh temporary file in the target's own directory (a rename is only
// atomic within one file system); commit() fsyncs it, renames it over the target and fsyncs
// the directory, so after a crash the target is either the old file or the complete new one.
// Until commit() succeeds the target is untouched, and destroying an uncommitted AtomicFile
// (an exception on the way, a failed write) removes the temporary: on failure nothing is left.
// A process killed outright (SIGKILL, power loss) can leave its temporary behind; its name is
// ".<target name>.tmp-<pid>-..." so it is easy to recognise, and the next AtomicFile for the same
// target removes the temporaries of processes that no longer exist. A process ended by a signal
// it handles removes its own: the handler calls remove_temporaries_now().
// A target that is a symbolic link is written through: the link stays, the file it points to is
// replaced (atomically, in that file's directory), as `cp` or an editor's save would do.
//
//   io::AtomicFile out(path, "safetensors");
//   out.write(header.data(), header.size());
//   out.commit();
#include <cstddef>
#include <cstdint>
#include <string>

namespace mixprec::io {

// Removes the temporary file of every AtomicFile of this process that is neither committed nor
// discarded. Async-signal-safe (unlink(2) on paths recorded in advance): for signal handlers.
void remove_temporaries_now() noexcept;

class AtomicFile {
 public:
  // Creates the temporary file next to `path`. `op` prefixes error messages:
  // "[<op>] <path>: <what failed>: <strerror>". A `path` that is an existing directory is
  // refused here, before the caller does the work whose result it would write.
  explicit AtomicFile(std::string path, std::string op = "write");
  ~AtomicFile();  // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends n bytes (short writes and EINTR are retried). Throws on failure, e.g. a full disk.
  void write(const void* data, std::size_t n);
  uint64_t bytes_written() const { return written_; }

  // Makes the file durable and visible at path(). Throws on failure (the temporary is then
  // removed and the target is untouched). Writing after commit() is a programming error.
  void commit();
  // Gives up: removes the temporary now (the destructor does it too). Never throws.
  void discard() noexcept;

  bool committed() const { return committed_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err) const;

  std::string path_;
  std::string op_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
  int registry_slot_ = -1;  // where remove_temporaries_now() finds temp_path_
};

}  // namespace mixprec::io
