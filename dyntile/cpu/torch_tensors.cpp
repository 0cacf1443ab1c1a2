// The native bridge to torch: read a list of CPU torch tensors' sizes, byte strides and
// data pointers in one call (describe), and pad 1-D rows straight into new torch tensors
// (pad_rows, with the columns of a batch of dicts: dict_columns), and run a collate's plan
// of a batch of flat dicts of rows and numbers (collate_dicts: the spec comes from
// loaders/collate_spec.py; this executes it and decides nothing).
//
// The Python route (dyntile/cpu/pad.pyx: describe_tensors) pays torch's binding for
// every attribute of every sample (t.dtype, t.shape, t.stride(), t.data_ptr()), which is
// most of a collate of short token rows; here each tensor is read from its TensorImpl
// directly. Built only when torch is importable at
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
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <new>
#include <typeinfo>
#include <vector>

#include <ATen/EmptyTensor.h>
#include <c10/core/Layout.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include "pylong_read.h"

#ifndef DYNTILE_TORCH_VERSION
#error "setup.py defines DYNTILE_TORCH_VERSION (the torch version this module is built against)"
#endif

// What the module offers its Python callers, as `api`: dyntile/tensor_reader.py uses a
// module of its own NATIVE_API only, so that a build left from older sources (an
// editable install after a pull) is not used rather than failing. Bump both with any
// new function or changed signature.
#define DYNTILE_NATIVE_API 4

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

// true when every element of a strided tensor lies inside its storage: a view whose
// storage was resized smaller afterwards (torch's own ops crash on it) is never read
bool within_storage(const c10::TensorImpl* impl) {
  int64_t last = impl->storage_offset();   // the last element's offset, in elements
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  for (size_t k = 0; k < sizes.size(); k++) {
    if (sizes[k] == 0) return true;          // no elements
    if (strides[k] < 0) return false;
    last += (sizes[k] - 1) * strides[k];
  }
  return last >= 0 && static_cast<uint64_t>(last + 1) * impl->itemsize() <= impl->storage().nbytes();
}

// true for a tensor whose memory the pad kernels may read as is: a plain dense CPU tensor
bool plain_cpu(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return typeid(*impl) == typeid(c10::TensorImpl) && !impl->is_python_dispatch() &&
         !impl->key_set().has(c10::DispatchKey::ZeroTensor) &&  // efficient zeros: no memory behind them
         !impl->has_symbolic_sizes_strides() && impl->device_type() == c10::DeviceType::CPU &&
         impl->layout() == c10::kStrided && !impl->is_conj() && !impl->is_neg() && impl->has_storage() &&
         !c10::isComplexType(t.scalar_type()) && within_storage(impl);
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

// Scratch memory of one call: a bump allocator over a block on the stack, spilling to the
// heap past it (a batch of 64 rows of 2 keys fits in the block). One call's small arrays cost
// no malloc (each freed small block would make the batch's large allocation consolidate
// the fastbins). Only trivially copyable types; the memory is not initialised.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* take(size_t count) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 16);
    const size_t bytes = (count * sizeof(T) + 15) & ~static_cast<size_t>(15);
    if (bytes <= sizeof(local_) - used_) {
      T* p = reinterpret_cast<T*>(local_ + used_);
      used_ += bytes;
      return p;
    }
    std::unique_ptr<char[]> block(new char[bytes]);   // operator new[]: 16-byte aligned
    heap_.push_back(std::move(block));                // (a throw here frees the block)
    return reinterpret_cast<T*>(heap_.back().get());
  }

 private:
  alignas(16) char local_[8192];
  size_t used_ = 0;
  std::vector<std::unique_ptr<char[]>> heap_;
};

// p[0:len) = c. A padded row's runs are mostly short (a few elements of padding, a mask
// row of tens of bytes): those are stored inline, in overlapping 8-byte words, where a
// memset call per run cost more than the stores.
inline void fill_bytes(char* p, unsigned char c, size_t len) {
  if (len >= 64) {
    std::memset(p, c, len);
    return;
  }
  if (len >= 8) {
    const uint64_t word = 0x0101010101010101ull * c;
    for (size_t i = 0; i + 8 <= len; i += 8) std::memcpy(p + i, &word, 8);
    std::memcpy(p + len - 8, &word, 8);   // the last word may overlap the one before
    return;
  }
  for (size_t i = 0; i < len; i++) p[i] = static_cast<char>(c);
}

