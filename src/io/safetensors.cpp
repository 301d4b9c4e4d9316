// SafetensorsFile: the memory-mapped reader on top of parse_safetensors_header.
#include "mixprec/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mixprec/core/error.h"
#include "mixprec/io/json.h"

namespace mixprec::io {
namespace {

[[noreturn]] void fail_errno(const std::string& path, const char* what, int err) {
  throw Error(detail::concat("[safetensors] ", path, ": ", what, ": ", std::strerror(err)));
}

// Closes a descriptor on every path out of open(); the mapping outlives it.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.label_ = path;
  const FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail_errno(path, "cannot open", errno);
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) fail_errno(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) throw Error("[safetensors] " + path + ": not a regular file");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > 0) {  // mmap refuses length 0; the parser reports the empty file
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (map == MAP_FAILED) fail_errno(path, "cannot map", errno);
    file.map_ = map;
    file.map_size_ = size;
    file.image_ = {static_cast<const std::byte*>(map), size};
  }
  // From here a throw unmaps through ~SafetensorsFile.
  file.header_ = parse_safetensors_header(file.image_, path);
  file.index_names();
  return file;
}

SafetensorsFile SafetensorsFile::from_bytes(std::span<const std::byte> image, std::string label) {
  SafetensorsFile file;
  file.label_ = std::move(label);
  file.image_ = image;
  file.header_ = parse_safetensors_header(image, file.label_);
  file.index_names();
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    label_ = std::move(other.label_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    image_ = std::exchange(other.image_, {});
    header_ = std::move(other.header_);
    index_ = std::move(other.index_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
  image_ = {};
}

void SafetensorsFile::index_names() {
  for (std::size_t i = 0; i < header_.tensors.size(); ++i)
    index_.emplace(header_.tensors[i].name, i);  // names are unique: the parser checked
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.tensors.size());
  for (const TensorInfo& t : header_.tensors) out.push_back(t.name);
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return index_.find(name) != index_.end();
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    throw Error(detail::concat("[safetensors] ", label_, ": no tensor named ",
                               json_quote_short(name), " (the file has ", header_.tensors.size(),
                               ")"));
  return header_.tensors[it->second];
}

std::span<const std::byte> SafetensorsFile::data(std::string_view name) const {
  return data(info(name));
}

std::span<const std::byte> SafetensorsFile::data(const TensorInfo& t) const {
  // The parser proved begin <= end <= data_bytes and data_offset + data_bytes == file size.
  MIXPREC_ASSERT(t.begin <= t.end && t.end <= header_.data_bytes);
  return image_.subspan(static_cast<std::size_t>(header_.data_offset + t.begin),
                        static_cast<std::size_t>(t.nbytes()));
}

Tensor SafetensorsFile::tensor(std::string_view name) const { return tensor(info(name)); }

Tensor SafetensorsFile::tensor(const TensorInfo& t) const {
  if (!t.dtype)
    throw Error(detail::concat("[safetensors] ", label_, ": tensor ", json_quote_short(t.name),
                               " has dtype ", t.dtype_name,
                               ", which mixprec has no element type for"));
  const std::span<const std::byte> bytes = data(t);
  if (*t.dtype == DType::Bool) {
    // A bool object holding anything but 0 or 1 is undefined behaviour in C++.
    for (std::size_t i = 0; i < bytes.size(); ++i)
      if (static_cast<uint8_t>(bytes[i]) > 1)
        throw Error(detail::concat("[safetensors] ", label_, ": tensor ", json_quote_short(t.name),
                                   ": BOOL element ", i, " is ", static_cast<int>(bytes[i]),
                                   ", not 0 or 1"));
  }
  return Tensor::from_buffer(bytes.data(), t.shape, *t.dtype);
}

NamedTensors load_safetensors(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  NamedTensors out;
  out.reserve(file.size());
  for (const TensorInfo& t : file.tensors()) out.emplace_back(t.name, file.tensor(t));
  return out;
}

}  // namespace mixprec::io
