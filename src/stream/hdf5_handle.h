#pragma once
// libhdf5's C API with owned handles (private to src/stream: the library links libhdf5
// privately, so no public header includes hdf5.h).
//
// Every hid_t this code opens lives in an Hdf5Handle that closes it with the right H5?close on
// every path, exceptions included. HDF5's own error printing is switched off: failures become
// mixprec::Error with what we were doing and HDF5's innermost reason.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::stream::hdf5 {

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and reports whether HDF5 managed (a file's close flushes: it can fail).
  bool close() {
    if (id_ < 0) return true;
    const herr_t status = close_(id_);
    id_ = H5I_INVALID_HID;
    return status >= 0;
  }
  void reset() { (void)close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Turns off HDF5's printing of error stacks to stderr (idempotent, cheap).
void silence_errors();

// HDF5's reason for the last failure on this thread: the innermost messages of its error
// stack, e.g. "unable to open file: file signature not found". Clears the stack.
std::string last_error();

// Throws Error("[<op>] <path>: <what>: <last_error()>").
[[noreturn]] void fail(const std::string& op, const std::string& path, const std::string& what);

// Checked wrappers: each throws through fail() when HDF5 returns an invalid id or a negative
// status, naming `what`.
Handle check_id(hid_t id, Handle::Closer close, const std::string& op, const std::string& path,
                const std::string& what);
void check_status(herr_t status, const std::string& op, const std::string& path,
                  const std::string& what);

// Whether `path` names an existing link in `file`, checking each parent group in turn (H5Lexists
// on "/a/b" fails when "/a" is missing).
bool path_exists(hid_t file, const std::string& path);

// An extendible dataset of `element` type with dimensions dims (dims[0] grows), chunked by
// chunk (chunk[0] frames), deflate at `deflate` (0: none). Parent groups are created.
Handle create_extendible(hid_t file, const std::string& path, hid_t element,
                         const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk,
                         int deflate, const std::string& op, const std::string& file_path);

// Grows dimension 0 of `dataset` by `rows` and writes `data` (rows x the other dimensions, of
// memory type `element`) into the new rows.
void append_rows(hid_t dataset, hid_t element, hsize_t rows, const void* data, const std::string& op,
                 const std::string& file_path);

// A fixed-length string attribute or an int64 attribute on an object.
void write_string_attribute(hid_t object, const std::string& name, const std::string& value,
                            const std::string& op, const std::string& file_path);
void write_int_attribute(hid_t object, const std::string& name, int64_t value,
                         const std::string& op, const std::string& file_path);

}  // namespace mixprec::stream::hdf5
