// Zero-copy interop: the buffer protocol in (numpy arrays and friends) and DLPack both ways.
// The rule in both directions: memory is never copied, and whoever owns it is kept alive by the
// other side (docs/PYTHON.md, "Zero-copy rules and ownership").
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"

namespace mixprec::python {
namespace {

// While the interpreter is shutting down, taking the GIL from another thread can hang; memory
// still borrowed then is left to the process exit instead.
bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// One exported Py_buffer. The last tensor on the storage may die on any thread (a kernel thread,
// a thread that released the GIL), so the release takes the GIL itself.
struct BufferOwner {
  Py_buffer view{};
  bool held = false;
  BufferOwner() = default;
  BufferOwner(const BufferOwner&) = delete;
  BufferOwner& operator=(const BufferOwner&) = delete;
  ~BufferOwner() {
    if (!held || !python_alive()) return;
    const PyGILState_STATE state = PyGILState_Ensure();
    PyBuffer_Release(&view);
    PyGILState_Release(state);
  }
};

// The dtype a buffer format string names, into `out`; false when mixprec has none. uint16 ('H')
// sets `raw_u16` instead: it is usable only as the bits of bf16 or f16. Native and little-endian
// formats only, this being an x86-64 library.
bool dtype_of_format(const char* format, std::size_t itemsize, DType& out, bool& raw_u16) {
  raw_u16 = false;
  std::string f = format != nullptr ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
  if (f.size() != 1) return false;
  switch (f[0]) {
    case 'd':
      out = DType::F64;
      return itemsize == 8;
    case 'f':
      out = DType::F32;
      return itemsize == 4;
    case 'e':
      out = DType::F16;
      return itemsize == 2;
    case 'q':
    case 'l':
    case 'i':
      if (itemsize == 8) {
        out = DType::I64;
        return true;
      }
      if (itemsize == 4) {
        out = DType::I32;
        return true;
      }
      return false;
    case 'B':
      out = DType::U8;
      return itemsize == 1;
    case '?':
      out = DType::Bool;
      return itemsize == 1;
    case 'H':
      raw_u16 = true;
      return itemsize == 2;  // only as bf16/f16 bits
    default:
      return false;
  }
}

// ---- DLPack: the C ABI of dlpack.h (v0.8, the legacy unversioned capsule) ----
struct DlDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DlDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DlTensor {
  void* data;
  DlDevice device;
  int32_t ndim;
  DlDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; may be null for a compact row-major tensor
  uint64_t byte_offset;
};
struct DlManagedTensor {
  DlTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DlManagedTensor* self);
};
constexpr int32_t kDlCpu = 1;
enum : uint8_t { kDlInt = 0, kDlUInt = 1, kDlFloat = 2, kDlBfloat = 4, kDlBool = 6 };
constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

DlDataType dl_dtype(DType dtype) {
  const auto bits = static_cast<uint8_t>(dtype_size(dtype) * 8);
  switch (dtype) {
    case DType::F64:
    case DType::F32:
    case DType::F16:
      return {kDlFloat, bits, 1};
    case DType::BF16:
      return {kDlBfloat, bits, 1};
    case DType::I64:
    case DType::I32:
      return {kDlInt, bits, 1};
    case DType::U8:
      return {kDlUInt, bits, 1};
    case DType::Bool:
      return {kDlBool, bits, 1};
  }
  MIXPREC_ASSERT(false);
  return {};
}

bool dtype_of_dl(DlDataType t, DType& out) {
  if (t.lanes != 1) return false;
  for (std::size_t i = 0; i < kNumDTypes; ++i) {
    const DlDataType d = dl_dtype(static_cast<DType>(i));
    if (d.code == t.code && d.bits == t.bits) {
      out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

// What an exported capsule points at: the tensor (which holds its storage) and the arrays the
// DLTensor borrows.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DlManagedTensor managed{};
};

void delete_export(DlManagedTensor* self) { delete static_cast<ExportContext*>(self->manager_ctx); }

// A capsule that no consumer took frees its tensor when Python collects it.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;  // consumed: the consumer frees it
  auto* managed = static_cast<DlManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

// The producer's deleter runs when the last mixprec tensor on the memory dies, on any thread;
// producers such as numpy release Python objects in it, so it runs with the GIL held.
void release_import(DlManagedTensor* managed) {
  if (managed->deleter == nullptr || !python_alive()) return;
  const PyGILState_STATE state = PyGILState_Ensure();
  managed->deleter(managed);
  PyGILState_Release(state);
}

}  // namespace

Tensor tensor_from_buffer(nb::handle object, nb::handle as) {
  auto owner = std::make_shared<BufferOwner>();
  // Strides and format always; writability is checked below so that a read-only buffer gets a
  // message of its own instead of the exporter's generic one.
  if (PyObject_GetBuffer(object.ptr(), &owner->view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    throw nb::type_error(("[from_numpy] expected an object with the buffer protocol (a numpy "
                          "array, memoryview, ...), got " +
                          std::string(nb::type_name(object.type()).c_str()))
                             .c_str());
  }
  owner->held = true;
  const Py_buffer& v = owner->view;
  if (v.readonly)
    throw nb::value_error(
        "[from_numpy] the buffer is read-only, and a mixprec tensor is a writable view of the "
        "same memory: pass a writable array, or a copy (numpy.array(a))");
  DType native = DType::U8;
  bool raw_u16 = false;
  const std::string format = v.format != nullptr ? v.format : "B";  // null means bytes
  if (!dtype_of_format(v.format, static_cast<std::size_t>(v.itemsize), native, raw_u16))
    throw nb::type_error(("[from_numpy] unsupported element format '" + format + "' (itemsize " +
                          std::to_string(v.itemsize) +
                          "): mixprec takes float64/32/16, int64/32, uint8, bool, and uint16 as "
                          "the bits of bf16 or f16 (dtype='bf16')")
                             .c_str());
  DType dtype = native;
  if (!as.is_none()) {
    const DType want = dtype_arg(as);
    const bool reinterpret_bits = raw_u16 && (want == DType::BF16 || want == DType::F16);
    if (!reinterpret_bits && !(want == native && !raw_u16))
      throw nb::type_error(("[from_numpy] cannot view '" + format + "' elements as " +
                            std::string(dtype_name(want)) +
                            " without a copy: only uint16 reinterprets, as bf16 or f16 bits; "
                            "convert with Tensor.to(dtype) after the import")
                               .c_str());
    dtype = want;
  } else if (raw_u16) {
    throw nb::type_error(
        "[from_numpy] mixprec has no uint16 dtype: pass dtype='bf16' (or 'f16') to read the "
        "uint16 elements as those bit patterns");
  }
  const auto itemsize = static_cast<int64_t>(v.itemsize);
  if (reinterpret_cast<std::uintptr_t>(v.buf) % static_cast<std::uintptr_t>(itemsize) != 0)
    throw nb::value_error("[from_numpy] the buffer is not aligned to its element size");
  Shape shape(static_cast<std::size_t>(v.ndim));
  Strides strides(static_cast<std::size_t>(v.ndim));
  for (int d = 0; d < v.ndim; ++d) {
    shape[d] = v.shape[d];
    const int64_t bytes = v.strides[d];
    if (bytes < 0 || bytes % itemsize != 0)
      throw nb::value_error(("[from_numpy] dim " + std::to_string(d) + " has a byte stride of " +
                             std::to_string(bytes) +
                             ", which a mixprec tensor cannot express (strides must be "
                             "non-negative multiples of the element size): pass a copy "
                             "(numpy.ascontiguousarray(a))")
                                .c_str());
    strides[d] = bytes / itemsize;
  }
  void* data = v.buf;
  return Tensor::from_blob(data, shape, strides, dtype, std::move(owner));
}

nb::object to_dlpack(const Tensor& tensor) {
  MIXPREC_CHECK(tensor.defined(), "[__dlpack__] called on an undefined tensor");
  auto context = std::make_unique<ExportContext>();
  context->tensor = tensor;
  context->shape = tensor.shape();
  context->strides = tensor.strides();
  DlTensor& t = context->managed.dl_tensor;
  t.data = tensor.data_ptr();
  t.device = {kDlCpu, 0};
  t.ndim = static_cast<int32_t>(tensor.dim());
  t.dtype = dl_dtype(tensor.dtype());
  t.shape = context->shape.data();
  t.strides = context->strides.data();
  t.byte_offset = 0;
  context->managed.manager_ctx = context.get();
  context->managed.deleter = delete_export;
  PyObject* capsule = PyCapsule_New(&context->managed, kCapsuleName, capsule_destructor);
  if (capsule == nullptr) throw nb::python_error();
  context.release();  // owned by the capsule now, then by its consumer
  return nb::steal(capsule);
}

Tensor tensor_from_dlpack(nb::handle object) {
  nb::object capsule;
  if (PyCapsule_CheckExact(object.ptr())) {
    capsule = nb::borrow(object);
  } else if (nb::hasattr(object, "__dlpack__")) {
    if (nb::hasattr(object, "__dlpack_device__")) {
      const auto device = nb::cast<nb::tuple>(object.attr("__dlpack_device__")());
      const int device_type = nb::cast<int>(device[0]);
      if (device_type != kDlCpu)
        throw nb::value_error(("[from_dlpack] the tensor lives on DLPack device type " +
                               std::to_string(device_type) +
                               "; mixprec tensors live in CPU memory (device type 1): move it "
                               "to the CPU first")
                                  .c_str());
    }
    capsule = object.attr("__dlpack__")();
  } else {
    throw nb::type_error(("[from_dlpack] expected an object with __dlpack__ or a DLPack "
                          "capsule, got " +
                          std::string(nb::type_name(object.type()).c_str()))
                             .c_str());
  }
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName))
    throw nb::value_error(
        "[from_dlpack] not an unused 'dltensor' capsule (a capsule can be consumed once)");
  auto* managed = static_cast<DlManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  const DlTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDlCpu)
    throw nb::value_error(("[from_dlpack] the tensor lives on DLPack device type " +
                           std::to_string(t.device.device_type) +
                           "; mixprec tensors live in CPU memory (device type 1)")
                              .c_str());
  DType dtype = DType::F32;
  if (!dtype_of_dl(t.dtype, dtype))
    throw nb::type_error(("[from_dlpack] unsupported DLPack dtype (code " +
                          std::to_string(t.dtype.code) + ", bits " + std::to_string(t.dtype.bits) +
                          ", lanes " + std::to_string(t.dtype.lanes) + ")")
                             .c_str());
  // From here the memory is ours: the capsule is marked used so that it no longer frees it,
  // and the owner calls the producer's deleter, also if the import fails below.
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName) != 0) throw nb::python_error();
  std::shared_ptr<void> owner(managed,
                              [](void* p) { release_import(static_cast<DlManagedTensor*>(p)); });
  Shape shape(t.shape, t.shape + t.ndim);
  Strides strides(static_cast<std::size_t>(t.ndim));
  if (t.strides != nullptr) {
    std::memcpy(strides.data(), t.strides, sizeof(int64_t) * static_cast<std::size_t>(t.ndim));
  } else {
    int64_t step = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      strides[d] = step;
      step *= shape[d];
    }
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return Tensor::from_blob(data, shape, strides, dtype, std::move(owner));
}

void bind_interop(nb::module_& m) {
  m.def("from_numpy", &tensor_from_buffer, nb::arg("array"), nb::arg("dtype") = nb::none(),
        "A tensor on the memory of a writable buffer (numpy array, memoryview), without a copy. "
        "dtype='bf16' (or 'f16') reads uint16 elements as those bit patterns. The tensor keeps "
        "the array alive.");
  m.def("from_dlpack", &tensor_from_dlpack, nb::arg("obj"),
        "A tensor on the memory of a DLPack producer (an object with __dlpack__, such as a numpy "
        "array or a torch tensor, or a 'dltensor' capsule), without a copy. CPU only.");
}

}  // namespace mixprec::python