template <typename T>
inline void fill_elems(char* dst, int64_t n, uint64_t bits) {
  if (n <= 0) return;   // dst may be null then (an empty tensor's data)
  if (bits == 0) {
    fill_bytes(dst, 0, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  const T v = static_cast<T>(bits);
  for (int64_t j = 0; j < n; j++) std::memcpy(dst + j * sizeof(T), &v, sizeof(T));
}

inline void fill_width(char* dst, int64_t n, uint64_t bits, int64_t width) {
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

// what pass 1 of pad_rows learnt of each row (arrays in the call's Scratch)
struct Rows {
  int64_t* lens = nullptr;
  const char** ptrs = nullptr;      // tensors: data pointers
  int64_t* steps = nullptr;         // tensors: byte strides
  int64_t longest = 0, total = 0, width = 8;
  c10::ScalarType dtype = c10::ScalarType::Long;
  bool lists = true;
  bool grad = false;                // tensors: one of them requires grad
};

// pass 1 over exact lists: their lengths (the ints are checked while copied)
bool read_lists(PyObject* const* items, Py_ssize_t n, Rows& rows) {
  for (Py_ssize_t i = 0; i < n; i++) {
    if (!PyList_CheckExact(items[i])) return false;
    rows.lens[i] = PyList_GET_SIZE(items[i]);
  }
  return true;
}

// pass 1 over tensors: every one a plain dense 1-D CPU tensor of sample 0's type and dtype
bool read_tensors(PyObject* const* items, Py_ssize_t n, Rows& rows, Scratch& scratch) {
  PyTypeObject* type = Py_TYPE(items[0]);
  rows.ptrs = scratch.take<const char*>(n);
  rows.steps = scratch.take<int64_t>(n);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* obj = items[i];
    if (!THPVariable_CheckExact(obj) || Py_TYPE(obj) != type) return false;
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!plain_cpu(t) || t.dim() != 1 || (i > 0 && t.scalar_type() != rows.dtype)) return false;
    if (i == 0) {
      rows.dtype = t.scalar_type();
      rows.width = static_cast<int64_t>(t.element_size());
      if (rows.width != 1 && rows.width != 2 && rows.width != 4 && rows.width != 8) return false;
    }
    rows.grad = rows.grad || t.requires_grad();
    rows.lens[i] = t.sizes()[0];
    rows.steps[i] = t.strides()[0] * rows.width;
    rows.ptrs[i] = static_cast<const char*>(t.const_data_ptr());
    if (rows.ptrs[i] == nullptr && rows.lens[i] != 0) return false;
  }
  return true;
}

// pass 1 over B rows (exact lists, or tensors as read_tensors takes them); false refuses them
bool read_rows(PyObject* const* items, Py_ssize_t n, Rows& rows, Scratch& scratch) {
  rows.lens = scratch.take<int64_t>(n);
  rows.lists = PyList_CheckExact(items[0]);
  if (!(rows.lists ? read_lists(items, n, rows) : read_tensors(items, n, rows, scratch))) return false;
  for (Py_ssize_t i = 0; i < n; i++) {
    rows.longest = std::max(rows.longest, rows.lens[i]);
    rows.total += rows.lens[i];
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

// How rows are padded: to a multiple or to the bounds, on which side, up to how many bytes
struct Layout {
  int64_t multiple = 1;
  Buffer bounds;
  Py_ssize_t nbounds = 0;
  bool left = false;
  int64_t max_bytes = 0;
  // parse multiple, bounds (None or int64 buffer) and max_bytes; false with an error set
  bool take(long long m, PyObject* bounds_obj, int side, long long most) {
    if (m < 1) {
      PyErr_Format(PyExc_ValueError, "multiple should be >= 1, but got %lld", m);
      return false;
    }
    multiple = m;
    left = side != 0;
    max_bytes = most;
    if (bounds_obj == Py_None) return true;
    if (PyObject_GetBuffer(bounds_obj, &bounds.view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return false;
    bounds.held = true;
    const char* f = bounds.view.format == nullptr ? "B" : bounds.view.format;
    if (*f == '<' || *f == '=' || *f == '@') f++;
    const bool int64 = bounds.view.itemsize == 8 && (f[0] == 'q' || f[0] == 'l') && f[1] == '\0';
    nbounds = int64 ? bounds.view.len / 8 : 0;
    const int64_t* b = bounds.data();
    bool ascending = nbounds > 0;
    for (Py_ssize_t i = 1; ascending && i < nbounds; i++) ascending = b[i - 1] < b[i];
    if (!ascending) {
      PyErr_SetString(PyExc_ValueError, "bounds should be a non-empty buffer of int64 boundaries, ascending");
      return false;
    }
    return true;
  }
};

// One padded leaf: the batch, and when asked its lengths and mask (undefined otherwise)
struct Padded {
  at::Tensor batch, lengths, mask;
};

// pass 2: the (B, T) batch of rows read by read_rows, each padded with fill_bits; want: 1
// lengths, 2 mask. false (nothing made) when T is over the plan or the batch over max_bytes,
// or an element of a list is not an exact int in int64. No Python object is made from pass 1
// to the end of this, so no Python code runs and the rows read in pass 1 are unchanged.
bool pad_read_rows(PyObject* const* items, Py_ssize_t n, const Rows& rows, const Layout& lay, uint64_t bits,
                   int want, Padded& out) {
  const int64_t T = padded_length(rows.longest, lay.multiple, lay.bounds.data(), lay.nbounds);
  if (T < 0 || T > (lay.max_bytes / rows.width) / n) return false;   // over the plan, or a copy for threads
  // at::detail::empty_cpu: the CPU kernel of torch.empty, without the dispatcher's trip
  // to it (every byte is written below)
  out.batch = at::detail::empty_cpu({n, T}, rows.dtype);
  char* dst = static_cast<char*>(out.batch.data_ptr());
  const int64_t w = rows.width;
  const bool left = lay.left;
  for (Py_ssize_t i = 0; i < n; i++, dst += T * w) {
    const int64_t m = rows.lens[i];
    const int64_t lo = left ? T - m : 0;
    fill_width(dst, lo, bits, w);
    fill_width(dst + (lo + m) * w, T - lo - m, bits, w);
    if (rows.lists) {
      int64_t* row = reinterpret_cast<int64_t*>(dst) + lo;
      if (dt_read_int_items(dt_list_items(items[i]), m, row) != m) return false;
    } else {
      copy_row(dst + lo * w, rows.ptrs[i], m, rows.steps[i], w);
    }
  }
  if (want & 1) {
    out.lengths = at::detail::empty_cpu({n}, at::kLong);
    std::memcpy(out.lengths.data_ptr(), rows.lens, static_cast<size_t>(n) * 8);
  }
  if (want & 2) {
    out.mask = at::detail::empty_cpu({n, T}, at::kBool);
    char* p = static_cast<char*>(out.mask.data_ptr());
    for (Py_ssize_t i = 0; T > 0 && i < n; i++, p += T) {   // T == 0: no data pointer to write to
      const int64_t m = rows.lens[i];
      fill_bytes(p, left ? 0 : 1, static_cast<size_t>(left ? T - m : m));
      fill_bytes(p + (left ? T - m : m), left ? 1 : 0, static_cast<size_t>(left ? m : T - m));
    }
  }
  return true;
}

// a new reference to t's Python tensor, or to None when t is undefined
PyObject* wrap(at::Tensor& t) {
  if (!t.defined()) Py_RETURN_NONE;
  return THPVariable_Wrap(std::move(t));
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
  Layout lay;
  if (!lay.take(multiple, bounds_obj, left, max_bytes)) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(column);
  if (n == 0) Py_RETURN_NONE;
  PyObject* const* items = dt_list_items(column);
  try {
    Scratch scratch;
    Rows rows;
    Padded out;
    if (!read_rows(items, n, rows, scratch) || !pad_read_rows(items, n, rows, lay, bits, want, out))
      Py_RETURN_NONE;
    return Py_BuildValue("NNNLL", wrap(out.batch), wrap(out.lengths), wrap(out.mask),
                         static_cast<long long>(rows.longest), static_cast<long long>(rows.total));
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
      if (v == nullptr) {   // a missing key (the caller names it), or an error raised by a key's __eq__
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

// ---- collate_dicts: the whole of a collate's commonest batch, flat dicts of 1-D rows

// The values a collate stacks into a (B,) tensor: Python numbers, exact ints (int64),
// floats (float64) and bools (bool), as default_collate makes them from a batch of one
// kind; and 0-d tensors (a dataset's torch.tensor(label)), of their dtype.
enum class ScalarKind : uint8_t { none, int64, float64, boolean, tensor };

ScalarKind scalar_kind(PyObject* v) {
  if (PyLong_CheckExact(v)) return ScalarKind::int64;
  if (PyFloat_CheckExact(v)) return ScalarKind::float64;
  if (PyBool_Check(v)) return ScalarKind::boolean;
  return ScalarKind::none;
}

// out = the (B,) tensor of the B 0-d tensors items: plain CPU tensors of exactly sample
// 0's type and of `dtype`, none requiring grad (torch.stack would keep the graph); false
// (out undefined) for anything else: the Python executor decides
bool read_tensor_scalars(PyObject* const* items, Py_ssize_t n, c10::ScalarType dtype, at::Tensor& out) {
  PyTypeObject* type = Py_TYPE(items[0]);
  for (Py_ssize_t i = 0; i < n; i++) {
    if (!THPVariable_CheckExact(items[i]) || Py_TYPE(items[i]) != type) return false;
    const at::Tensor& t = THPVariable_Unpack(items[i]);
    if (!plain_cpu(t) || t.dim() != 0 || t.scalar_type() != dtype || t.requires_grad() ||
        t.const_data_ptr() == nullptr)
      return false;
  }
  at::Tensor t = at::detail::empty_cpu({n}, dtype);
  const size_t w = t.element_size();
  char* d = static_cast<char*>(t.data_ptr());
  for (Py_ssize_t i = 0; i < n; i++, d += w) std::memcpy(d, THPVariable_Unpack(items[i]).const_data_ptr(), w);
  out = std::move(t);
  return true;
}

// out = the (B,) tensor of the B numbers items, all of `kind` (an int in int64); false
// (out undefined) for a batch of mixed kinds or an int past int64: the Python executor decides
bool read_scalars(PyObject* const* items, Py_ssize_t n, ScalarKind kind, at::Tensor& out) {
  for (Py_ssize_t i = 0; i < n; i++)
    if (scalar_kind(items[i]) != kind) return false;
  const c10::ScalarType dtype = kind == ScalarKind::int64     ? at::kLong
                                : kind == ScalarKind::float64 ? at::kDouble
                                                              : at::kBool;
  at::Tensor t = at::detail::empty_cpu({n}, dtype);
  if (kind == ScalarKind::int64) {
    if (dt_read_int_items(items, n, static_cast<int64_t*>(t.data_ptr())) != n) return false;
  } else if (kind == ScalarKind::float64) {
    double* d = static_cast<double*>(t.data_ptr());
    for (Py_ssize_t i = 0; i < n; i++) d[i] = PyFloat_AS_DOUBLE(items[i]);
  } else {
    bool* d = static_cast<bool*>(t.data_ptr());
    for (Py_ssize_t i = 0; i < n; i++) d[i] = items[i] == Py_True;
  }
  out = std::move(t);
  return true;
}

// stack_numbers(items) -> None | tensor: B Python numbers of one kind (exact ints in int64,
// floats or bools) -> their (B,) int64, float64 or bool tensor, as torch.tensor(items) makes
// it, without torch.tensor's per-item parsing; None for anything else
PyObject* stack_numbers(PyObject*, PyObject* args) {
  PyObject* items;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items)) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(items);
  if (n == 0) Py_RETURN_NONE;
  const ScalarKind kind = scalar_kind(PyList_GET_ITEM(items, 0));
  at::Tensor t;
  if (kind == ScalarKind::none || !read_scalars(dt_list_items(items), n, kind, t)) Py_RETURN_NONE;
  return wrap(t);
}

// first_requiring_grad(items) -> the index of the first tensor of the list that requires
// grad, or -1 (other objects are skipped), without a trip through torch's bindings per tensor
PyObject* first_requiring_grad(PyObject*, PyObject* args) {
  PyObject* items;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items)) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(items);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* obj = PyList_GET_ITEM(items, i);
    if (THPVariable_Check(obj) && THPVariable_Unpack(obj).requires_grad()) return PyLong_FromSsize_t(i);
  }
  return PyLong_FromSsize_t(-1);
}

// strong references (at most `capacity`, in the call's Scratch), released on scope exit
class Refs {
 public:
  Refs(Scratch& scratch, size_t capacity) : objs_(scratch.take<PyObject*>(capacity)), capacity_(capacity) {}
  Refs(const Refs&) = delete;
  Refs& operator=(const Refs&) = delete;
  ~Refs() {
    for (size_t i = 0; i < count_; i++) Py_DECREF(objs_[i]);
  }
  PyObject* hold(PyObject* o) {
    if (count_ == capacity_) throw std::logic_error("collate_dicts: more references than it counted");
    Py_INCREF(o);
    objs_[count_++] = o;
    return o;
  }

 private:
  PyObject** objs_;
  size_t capacity_, count_ = 0;
};

// One key of a collate spec (loaders/collate_spec.py NativeSpec): the kind of its values,
// the padding flags, the dtype its tensors must have and the fill's bit pattern.
enum KeyKind : long { ROW_LIST = 0, ROW_TENSOR = 1, NUM_INT = 2, NUM_FLOAT = 3, NUM_BOOL = 4, TENSOR_0D = 5 };
constexpr long KIND_BITS = 7, ALWAYS = 8, ALIGN = 16;

struct KeySpec {
  long kind = ROW_LIST;
  bool always = false, align = false;
  c10::ScalarType dtype = c10::ScalarType::Long;
  uint64_t bits = 0;
  bool rows() const { return kind == ROW_LIST || kind == ROW_TENSOR; }
};

// parse the per-key tuples of a spec; false with an error set when they are malformed
bool take_key_specs(PyObject* codes, PyObject* dtypes, PyObject* bits, Py_ssize_t nk, KeySpec* out) {
  if (PyTuple_GET_SIZE(codes) != nk || PyTuple_GET_SIZE(dtypes) != nk || PyTuple_GET_SIZE(bits) != nk) {
    PyErr_SetString(PyExc_ValueError, "collate_dicts: a spec needs one code, dtype and fill per key");
    return false;
  }
  for (Py_ssize_t j = 0; j < nk; j++) {
    const long code = PyLong_AsLong(PyTuple_GET_ITEM(codes, j));
    const unsigned long long b = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(bits, j));
    if (PyErr_Occurred()) return false;
    PyObject* dt = PyTuple_GET_ITEM(dtypes, j);
    out[j].kind = code & KIND_BITS;
    out[j].always = (code & ALWAYS) != 0;
    out[j].align = (code & ALIGN) != 0;
    out[j].bits = b;
    const bool typed = out[j].kind == ROW_TENSOR || out[j].kind == TENSOR_0D;
    if (out[j].kind > TENSOR_0D || typed != THPDtype_Check(dt)) {
      PyErr_SetString(PyExc_ValueError, "collate_dicts: a key code out of range, or a dtype not fitting it");
      return false;
    }
    if (typed) out[j].dtype = reinterpret_cast<THPDtype*>(dt)->scalar_type;
  }
  return true;
}

// equal exact str keys compare without running Python code
inline bool same_key(PyObject* k, PyObject* want) {
  return k == want || (PyUnicode_CheckExact(k) && PyUnicode_Compare(k, want) == 0);
}

// Read the B samples' values of the spec's keys into values[j * n + i]. Sample 0 must hold
// the keys in the spec's order (the output follows it). Samples whose entries come in that
// order are walked, which makes no object and runs no Python code, so what is read stays
// alive and unchanged without references of our own; a key elsewhere is looked up, and a
// lookup may run Python code (a colliding key's __eq__) that changes the batch: from the
// first lookup on, every sample read and every value is held. 1: read; 0: the batch does
// not match; -1: an error is set.
int read_values(PyObject* samples, PyObject* const* keys, Py_ssize_t nk, PyObject** values, Refs& refs,
                Scratch& scratch) {
  const Py_ssize_t n = PyList_GET_SIZE(samples);
  PyObject** dicts = scratch.take<PyObject*>(n);
  bool holding = false;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (i >= PyList_GET_SIZE(samples)) return 0;
    PyObject* d = PyList_GET_ITEM(samples, i);
    if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != nk) return 0;
    dicts[i] = d;
    Py_ssize_t pos = 0, j = 0;
    PyObject *k, *v;
    while (j < nk && PyDict_Next(d, &pos, &k, &v) && same_key(k, keys[j])) values[j++ * n + i] = v;
    if (j < nk && i == 0) return 0;
    if (j < nk && !holding) {   // the first lookup: hold the samples before this one first
      for (Py_ssize_t s = 0; s < i; s++) {
        refs.hold(dicts[s]);
        for (Py_ssize_t jj = 0; jj < nk; jj++) refs.hold(values[jj * n + s]);
      }
      holding = true;
    }
    if (!holding) continue;
    refs.hold(d);
    for (Py_ssize_t jj = 0; jj < j; jj++) refs.hold(values[jj * n + i]);
    for (; j < nk; j++) {
      v = PyDict_GetItemWithError(d, keys[j]);
      if (v == nullptr) return PyErr_Occurred() ? -1 : 0;   // an error raised by a key's __eq__ goes up
      values[j * n + i] = refs.hold(v);
    }
  }
  return 1;
}

