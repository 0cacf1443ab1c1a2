// Read a list of CPU torch tensors' sizes, byte strides and data pointers in one call.
//
// The Python route (dyntile/cpu/pad.pyx: describe_tensors) pays torch's binding for
// every attribute of every sample (t.dtype, t.shape, t.stride(), t.data_ptr(): about
// 65 ns each, which is most of a collate of 64 short token rows); here each tensor is
// read from its TensorImpl directly (a few ns). Built only when torch is importable at
// build time (setup.py), against that torch's headers: the module records the torch
// version it was built for, and dyntile/tensor_reader.py loads it only under that
// version, else it keeps the Python route. It accepts plain dense CPU tensors alone
// (exactly torch.Tensor or Parameter, one type per batch, a plain TensorImpl,
// strided, no conj/neg or zero-tensor bit, memory behind every element) and answers
// "refused at sample i" for anything else, so the Python route still decides and
// explains every other case.
#include <Python.h>

#include <cstdint>
#include <exception>
#include <typeinfo>

#include <c10/core/Layout.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/python_variable.h>

#ifndef DYNTILE_TORCH_VERSION
#error "setup.py defines DYNTILE_TORCH_VERSION (the torch version this module is built against)"
#endif

namespace {

struct Buffer {
  Py_buffer view{};
  bool held = false;
  ~Buffer() {
    if (held) PyBuffer_Release(&view);
  }
  // a writable, C-contiguous int64 buffer of at least `count` items
  bool take(PyObject* obj, Py_ssize_t count, const char* name) {
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return false;
    held = true;
    if (view.itemsize != 8 || view.len < count * 8) {
      PyErr_Format(PyExc_ValueError, "%s should hold at least %zd 8-byte integers, but holds %zd bytes", name,
                   count, view.len);
      return false;
    }
    return true;
  }
  int64_t* data() const { return static_cast<int64_t*>(view.buf); }
};

// true for a tensor whose memory the pad kernels may read as is: a plain dense CPU tensor
bool plain_cpu(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return typeid(*impl) == typeid(c10::TensorImpl) && !impl->is_python_dispatch() &&
         !impl->key_set().has(c10::DispatchKey::ZeroTensor) &&  // efficient zeros: no memory behind them
         !impl->has_symbolic_sizes_strides() && impl->device_type() == c10::DeviceType::CPU &&
         impl->layout() == c10::kStrided && !impl->is_conj() && !impl->is_neg() && impl->has_storage() &&
         !c10::isComplexType(t.scalar_type());
}

// describe(samples, ndim, shapes, strides, ptrs, maxes) -> (refused, elements)
PyObject* describe(PyObject*, PyObject* args) {
  PyObject* samples;
  Py_ssize_t nd;
  PyObject *shapes_obj, *strides_obj, *ptrs_obj, *maxes_obj;
  if (!PyArg_ParseTuple(args, "O!nOOOO", &PyList_Type, &samples, &nd, &shapes_obj, &strides_obj, &ptrs_obj,
                        &maxes_obj))
    return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(samples);
  if (nd < 0) {
    PyErr_Format(PyExc_ValueError, "ndim should be >= 0, but got %zd", nd);
    return nullptr;
  }
  Buffer shapes, strides, ptrs, maxes;
  if (!shapes.take(shapes_obj, n * nd, "shapes") || !strides.take(strides_obj, n * nd, "strides") ||
      !ptrs.take(ptrs_obj, n, "ptrs") || !maxes.take(maxes_obj, nd, "maxes"))
    return nullptr;
  int64_t* sh = shapes.data();
  int64_t* st = strides.data();
  int64_t* pt = ptrs.data();
  int64_t* mx = maxes.data();
  for (Py_ssize_t k = 0; k < nd; k++) mx[k] = 0;
  Py_ssize_t refused = -1;
  int64_t elements = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* obj = PyList_GET_ITEM(samples, i);
    // exactly torch.Tensor or Parameter, one of them for the whole batch (as the Python
    // route checks types); subclasses may redefine anything: the Python route decides
    if (!THPVariable_CheckExact(obj) || Py_TYPE(obj) != Py_TYPE(PyList_GET_ITEM(samples, 0))) {
      refused = i;
      break;
    }
    try {
      const at::Tensor& t = THPVariable_Unpack(obj);
      if (!plain_cpu(t) || t.dim() != nd || (i > 0 && t.scalar_type() != dtype)) {
        refused = i;
        break;
      }
      dtype = t.scalar_type();
      const int64_t width = static_cast<int64_t>(t.element_size());
      const auto sizes = t.sizes();
      const auto steps = t.strides();
      int64_t count = 1;
      for (Py_ssize_t k = 0; k < nd; k++) {
        sh[i * nd + k] = sizes[k];
        st[i * nd + k] = steps[k] * width;
        if (sizes[k] > mx[k]) mx[k] = sizes[k];
        count *= sizes[k];
      }
      pt[i] = reinterpret_cast<int64_t>(t.const_data_ptr());
      if (pt[i] == 0 && count != 0) {  // no memory behind the elements (e.g. a storage resized to 0)
        refused = i;
        break;
      }
      elements += count;
    } catch (const std::exception&) {  // c10::Error from an unusual tensor: refuse it, never raise
      refused = i;
      break;
    }
  }
  return Py_BuildValue("nL", refused, static_cast<long long>(elements));
}

PyMethodDef methods[] = {
    {"describe", describe, METH_VARARGS,
     "describe(samples, ndim, shapes, strides, ptrs, maxes) -> (refused, elements)\n\n"
     "Fill int64 buffers for a list of B CPU tensors of rank ndim: shapes and byte strides (B*ndim),\n"
     "data pointers (B) and per-axis maxima (ndim). refused is -1 when every sample is a plain dense\n"
     "CPU tensor of that rank and of the first sample's dtype (not complex), else the index of the\n"
     "first that is not (the buffers then hold nothing to use); elements counts their items."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_tensors",
                      "Native reader of CPU torch tensors' sizes, strides and pointers.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_torch_tensors(void) {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddStringConstant(m, "built_for", DYNTILE_TORCH_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
