#pragma once
// Reading and writing HDF5 in the tests with libhdf5's own C API, independently of the code
// under test (which wraps the same library, but none of these helpers).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace mixprec::stream::test {

// A fresh directory under the system's temporary directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("mixprec_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(path),
                                                  std::filesystem::directory_iterator()));
  }
};

struct RawDataset {
  std::vector<hsize_t> dims;
  H5T_class_t type_class = H5T_NO_CLASS;
  std::size_t type_size = 0;
  bool is_signed = false;
  std::vector<double> values;  // every element, read as double
};

// The whole dataset `path` of `file`, or a test failure.
inline RawDataset read_raw(const std::string& file, const std::string& path) {
  RawDataset out;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  if (f < 0) return out;
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << path;
  if (d >= 0) {
    const hid_t type = H5Dget_type(d);
    out.type_class = H5Tget_class(type);
    out.type_size = H5Tget_size(type);
    out.is_signed = out.type_class == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_2;
    H5Tclose(type);
    const hid_t space = H5Dget_space(d);
    out.dims.resize(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)));
    H5Sget_simple_extent_dims(space, out.dims.data(), nullptr);
    H5Sclose(space);
    hsize_t n = 1;
    for (hsize_t v : out.dims) n *= v;
    out.values.resize(n);
    if (n > 0) {
      EXPECT_GE(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data()), 0);
    }
    H5Dclose(d);
  }
  H5Fclose(f);
  return out;
}

// Writes `values` (as double in memory) into a new dataset of `file_type` and shape `dims`,
// creating the file when `create`.
inline void write_raw(const std::string& file, const std::string& path, hid_t file_type,
                      const std::vector<hsize_t>& dims, const std::vector<double>& values,
                      bool create = true) {
  const hid_t f = create ? H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                         : H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t links = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(links, 1);
  const hid_t d = H5Dcreate2(f, path.c_str(), file_type, space, links, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (!values.empty()) {
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  H5Dclose(d);
  H5Pclose(links);
  H5Sclose(space);
  H5Fclose(f);
}

}  // namespace mixprec::stream::test