// collate_dicts(samples, spec) -> None | (out, mask | None, lengths | None, real, total, shapes)
//   spec = (keys, codes, dtypes, fill_bits, multiple, bounds, left, mark, want, max_bytes, tensor_type)
PyObject* collate_dicts(PyObject*, PyObject* args) {
  PyObject *samples, *keys_obj, *codes, *dtypes, *bits_obj, *bounds_obj, *tensor_type;
  long long multiple, max_bytes, mark_arg;
  int left, want;
  if (!PyArg_ParseTuple(args, "O!(O!O!O!O!LOpLiLO)", &PyList_Type, &samples, &PyTuple_Type, &keys_obj,
                        &PyTuple_Type, &codes, &PyTuple_Type, &dtypes, &PyTuple_Type, &bits_obj, &multiple,
                        &bounds_obj, &left, &mark_arg, &want, &max_bytes, &tensor_type))
    return nullptr;
  Layout lay;
  if (!lay.take(multiple, bounds_obj, left, max_bytes)) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(samples);
  const Py_ssize_t nk = PyTuple_GET_SIZE(keys_obj);
  if (n == 0 || nk == 0) Py_RETURN_NONE;
  Scratch scratch;
  KeySpec* spec = scratch.take<KeySpec>(nk);
  if (!take_key_specs(codes, dtypes, bits_obj, nk, spec)) return nullptr;
  PyObject* const* keys = &PyTuple_GET_ITEM(keys_obj, 0);
  Refs refs(scratch, static_cast<size_t>(n * (nk + 1)));
  PyObject** values = scratch.take<PyObject*>(nk * n);
  const int got = read_values(samples, keys, nk, values, refs, scratch);
  if (got <= 0) {
    if (got < 0) return nullptr;
    Py_RETURN_NONE;
  }
  Padded padded_local[4];                    // the usual 1-4 keys: no allocation
  std::vector<Padded> padded_more(nk > 4 ? nk : 0);
  Padded* padded = nk > 4 ? padded_more.data() : padded_local;
  Rows* rows = scratch.take<Rows>(nk);
  bool* stacked = scratch.take<bool>(nk);   // a row key stacked as it is: one length, not a sequence
  bool* widened = scratch.take<bool>(nk);   // an aligned row key of one length given the mask key's width
  Layout exact;                             // a stacked key's: its rows' one length
  exact.max_bytes = lay.max_bytes;
  Py_ssize_t mark = mark_arg;               // the key of the mask and lengths (-1: the first padded)
  if (mark >= nk || (mark >= 0 && !spec[mark].rows())) Py_RETURN_NONE;
  try {
    // from here to the wrapping no Python object is made: no Python code runs
    for (Py_ssize_t j = 0; j < nk; j++) {
      PyObject* const* items = &values[j * n];
      stacked[j] = widened[j] = false;
      const KeySpec& k = spec[j];
      if (!k.rows()) {
        const bool ok = k.kind == TENSOR_0D ? read_tensor_scalars(items, n, k.dtype, padded[j].batch)
                        : read_scalars(items, n, k.kind == NUM_INT     ? ScalarKind::int64
                                                 : k.kind == NUM_FLOAT ? ScalarKind::float64
                                                                       : ScalarKind::boolean,
                                       padded[j].batch);
        if (!ok) Py_RETURN_NONE;
        continue;
      }
      rows[j] = Rows{};
      if ((k.kind == ROW_LIST) != PyList_CheckExact(items[0])) Py_RETURN_NONE;
      const bool tensor_of_type = reinterpret_cast<PyObject*>(Py_TYPE(items[0])) == tensor_type;
      if (k.kind == ROW_TENSOR && !tensor_of_type) Py_RETURN_NONE;
      if (!read_rows(items, n, rows[j], scratch) || (k.kind == ROW_TENSOR && rows[j].dtype != k.dtype))
        Py_RETURN_NONE;
      // one length and no sequence: stacked, unless over the plan (whose overflow rule the
      // Python executor applies) or requiring grad (stacked there by torch.stack, which
      // records autograd)
      if (rows[j].longest * n == rows[j].total && !k.always) {
        if (padded_length(rows[j].longest, lay.multiple, lay.bounds.data(), lay.nbounds) < 0 || rows[j].grad)
          Py_RETURN_NONE;
        stacked[j] = true;
      }
    }
    if (mark >= 0 && stacked[mark]) Py_RETURN_NONE;
    for (Py_ssize_t j = 0; mark < 0 && j < nk; j++)
      if (spec[j].rows() && !stacked[j]) mark = j;
    // a stacked row key aligned with the mask's key, whose rows all have its one length,
    // takes the mask's width: every sequence of a sample ends up one width
    const bool mark_even = mark >= 0 && rows[mark].longest * n == rows[mark].total &&
                           padded_length(rows[mark].longest, lay.multiple, lay.bounds.data(), lay.nbounds) !=
                               rows[mark].longest;
    for (Py_ssize_t j = 0; mark_even && j < nk; j++)
      if (stacked[j] && spec[j].align && rows[j].longest == rows[mark].longest) {
        stacked[j] = false;
        widened[j] = true;
      }
    for (Py_ssize_t j = 0; j < nk; j++) {
      if (!spec[j].rows()) continue;
      const int asked = j == mark ? want : 0;
      const Layout& to = stacked[j] ? exact : lay;
      if (!pad_read_rows(&values[j * n], n, rows[j], to, spec[j].bits, asked, padded[j]))
        Py_RETURN_NONE;
    }
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  } catch (const std::exception&) {  // c10::Error from an unusual tensor: the Python executor decides
    Py_RETURN_NONE;
  }
  Py_ssize_t npadded = 0;   // the padded keys, which the counts and shapes are of
  for (Py_ssize_t j = 0; j < nk; j++) npadded += spec[j].rows() && !stacked[j];
  PyObject* out = PyDict_New();
  PyObject* shapes = PyList_New(npadded);
  if (out == nullptr || shapes == nullptr) {
    Py_XDECREF(out);
    Py_XDECREF(shapes);
    return nullptr;
  }
  long long real = 0, total = 0;
  bool ok = true;
  // the shapes of the padded keys in key order, then those of the widened ones (as the
  // Python executor counts them: it widens once every key is collated)
  for (int pass = 0, r = 0; pass < 2 && ok; pass++) {
    for (Py_ssize_t j = 0; j < nk && ok; j++) {
      if (!spec[j].rows() || stacked[j] || widened[j] != (pass == 1)) continue;
      const int64_t T = padded[j].batch.size(1);
      real += rows[j].total;
      total += static_cast<long long>(n) * T;
      PyObject* shape = Py_BuildValue("(O(nL))", keys[j], n, static_cast<long long>(T));
      ok = shape != nullptr;
      if (ok) PyList_SET_ITEM(shapes, r++, shape);
    }
  }
  for (Py_ssize_t j = 0; j < nk && ok; j++) {
    PyObject* batch = wrap(padded[j].batch);
    ok = batch != nullptr && PyDict_SetItem(out, keys[j], batch) == 0;
    Py_XDECREF(batch);
  }
  if (!ok) {
    Py_DECREF(out);
    Py_DECREF(shapes);
    return nullptr;
  }
  if (mark < 0) return Py_BuildValue("NOOLLN", out, Py_None, Py_None, real, total, shapes);
  Padded& m = padded[mark];
  return Py_BuildValue("NNNLLN", out, wrap(m.mask), wrap(m.lengths), real, total, shapes);
}

