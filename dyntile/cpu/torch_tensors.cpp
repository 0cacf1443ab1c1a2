// The native bridge to torch: read a list of CPU torch tensors' sizes, byte strides and
// data pointers in one call (describe), and pad 1-D rows straight into new torch tensors
// (pad_rows, with the columns of a batch of dicts: dict_columns), the collate's hot case.
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

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <typeinfo>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/core/Layout.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/python_variable.h>

#include "pylong_read.h"

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

// ---- pad_rows: B 1-D rows (exact lists of exact ints, or plain 1-D CPU tensors of one
// dtype) -> new torch tensors, the batch, its lengths and its mask, in one call.

template <typename T>
void fill_elems(char* dst, int64_t n, uint64_t bits) {
  if (bits == 0) {
    std::memset(dst, 0, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  T* p = reinterpret_cast<T*>(dst);
  const T v = static_cast<T>(bits);
  for (int64_t j = 0; j < n; j++) p[j] = v;
}

void fill_width(char* dst, int64_t n, uint64_t bits, int64_t width) {
  switch (width) {
    case 1: fill_elems<uint8_t>(dst, n, bits); break;
    case 2: fill_elems<uint16_t>(dst, n, bits); break;
    case 4: fill_elems<uint32_t>(dst, n, bits); break;
    default: fill_elems<uint64_t>(dst, n, bits); break;
  }
}

template <typename T>
void copy_strided(char* dst, const char* src, int64_t n, int64_t stride) {
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t j = 0; j < n; j++) std::memcpy(d + j, src + j * stride, sizeof(T));
}

void copy_row(char* dst, const char* src, int64_t n, int64_t stride, int64_t width) {
  if (stride == width || n <= 1) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n * width));
    return;
  }
  switch (width) {
    case 1: copy_strided<uint8_t>(dst, src, n, stride); break;
    case 2: copy_strided<uint16_t>(dst, src, n, stride); break;
    case 4: copy_strided<uint32_t>(dst, src, n, stride); break;
    default: copy_strided<uint64_t>(dst, src, n, stride); break;
  }
}

// what pass 1 of pad_rows learnt of each row
struct Rows {
  std::vector<int64_t> lens;
  std::vector<const char*> ptrs;    // tensors: data pointers
  std::vector<int64_t> steps;       // tensors: byte strides
  int64_t longest = 0, total = 0, width = 8;
  c10::ScalarType dtype = c10::ScalarType::Long;
};

// pass 1 over exact lists: their lengths (the ints are checked while copied)
bool read_lists(PyObject* column, Rows& rows) {
  const Py_ssize_t n = PyList_GET_SIZE(column);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* row = PyList_GET_ITEM(column, i);
    if (!PyList_CheckExact(row)) return false;
    rows.lens[i] = PyList_GET_SIZE(row);
  }
  return true;
}

// pass 1 over tensors: every one a plain dense 1-D CPU tensor of sample 0's type and dtype
bool read_tensors(PyObject* column, Rows& rows) {
  const Py_ssize_t n = PyList_GET_SIZE(column);
  PyTypeObject* type = Py_TYPE(PyList_GET_ITEM(column, 0));
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* obj = PyList_GET_ITEM(column, i);
    if (!THPVariable_CheckExact(obj) || Py_TYPE(obj) != type) return false;
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!plain_cpu(t) || t.dim() != 1 || (i > 0 && t.scalar_type() != rows.dtype)) return false;
    if (i == 0) {
      rows.dtype = t.scalar_type();
      rows.width = static_cast<int64_t>(t.element_size());
      if (rows.width != 1 && rows.width != 2 && rows.width != 4 && rows.width != 8) return false;
    }
    rows.lens[i] = t.sizes()[0];
    rows.steps[i] = t.strides()[0] * rows.width;
    rows.ptrs[i] = static_cast<const char*>(t.const_data_ptr());
    if (rows.ptrs[i] == nullptr && rows.lens[i] != 0) return false;
  }
  return true;
}

// the padded length: longest rounded up to `multiple`, or the smallest of the ascending
// `bounds` >= it; -1 when it is over the last bound (the caller's plan decides)
int64_t padded_length(int64_t longest, int64_t multiple, const int64_t* bounds, Py_ssize_t nbounds) {
  if (nbounds == 0) {
    const int64_t r = longest % multiple;
    if (r == 0) return longest;
    return longest > INT64_MAX - (multiple - r) ? -1 : longest + (multiple - r);
  }
  const int64_t* hit = std::lower_bound(bounds, bounds + nbounds, longest);
  return hit == bounds + nbounds ? -1 : *hit;
}

