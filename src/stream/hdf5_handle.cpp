#include "hdf5_handle.h"

#include "mixprec/core/error.h"

namespace mixprec::stream::hdf5 {
namespace {

herr_t collect(unsigned n, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  std::string text = e->desc ? e->desc : "";
  char minor[256] = {0};
  if (H5Eget_msg(e->min_num, nullptr, minor, sizeof minor) > 0 && text.find(minor) == std::string::npos)
    text += text.empty() ? std::string(minor) : " (" + std::string(minor) + ")";
  out->push_back(std::move(text));
  (void)n;
  return 0;
}

}  // namespace

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string last_error() {
  std::vector<std::string> messages;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "unknown HDF5 error";
  // The outermost says what failed, the innermost why; the ones between repeat them.
  if (messages.size() == 1) return messages.front();
  return messages.front() + ": " + messages.back();
}

void fail(const std::string& op, const std::string& path, const std::string& what) {
  throw Error("[" + op + "] " + path + ": " + what + ": " + last_error());
}

Handle check_id(hid_t id, Handle::Closer close, const std::string& op, const std::string& path,
                const std::string& what) {
  if (id < 0) fail(op, path, what);
  return Handle(id, close);
}

void check_status(herr_t status, const std::string& op, const std::string& path,
                  const std::string& what) {
  if (status < 0) fail(op, path, what);
}

bool path_exists(hid_t file, const std::string& path) {
  if (path.empty() || path[0] != '/') return false;
  std::size_t at = 1;
  while (at <= path.size()) {
    std::size_t next = path.find('/', at);
    if (next == std::string::npos) next = path.size();
    const std::string prefix = path.substr(0, next);
    if (next > at && H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    at = next + 1;
  }
  return true;
}

Handle create_extendible(hid_t file, const std::string& path, hid_t element,
                         const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk,
                         int deflate, const std::string& op, const std::string& file_path) {
  std::vector<hsize_t> max_dims = dims;
  max_dims[0] = H5S_UNLIMITED;
  Handle space = check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data()),
                          H5Sclose, op, file_path, "cannot make the dataspace of " + path);
  Handle create = check_id(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, op, file_path, "H5Pcreate");
  check_status(H5Pset_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data()), op,
               file_path, "cannot chunk " + path);
  if (deflate > 0)
    check_status(H5Pset_deflate(create.get(), static_cast<unsigned>(deflate)), op, file_path,
                 "cannot compress " + path);
  Handle links = check_id(H5Pcreate(H5P_LINK_CREATE), H5Pclose, op, file_path, "H5Pcreate");
  check_status(H5Pset_create_intermediate_group(links.get(), 1), op, file_path, "H5Pset_create_intermediate_group");
  return check_id(H5Dcreate2(file, path.c_str(), element, space.get(), links.get(), create.get(),
                             H5P_DEFAULT),
                  H5Dclose, op, file_path, "cannot create " + path);
}

void append_rows(hid_t dataset, hid_t element, hsize_t rows, const void* data, const std::string& op,
                 const std::string& file_path) {
  if (rows == 0) return;
  Handle space = check_id(H5Dget_space(dataset), H5Sclose, op, file_path, "H5Dget_space");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1 || rank > 8) fail(op, file_path, "unexpected dataset rank");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  const hsize_t start = dims[0];
  dims[0] += rows;
  check_status(H5Dset_extent(dataset, dims.data()), op, file_path, "cannot extend a dataset");
  Handle file_space = check_id(H5Dget_space(dataset), H5Sclose, op, file_path, "H5Dget_space");
  std::vector<hsize_t> offset(static_cast<std::size_t>(rank), 0), count = dims;
  offset[0] = start;
  count[0] = rows;
  check_status(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset.data(), nullptr,
                                   count.data(), nullptr),
               op, file_path, "cannot select the new rows");
  Handle memory = check_id(H5Screate_simple(rank, count.data(), nullptr), H5Sclose, op, file_path,
                           "H5Screate_simple");
  check_status(H5Dwrite(dataset, element, memory.get(), file_space.get(), H5P_DEFAULT, data), op,
               file_path, "write failed");
}

void write_string_attribute(hid_t object, const std::string& name, const std::string& value,
                            const std::string& op, const std::string& file_path) {
  Handle type = check_id(H5Tcopy(H5T_C_S1), H5Tclose, op, file_path, "H5Tcopy");
  check_status(H5Tset_size(type.get(), value.empty() ? 1 : value.size()), op, file_path, "H5Tset_size");
  check_status(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), op, file_path, "H5Tset_strpad");
  Handle space = check_id(H5Screate(H5S_SCALAR), H5Sclose, op, file_path, "H5Screate");
  Handle attr = check_id(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         H5Aclose, op, file_path, "cannot create attribute " + name);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  check_status(H5Awrite(attr.get(), type.get(), padded.data()), op, file_path,
               "cannot write attribute " + name);
}

void write_int_attribute(hid_t object, const std::string& name, int64_t value, const std::string& op,
                         const std::string& file_path) {
  Handle space = check_id(H5Screate(H5S_SCALAR), H5Sclose, op, file_path, "H5Screate");
  Handle attr = check_id(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         H5Aclose, op, file_path, "cannot create attribute " + name);
  check_status(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), op, file_path,
               "cannot write attribute " + name);
}

}  // namespace mixprec::stream::hdf5