// The C API must never see a C++ exception (it would end the process): out of memory is
// a MemoryError, anything else a RuntimeError. (Inside, the reads of unusual tensors turn
// c10 errors into "declined" themselves.)
template <PyObject* (*F)(PyObject*, PyObject*)>
PyObject* guarded(PyObject* self, PyObject* args) {
  try {
    return F(self, args);
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"describe", guarded<describe>, METH_VARARGS,
     "describe(samples, ndim, shapes, strides, ptrs, maxes) -> (refused, elements)\n\n"
     "Fill int64 buffers for a list of B CPU tensors of rank ndim: shapes and byte strides (B*ndim),\n"
     "data pointers (B) and per-axis maxima (ndim). refused is -1 when every sample is a plain dense\n"
     "CPU tensor of that rank and of the first sample's dtype (not complex), else the index of the\n"
     "first that is not (the buffers then hold nothing to use); elements counts their items."},
    {"pad_rows", guarded<pad_rows>, METH_VARARGS,
     "pad_rows(column, multiple, bounds, fill_bits, left, want, max_bytes)\n"
     "    -> None | (batch, lengths | None, mask | None, longest, total)\n\n"
     "Pad B 1-D rows (exact lists of exact ints -> int64, or plain dense 1-D CPU tensors of one dtype)\n"
     "into a new (B, T) tensor, T the longest rounded up to multiple, or the smallest of the int64\n"
     "bounds (ascending) >= it when bounds is not None; pad elements hold fill_bits (the fill's bit\n"
     "pattern in the batch's dtype), on the left when left. want: 1 adds the int64 (B,) lengths,\n"
     "2 the bool (B, T) mask (true on the data). None, with nothing raised, for anything else: another\n"
     "row type, an element that is not an exact int in int64, a longest row over the last bound, or a\n"
     "batch over max_bytes."},
    {"collate_dicts", guarded<collate_dicts>, METH_VARARGS,
     "collate_dicts(samples, spec) -> None | (out, mask | None, lengths | None, real, total, shapes)\n\n"
     "Run a collate spec (loaders/collate_spec.py NativeSpec: keys, codes, dtypes, fill_bits, multiple,\n"
     "bounds, left, mark, want, max_bytes, tensor_type) over a batch of exact dicts holding the spec's\n"
     "keys (sample 0 in its order). Row keys (exact lists of exact ints, or 1-D plain CPU tensors of\n"
     "tensor_type and the key's dtype) are padded as pad_rows pads them, or stacked when their rows\n"
     "share one length and the key is no sequence (ALWAYS) nor aligned with the mask's key (ALIGN);\n"
     "number keys (exact ints, floats or bools; 0-d tensors of the key's dtype) are stacked. out maps\n"
     "each key to its tensor; mask (bool) and lengths (int64) are of the key at index mark (-1: the\n"
     "first padded key) as want asks (1 lengths, 2 mask); real and total count the data and padded\n"
     "elements of the padded keys, shapes lists their (key, (B, T)). None, with nothing raised, when a\n"
     "sample does not match the spec."},
    {"stack_numbers", guarded<stack_numbers>, METH_VARARGS,
     "stack_numbers(items) -> None | tensor\n\n"
     "A list of B Python numbers of one kind (exact ints in int64, floats, or bools) as the (B,) int64,\n"
     "float64 or bool tensor torch.tensor(items) makes of them; None for anything else (mixed kinds,\n"
     "an int past int64, other objects, no items)."},
    {"first_requiring_grad", guarded<first_requiring_grad>, METH_VARARGS,
     "first_requiring_grad(items) -> int\n\n"
     "The index of the first torch tensor in the list items that requires grad, or -1 (other objects\n"
     "are skipped)."},
    {"dict_columns", guarded<dict_columns>, METH_VARARGS,
     "dict_columns(samples) -> None | (keys, columns)\n\n"
     "For a list of exact dicts with sample 0's key set: its keys (in its order) and per key the list of\n"
     "the B values; None for anything else (a missing or extra key, another mapping type)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_tensors",
                      "Native bridge to torch: reads CPU tensors' sizes, strides and pointers; pads 1-D rows "
                      "into new tensors; runs a collate plan of flat dicts.",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_torch_tensors(void) {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && (PyModule_AddStringConstant(m, "built_for", DYNTILE_TORCH_VERSION) != 0 ||
                       PyModule_AddIntConstant(m, "api", DYNTILE_NATIVE_API) != 0)) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