// pad_rows(column, multiple, bounds, fill_bits, left, want, max_bytes)
//   -> None | (batch, lengths | None, mask | None, longest, total)
PyObject* pad_rows(PyObject*, PyObject* args) {
  PyObject *column, *bounds_obj;
  long long multiple, max_bytes;
  unsigned long long bits;
  int left, want;
  if (!PyArg_ParseTuple(args, "O!LOKpiL", &PyList_Type, &column, &multiple, &bounds_obj, &bits, &left, &want,
                        &max_bytes))
    return nullptr;
  if (multiple < 1) {
    PyErr_Format(PyExc_ValueError, "multiple should be >= 1, but got %lld", multiple);
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(column);
  Buffer bounds;
  Py_ssize_t nbounds = 0;
  if (bounds_obj != Py_None) {
    if (PyObject_GetBuffer(bounds_obj, &bounds.view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return nullptr;
    bounds.held = true;
    if (bounds.view.itemsize != 8 || bounds.view.len == 0) {
      PyErr_SetString(PyExc_ValueError, "bounds should be a non-empty buffer of int64 boundaries, ascending");
      return nullptr;
    }
    nbounds = bounds.view.len / 8;
  }
  if (n == 0) Py_RETURN_NONE;
  try {
    Rows rows;
    rows.lens.resize(n);
    const bool lists = PyList_CheckExact(PyList_GET_ITEM(column, 0));
    if (!lists) {
      rows.ptrs.resize(n);
      rows.steps.resize(n);
    }
    if (!(lists ? read_lists(column, rows) : read_tensors(column, rows))) Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < n; i++) {
      rows.longest = std::max(rows.longest, rows.lens[i]);
      rows.total += rows.lens[i];
    }
    const int64_t T = padded_length(rows.longest, multiple, bounds.data(), nbounds);
    if (T < 0 || T > (max_bytes / rows.width) / n) Py_RETURN_NONE;   // over the plan, or a copy for threads
    const auto opts = at::TensorOptions().device(at::kCPU);
    at::Tensor batch = at::empty({n, T}, opts.dtype(rows.dtype));
    char* dst = static_cast<char*>(batch.data_ptr());
    const int64_t w = rows.width;
    // No Python code runs from pass 1 to here (no Python object is made), so the lists
    // and tensors read above are unchanged.
    for (Py_ssize_t i = 0; i < n; i++, dst += T * w) {
      const int64_t m = rows.lens[i];
      const int64_t lo = left ? T - m : 0;
      fill_width(dst, lo, bits, w);
      fill_width(dst + (lo + m) * w, T - lo - m, bits, w);
      if (lists) {
        PyObject* const* items = dt_list_items(PyList_GET_ITEM(column, i));
        if (dt_read_int_items(items, m, reinterpret_cast<int64_t*>(dst) + lo) != m) Py_RETURN_NONE;
      } else {
        copy_row(dst + lo * w, rows.ptrs[i], m, rows.steps[i], w);
      }
    }
    at::Tensor lengths, mask;
    if (want & 1) {
      lengths = at::empty({n}, opts.dtype(at::kLong));
      std::memcpy(lengths.data_ptr(), rows.lens.data(), static_cast<size_t>(n) * 8);
    }
    if (want & 2) {
      mask = at::empty({n, T}, opts.dtype(at::kBool));
      char* p = static_cast<char*>(mask.data_ptr());
      for (Py_ssize_t i = 0; i < n; i++, p += T) {
        const int64_t m = rows.lens[i];
        std::memset(p, left ? 0 : 1, static_cast<size_t>(left ? T - m : m));
        std::memset(p + (left ? T - m : m), left ? 1 : 0, static_cast<size_t>(left ? m : T - m));
      }
    }
    auto wrap = [](at::Tensor& t) -> PyObject* {
      if (!t.defined()) Py_RETURN_NONE;
      return THPVariable_Wrap(std::move(t));
    };
    PyObject* result = PyTuple_New(5);
    if (result == nullptr) return nullptr;
    PyTuple_SET_ITEM(result, 0, wrap(batch));
    PyTuple_SET_ITEM(result, 1, wrap(lengths));
    PyTuple_SET_ITEM(result, 2, wrap(mask));
    PyTuple_SET_ITEM(result, 3, PyLong_FromLongLong(rows.longest));
    PyTuple_SET_ITEM(result, 4, PyLong_FromLongLong(rows.total));
    for (Py_ssize_t k = 0; k < 5; k++) {
      if (PyTuple_GET_ITEM(result, k) == nullptr) {
        Py_DECREF(result);
        return nullptr;
      }
    }
    return result;
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  } catch (const std::exception&) {  // c10::Error from an unusual tensor: refuse it, never raise
    Py_RETURN_NONE;
  }
}

// ---- dict_columns: a batch of exact dicts with one key set -> (keys, one list per key)

// dict_columns(samples) -> None | (keys, columns)
PyObject* dict_columns(PyObject*, PyObject* args) {
  PyObject* samples;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &samples)) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(samples);
  if (n == 0 || !PyDict_CheckExact(PyList_GET_ITEM(samples, 0))) Py_RETURN_NONE;
  PyObject* keys = PyDict_Keys(PyList_GET_ITEM(samples, 0));
  if (keys == nullptr) return nullptr;
  const Py_ssize_t nk = PyList_GET_SIZE(keys);
  PyObject* columns = PyList_New(nk);
  if (columns == nullptr) {
    Py_DECREF(keys);
    return nullptr;
  }
  bool ok = true;
  for (Py_ssize_t j = 0; j < nk && ok; j++) {
    PyObject* col = PyList_New(n);
    if (col == nullptr) ok = false;
    else PyList_SET_ITEM(columns, j, col);
  }
  // A key's __eq__ may run Python code (on a hash collision), so the batch list is read
  // afresh at each sample and each dict is held while it is read.
  for (Py_ssize_t i = 0; i < n && ok; i++) {
    if (i >= PyList_GET_SIZE(samples)) {
      ok = false;
      break;
    }
    PyObject* d = PyList_GET_ITEM(samples, i);
    if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != nk) {
      ok = false;
      break;
    }
    Py_INCREF(d);
    for (Py_ssize_t j = 0; j < nk; j++) {
      PyObject* v = PyDict_GetItemWithError(d, PyList_GET_ITEM(keys, j));
      if (v == nullptr) {                 // a missing key (or an error): the caller's route names it
        PyErr_Clear();
        ok = false;
        break;
      }
      Py_INCREF(v);
      PyList_SET_ITEM(PyList_GET_ITEM(columns, j), i, v);
    }
    Py_DECREF(d);
  }
  if (!ok) {
    Py_DECREF(keys);
    Py_DECREF(columns);
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NONE;
  }
  return Py_BuildValue("NN", keys, columns);
}

