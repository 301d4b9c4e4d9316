#pragma once
// Shared pieces of the _mixprec extension module (the Python package `mixprec`, docs/PYTHON.md).
// The bindings are thin: every check that the C++ API makes itself is left to it, and its
// mixprec::Error reaches Python as mixprec.Error with the same message.
#include <nanobind/nanobind.h>

#include <string>

#include "mixprec/core/dtype.h"
#include "mixprec/core/tensor.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::python {

namespace nb = nanobind;

// A dtype argument as Python spells it: a mixprec.DType member or a name ("f32", "bfloat16",
// ...; parse_dtype's names). Anything else raises TypeError.
DType dtype_arg(nb::handle value);

// "nearest" or "stochastic": how an optimizer rounds f32 master weights into 16-bit parameters.
optim::Rounding rounding_arg(const std::string& name);

// numpy's __array_interface__ type string for a dtype ("<f4", ...); bf16 is "<u2", the raw
// bits, which the Python layer reinterprets as ml_dtypes.bfloat16 when that is installed.
const char* array_typestr(DType dtype);

// Zero-copy import of any object that exports a writable buffer (numpy arrays, memoryview,
// array.array); `as` reinterprets the elements (uint16 bits as bf16, or f16). The tensor holds
// the buffer, and so its exporter, until the last view of it is gone.
Tensor tensor_from_buffer(nb::handle object, nb::handle as);

// DLPack (legacy "dltensor" capsules, CPU only): export without copy, keeping the tensor
// alive through the capsule's deleter, and import of an object with __dlpack__ or of a capsule.
nb::object to_dlpack(const Tensor& tensor);
Tensor tensor_from_dlpack(nb::handle object);

void bind_tensor(nb::module_& m);
void bind_interop(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_modes(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_nn(nb::module_& m);
void bind_video(nb::module_& m);
void bind_gpt(nb::module_& m);
void bind_stream(nb::module_& m);
void bind_graph(nb::module_& m);

}  // namespace mixprec::python
