// codec._codec: the C++ library to Python. Tensors arrive as nanobind
// ndarrays or a torch tensor's fields (tensors.hpp); plans and the planner
// are planning.cpp's, what runs on a device ops.cpp's. codec::CudaError
// becomes RuntimeError, every other codec::Error ValueError, a dtype the
// library does not take TypeError. The user-facing API (FlashInfer's wrapper
// shape, torch custom ops) is python/codec; this layer keeps no policy: the
// planner's setup is the library's (make_planner_setup). A build without the
// CUDA engine has the same entry points, which say so when asked for CUDA.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings/plans.hpp"
#include "codec/core/error.hpp"
#include "codec/engine/cuda_engine.hpp"

namespace nb = nanobind;

NB_MODULE(_codec, m) {
  using namespace codec;
  m.doc() = "CoDec's C++ core; the API is the codec package.";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const CudaError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.attr("has_cuda") = bool(CODEC_HAS_CUDA);
  m.def("cuda_device_count", &cuda_device_count);
  m.def("cuda_device_name", &cuda_device_name, nb::arg("device"));
  m.def("cuda_built_architectures", [] { return std::string(cuda_built_architectures()); });
  bindings::bind_planning(m);
  bindings::bind_ops(m);
}