PyMethodDef methods[] = {
    {"describe", describe, METH_VARARGS,
     "describe(samples, ndim, shapes, strides, ptrs, maxes) -> (refused, elements)\n\n"
     "Fill int64 buffers for a list of B CPU tensors of rank ndim: shapes and byte strides (B*ndim),\n"
     "data pointers (B) and per-axis maxima (ndim). refused is -1 when every sample is a plain dense\n"
     "CPU tensor of that rank and of the first sample's dtype (not complex), else the index of the\n"
     "first that is not (the buffers then hold nothing to use); elements counts their items."},
    {"pad_rows", pad_rows, METH_VARARGS,
     "pad_rows(column, multiple, bounds, fill_bits, left, want, max_bytes)\n"
     "    -> None | (batch, lengths | None, mask | None, longest, total)\n\n"
     "Pad B 1-D rows (exact lists of exact ints -> int64, or plain dense 1-D CPU tensors of one dtype)\n"
     "into a new (B, T) tensor, T the longest rounded up to multiple, or the smallest of the int64\n"
     "bounds (ascending) >= it when bounds is not None; pad elements hold fill_bits (the fill's bit\n"
     "pattern in the batch's dtype), on the left when left. want: 1 adds the int64 (B,) lengths,\n"
     "2 the bool (B, T) mask (true on the data). None, with nothing raised, for anything else: another\n"
     "row type, an element that is not an exact int in int64, a longest row over the last bound, or a\n"
     "batch over max_bytes."},
    {"dict_columns", dict_columns, METH_VARARGS,
     "dict_columns(samples) -> None | (keys, columns)\n\n"
     "For a list of exact dicts with sample 0's key set: its keys (in its order) and per key the list of\n"
     "the B values; None for anything else (a missing or extra key, another mapping type)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_tensors",
                      "Native bridge to torch: reads CPU tensors' sizes, strides and pointers; pads 1-D rows into new tensors.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_torch_tensors(void) {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddStringConstant(m, "built_for", DYNTILE_TORCH_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
