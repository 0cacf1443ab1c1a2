// The native bridge to torch: read a list of CPU torch tensors' sizes, byte strides and
// data pointers in one call (describe), the columns of a batch of dicts (dict_columns),
// and a batch of flat dicts of rows and numbers in one pass, written into new torch tensors
// by a layout decided in Python (collate_dicts: the layout comes from
// loaders/collate_layout.py; this reads and writes and decides nothing). Rows are written by
// include/rows_write.h, the row writer pad_batch and PackedCollate use too.
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
#include <initializer_list>
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
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include "pylong_read.h"
#include "rows_write.h"

#ifndef DYNTILE_TORCH_VERSION
#error "setup.py defines DYNTILE_TORCH_VERSION (the torch version this module is built against)"
#endif

// What the module offers its Python callers, as `api`: dyntile/tensor_reader.py uses a
// module of its own NATIVE_API only, so that a build left from older sources (an
// editable install after a pull) is not used rather than failing. Bump both with any
// new function or changed signature.
#define DYNTILE_NATIVE_API 6

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

// ---- fetching samples ahead

// A batch's samples are often out of cache when it is read: a stream's window was read
// thousands of samples earlier, an in-memory dataset is read in shuffled order. Each
// sample is a chain of objects (a dict, its entries, a tensor object, its TensorImpl, its
// storage), each known only once the one before is loaded. The loops below ask for the
// samples ahead of the one they read, a link further down the chain the closer a sample
// gets, so that the loads of several samples overlap. A prefetch reads nothing and never
// faults; what is followed to find the next link is only what is already checked to be
// a live dict or exactly a torch tensor.
constexpr Py_ssize_t AHEAD = 8;   // samples between two links of the chain

inline void fetch(const void* p, int lines = 1) {
  for (int k = 0; k < lines; k++) __builtin_prefetch(static_cast<const char*>(p) + 64 * k);
}

// a tensor object already in cache: its TensorImpl (sizes, strides, flags: four lines)
inline void fetch_impl(PyObject* o) {
  if (!THPVariable_CheckExact(o)) return;
  const c10::TensorImpl* impl = THPVariable_Unpack(o).unsafeGetTensorImpl();
  if (impl != nullptr) fetch(impl, 4);
}

// a TensorImpl already in cache: its storage (data pointer and size)
inline void fetch_storage(PyObject* o) {
  if (!THPVariable_CheckExact(o)) return;
  const c10::TensorImpl* impl = THPVariable_Unpack(o).unsafeGetTensorImpl();
  if (impl != nullptr && impl->has_storage()) fetch(impl->unsafe_storage().unsafeGetStorageImpl());
}

// Tensors items[0..n) as the loop at i will read them: the object 3 * AHEAD ahead, its
// TensorImpl 2 * AHEAD ahead, its storage AHEAD ahead
inline void fetch_tensors(PyObject* const* items, Py_ssize_t n, Py_ssize_t i) {
  if (i + 3 * AHEAD < n) fetch(items[i + 3 * AHEAD]);
  if (i + 2 * AHEAD < n) fetch_impl(items[i + 2 * AHEAD]);
  if (i + AHEAD < n) fetch_storage(items[i + AHEAD]);
}

// a dict already in cache: its keys table (and values array, for a split dict)
inline void fetch_entries(PyObject* d) {
  if (!PyDict_CheckExact(d)) return;
  const PyDictObject* dict = reinterpret_cast<const PyDictObject*>(d);
  fetch(dict->ma_keys, 2);
  if (dict->ma_values != nullptr) fetch(dict->ma_values);
}

// a dict whose entries are in cache: its values' objects
inline void fetch_values(PyObject* d) {
  if (!PyDict_CheckExact(d)) return;
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(d, &pos, &k, &v)) fetch(v);
}

// Dicts items[0..n) as the loop at i will read them: the dict 3 * AHEAD ahead (and the
// GC header before it), its entries 2 * AHEAD ahead, its values AHEAD ahead
inline void fetch_dicts(PyObject* const* items, Py_ssize_t n, Py_ssize_t i) {
  if (i + 3 * AHEAD < n) fetch(reinterpret_cast<const char*>(items[i + 3 * AHEAD]) - 16, 2);
  if (i + 2 * AHEAD < n) fetch_entries(items[i + 2 * AHEAD]);
  if (i + AHEAD < n) fetch_values(items[i + AHEAD]);
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
  PyObject* const* items = &PyList_GET_ITEM(samples, 0);
  for (Py_ssize_t i = 0; i < n; i++) {
    fetch_tensors(items, n, i);
    PyObject* obj = items[i];
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

// ---- rows: B 1-D rows (exact lists of exact ints, or plain 1-D CPU tensors of one dtype)

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
  // forget every block taken (the spilled ones are freed): the scratch of another call
  void reset() {
    used_ = 0;
    heap_.clear();
  }

 private:
  alignas(16) char local_[8192];
  size_t used_ = 0;
  std::vector<std::unique_ptr<char[]>> heap_;
};

// what collate_dicts learnt of each row of a key (arrays in the call's Scratch)
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
    fetch_tensors(items, n, i);
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

// a new reference to t's Python tensor, or to None when t is undefined
PyObject* wrap(at::Tensor& t) {
  if (!t.defined()) Py_RETURN_NONE;
  return THPVariable_Wrap(std::move(t));
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
    fetch_dicts(&PyList_GET_ITEM(samples, 0), PyList_GET_SIZE(samples), i);
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

// ---- collate_dicts: a batch of flat dicts, read in one pass and written by a layout
//
// The reader reports the batch's facts (per key its kind, dtype, grad, whether its rows
// share one length, and its longest row, or the width the caller's table gives that row
// when the rows differ in length) and decides nothing; the layout (each key's width,
// dtype and fill, where the mask and lengths come from) is the caller's: found under the
// facts in its dict of layouts, or, for facts not seen yet, decided by its Python function
// (loaders/collate_layout.py: layout_batch); the writer carries it out.

// What the reader sees of one key's B values (module constants of the same names)
enum KeyKind : int { LIST_ROWS = 0, TENSOR_ROWS = 1, INTS = 2, FLOATS = 3, BOOLS = 4, TENSOR_SCALARS = 5 };

struct KeyRead {
  int kind = LIST_ROWS;
  Rows rows;                                   // row kinds: lengths, pointers, strides
  c10::ScalarType dtype = c10::ScalarType::Long;
};

// One batch as collate_dicts reads it: every value it read is held until it is written
struct DictRead {
  Py_ssize_t n = 0, nk = 0;
  PyObject* keys = nullptr;                    // the spec's keys tuple (held)
  PyObject** values = nullptr;                 // values[j * n + i], each held
  KeyRead* key = nullptr;
  Scratch scratch;
  std::vector<PyObject*> held;
  ~DictRead() {
    for (PyObject* o : held) Py_DECREF(o);
  }
  PyObject* hold(PyObject* o) {
    Py_INCREF(o);
    held.push_back(o);
    return o;
  }
};

// One DictRead kept for the next batch (under the GIL): a batch's read costs no allocation
// of its scratch block, whose free would make the next batch's large allocations
// consolidate the allocator's bins
DictRead* spare_read = nullptr;

DictRead* take_read() {
  DictRead* r = spare_read;
  spare_read = nullptr;
  return r != nullptr ? r : new DictRead();
}

// A read is done with: its references released (before it is the spare again: a value's
// finalizer may read a batch itself), then kept as the spare or freed
void release_read(DictRead* r) {
  for (PyObject* o : r->held) Py_DECREF(o);
  r->held.clear();   // keeps its capacity
  r->scratch.reset();
  if (spare_read == nullptr) {
    spare_read = r;
  } else {
    delete r;
  }
}

struct ReleaseRead {
  void operator()(DictRead* r) const { release_read(r); }
};

// equal exact str keys compare without running Python code
inline bool same_key(PyObject* k, PyObject* want) {
  return k == want || (PyUnicode_CheckExact(k) && PyUnicode_Compare(k, want) == 0);
}

// Read the B samples' values of `keys` into r.values, holding each. Sample 0 must hold the
// keys in their order (the output follows it); other samples are walked when their
// entries come in that order, else looked up (a lookup may run a colliding key's __eq__,
// which may change the batch: the list is read afresh at each sample and what is read is
// held). 1: read; 0: the batch is not exact dicts of these keys; -1: an error is set.
int read_values(PyObject* samples, DictRead& r) {
  PyObject* const* keys = &PyTuple_GET_ITEM(r.keys, 0);
  const Py_ssize_t n = r.n, nk = r.nk;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (i >= PyList_GET_SIZE(samples)) return 0;
    fetch_dicts(&PyList_GET_ITEM(samples, 0), PyList_GET_SIZE(samples), i);
    PyObject* d = r.hold(PyList_GET_ITEM(samples, i));
    if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != nk) return 0;
    Py_ssize_t pos = 0, j = 0;
    PyObject *k, *v;
    while (j < nk && PyDict_Next(d, &pos, &k, &v) && same_key(k, keys[j])) r.values[j++ * n + i] = r.hold(v);
    if (j < nk && i == 0) return 0;
    for (; j < nk; j++) {
      v = PyDict_GetItemWithError(d, keys[j]);
      if (v == nullptr) return PyErr_Occurred() ? -1 : 0;   // an error raised by a key's __eq__ goes up
      r.values[j * n + i] = r.hold(v);
    }
  }
  return 1;
}

// the kind of a Python number (exact int, float or bool), or -1
inline int number_kind(PyObject* v) {
  if (PyLong_CheckExact(v)) return INTS;
  if (PyFloat_CheckExact(v)) return FLOATS;
  if (PyBool_Check(v)) return BOOLS;
  return -1;
}

// What one key's values are: true with k filled, false when the writer cannot take them
// (mixed kinds, another tensor type or dtype, a rank other than 1 for rows or 0 for scalars)
bool read_key(PyObject* const* items, Py_ssize_t n, KeyRead& k, Scratch& scratch) {
  PyObject* v0 = items[0];
  if (PyList_CheckExact(v0)) {
    k.kind = LIST_ROWS;
    return read_rows(items, n, k.rows, scratch);
  }
  const int number = number_kind(v0);
  if (number >= 0) {
    k.kind = number;
    for (Py_ssize_t i = 0; i < n; i++)
      if (number_kind(items[i]) != number) return false;
    return true;
  }
  if (Py_TYPE(v0) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return false;   // exactly torch.Tensor
  const at::Tensor& t0 = THPVariable_Unpack(v0);
  if (t0.dim() == 1) {
    k.kind = TENSOR_ROWS;
    if (!read_rows(items, n, k.rows, scratch)) return false;
    k.dtype = k.rows.dtype;
    return true;
  }
  if (t0.dim() != 0) return false;
  k.kind = TENSOR_SCALARS;
  k.dtype = t0.scalar_type();
  for (Py_ssize_t i = 0; i < n; i++) {
    if (Py_TYPE(items[i]) != Py_TYPE(v0)) return false;
    const at::Tensor& t = THPVariable_Unpack(items[i]);
    if (!plain_cpu(t) || t.dim() != 0 || t.scalar_type() != k.dtype || t.const_data_ptr() == nullptr) return false;
    k.rows.grad = k.rows.grad || t.requires_grad();
  }
  return true;
}

// A key's code in a batch's facts: its kind (bits 0-2), whether a tensor of it requires
// grad (bit 3), whether its rows share one length (bit 4), and for tensors 1 + the scalar
// type (bits 5 on; scalar_dtypes() maps it back to a torch dtype)
constexpr int64_t GRAD = 8, ONE_LENGTH = 16, DTYPE_SHIFT = 5;   // (module constants GRAD, ONE_LENGTH)

int64_t key_code(const KeyRead& k, Py_ssize_t n) {
  const bool typed = k.kind == TENSOR_ROWS || k.kind == TENSOR_SCALARS;
  const bool rows = k.kind <= TENSOR_ROWS;
  return k.kind | (k.rows.grad ? GRAD : 0) | (rows && k.rows.longest * n == k.rows.total ? ONE_LENGTH : 0) |
         (typed ? (static_cast<int64_t>(k.dtype) + 1) << DTYPE_SHIFT : 0);
}

// Read a batch into r (n, nk and keys set): 1 read; 0 not a batch the writer takes; -1 an
// error is set
int read_batch(PyObject* samples, DictRead& r) {
  const Py_ssize_t n = r.n, nk = r.nk;
  r.held.reserve(static_cast<size_t>(n * (nk + 1) + 1));
  r.values = r.scratch.take<PyObject*>(n * nk);
  r.key = r.scratch.take<KeyRead>(nk);
  const int got = read_values(samples, r);
  if (got <= 0) return got;
  try {
    for (Py_ssize_t j = 0; j < nk; j++) {
      r.key[j] = KeyRead{};
      if (!read_key(&r.values[j * n], n, r.key[j], r.scratch)) return 0;
    }
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
    return -1;
  } catch (const std::exception&) {  // c10::Error from an unusual tensor: the writer does not take it
    return 0;
  }
  return 1;
}

// a new tuple of the references items (stolen; null when one is null, with all released)
PyObject* tuple_of(std::initializer_list<PyObject*> items) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
  bool ok = t != nullptr;
  for (PyObject* item : items) ok = ok && item != nullptr;
  Py_ssize_t i = 0;
  for (PyObject* item : items) {
    if (ok) PyTuple_SET_ITEM(t, i++, item);
    else Py_XDECREF(item);
  }
  if (!ok) Py_XDECREF(t);
  return ok ? t : nullptr;
}

// the facts of a read, (B, code, longest, code, longest, ...), and its row totals (total, ...):
// tuples of ints alone, so that looking the facts up in a dict runs no Python code. A row key
// whose rows differ in length reports widths[longest] for its longest row where the caller's
// table has an entry (nw of them): batches whose layouts are equal then share their facts
bool facts_of(const DictRead& r, const char* widths, Py_ssize_t nw, PyObject*& facts, PyObject*& totals) {
  facts = PyTuple_New(1 + 2 * r.nk);
  totals = PyTuple_New(r.nk);
  bool ok = facts != nullptr && totals != nullptr;
  auto put = [&ok](PyObject* tuple, Py_ssize_t i, PyObject* item) {
    if (item == nullptr) ok = false;
    else PyTuple_SET_ITEM(tuple, i, item);
  };
  if (ok) put(facts, 0, PyLong_FromSsize_t(r.n));
  for (Py_ssize_t j = 0; j < r.nk && ok; j++) {
    const KeyRead& k = r.key[j];
    const int64_t code = key_code(k, r.n);
    int64_t longest = k.rows.longest;
    if (k.kind <= TENSOR_ROWS && !(code & ONE_LENGTH) && longest < nw) std::memcpy(&longest, widths + 8 * longest, 8);
    put(facts, 1 + 2 * j, PyLong_FromLongLong(code));
    put(facts, 2 + 2 * j, PyLong_FromLongLong(longest));
    put(totals, j, PyLong_FromLongLong(k.rows.total));
  }
  if (!ok) {
    Py_CLEAR(facts);
    Py_CLEAR(totals);
  }
  return ok;
}

// scalar_dtypes() -> (None, the torch dtype of scalar type 0, of 1, ...): a key code's dtype
PyObject* scalar_dtypes(PyObject*, PyObject*) {
  constexpr Py_ssize_t count = static_cast<Py_ssize_t>(c10::ScalarType::NumOptions);
  PyObject* out = PyTuple_New(count + 1);
  if (out == nullptr) return nullptr;
  Py_INCREF(Py_None);
  PyTuple_SET_ITEM(out, 0, Py_None);
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject* dtype = Py_None;
    try {
      dtype = reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(i)));
    } catch (const std::exception&) {   // a scalar type without a Python dtype: never read
    }
    if (dtype == nullptr) dtype = Py_None;
    Py_INCREF(dtype);
    PyTuple_SET_ITEM(out, i + 1, dtype);
  }
  return out;
}

// true when a key's values are still as read (nothing between the two calls resized a list
// or swapped a tensor's storage)
bool as_read(PyObject* const* items, Py_ssize_t n, const KeyRead& k) {
  if (k.kind == TENSOR_SCALARS) {
    for (Py_ssize_t i = 0; i < n; i++) {
      const at::Tensor& t = THPVariable_Unpack(items[i]);
      if (t.dim() != 0 || t.scalar_type() != k.dtype || !plain_cpu(t) || t.const_data_ptr() == nullptr) return false;
    }
    return true;
  }
  if (k.kind > TENSOR_ROWS) return true;   // Python numbers: immutable
  for (Py_ssize_t i = 0; i < n; i++) {
    if (k.kind == LIST_ROWS) {
      if (PyList_GET_SIZE(items[i]) != k.rows.lens[i]) return false;
      continue;
    }
    // its rank, length and data pointer as read (a resize or a new storage changes one)
    const at::Tensor& t = THPVariable_Unpack(items[i]);
    if (t.dim() != 1 || t.sizes()[0] != k.rows.lens[i] ||
        static_cast<const char*>(t.const_data_ptr()) != k.rows.ptrs[i])
      return false;
  }
  return true;
}

// the (B, T) batch of one row key, each row at its side and padded with fill_bits; false
// (out undefined) when an element of a list is not an exact int in int64. A function of its
// own (not inlined into write_batch): the int reading loop compiles tighter here
[[gnu::noinline]] bool write_rows(PyObject* const* items, Py_ssize_t n, const KeyRead& k, int64_t T, uint64_t bits, bool left,
                at::Tensor& out) {
  const Rows& rows = k.rows;
  // at::detail::empty_cpu: the CPU kernel of torch.empty, without the dispatcher's trip
  // to it (every byte is written below)
  at::Tensor batch = at::detail::empty_cpu({n, T}, rows.dtype);
  char* dst = static_cast<char*>(batch.data_ptr());
  if (rows.lists) {   // int64 rows: the fill around each row's hole, then its ints read into it
    for (Py_ssize_t i = 0; i < n; i++, dst += T * 8) {
      const int64_t m = rows.lens[i];
      dt_row_frame(dst, m, T, left, bits, 8);
      int64_t* hole = reinterpret_cast<int64_t*>(dst) + (left ? T - m : 0);
      if (dt_read_int_items(dt_list_items(items[i]), m, hole) != m) return false;
    }
  } else {
    dt_rows_pad(dst, T, n, rows.lens, rows.ptrs, rows.steps, left, bits, rows.width);
  }
  out = std::move(batch);
  return true;
}

// the (B,) tensor of one number key (Python numbers of one kind, or 0-d tensors)
at::Tensor write_numbers(PyObject* const* items, Py_ssize_t n, const KeyRead& k, c10::ScalarType dtype) {
  at::Tensor t = at::detail::empty_cpu({n}, dtype);
  char* d = static_cast<char*>(t.data_ptr());
  if (k.kind == TENSOR_SCALARS) {
    const size_t w = t.element_size();
    for (Py_ssize_t i = 0; i < n; i++) std::memcpy(d + i * w, THPVariable_Unpack(items[i]).const_data_ptr(), w);
  } else if (k.kind == INTS) {
    // exact ints past int64 were not refused by the read: the caller checks the count
    if (dt_read_int_items(items, n, reinterpret_cast<int64_t*>(d)) != n) return at::Tensor();
  } else if (k.kind == FLOATS) {
    for (Py_ssize_t i = 0; i < n; i++) reinterpret_cast<double*>(d)[i] = PyFloat_AS_DOUBLE(items[i]);
  } else {
    for (Py_ssize_t i = 0; i < n; i++) reinterpret_cast<bool*>(d)[i] = items[i] == Py_True;
  }
  return t;
}

// the dtype a key of this read is written in: the rows' own for tensors, int64 for lists of
// ints, the Python numbers' as the layout names it (the writer writes only these)
bool writable(const KeyRead& k, c10::ScalarType dtype) {
  switch (k.kind) {
    case LIST_ROWS: return dtype == at::kLong;
    case TENSOR_ROWS: case TENSOR_SCALARS: return dtype == k.dtype;
    case INTS: return dtype == at::kLong;
    case FLOATS: return dtype == at::kDouble;
    default: return dtype == at::kBool;
  }
}

// Write a read batch by its layout, a tuple whose first six items are (widths, dtypes,
// fill bits, mark, want, left); check: whether Python code ran since the read (the values
// are then checked to be as read). 1: written (out a new dict of the keys' tensors, mask
// and lengths as want asks); 0: a list holds something other than exact ints in int64;
// -1: an error is set.
int write_batch(DictRead& r, PyObject* layout, bool check, PyObject*& out, at::Tensor& mask, at::Tensor& lengths) {
  if (!PyTuple_Check(layout) || PyTuple_GET_SIZE(layout) < 6) {
    PyErr_SetString(PyExc_TypeError, "collate_dicts: a layout is a tuple (widths, dtypes, fill_bits, mark, want, left, ...)");
    return -1;
  }
  PyObject* widths = PyTuple_GET_ITEM(layout, 0);
  PyObject* dtypes = PyTuple_GET_ITEM(layout, 1);
  PyObject* bits_obj = PyTuple_GET_ITEM(layout, 2);
  const Py_ssize_t mark = PyLong_AsSsize_t(PyTuple_GET_ITEM(layout, 3));
  const long want = PyLong_AsLong(PyTuple_GET_ITEM(layout, 4));
  const int left = PyObject_IsTrue(PyTuple_GET_ITEM(layout, 5));
  if (PyErr_Occurred()) return -1;
  const Py_ssize_t n = r.n, nk = r.nk;
  if (!PyTuple_Check(widths) || !PyTuple_Check(dtypes) || !PyTuple_Check(bits_obj) ||
      PyTuple_GET_SIZE(widths) != nk || PyTuple_GET_SIZE(dtypes) != nk || PyTuple_GET_SIZE(bits_obj) != nk) {
    PyErr_SetString(PyExc_ValueError, "collate_dicts: a layout needs one width, dtype and fill per key");
    return -1;
  }
  if (mark < -1 || mark >= nk || (mark >= 0 && r.key[mark].kind > TENSOR_ROWS)) {
    PyErr_SetString(PyExc_ValueError, "collate_dicts: mark should be -1 or the index of a row key");
    return -1;
  }
  std::vector<at::Tensor> made(nk);
  int64_t mark_T = 0;
  for (Py_ssize_t j = 0; j < nk; j++) {
    const KeyRead& k = r.key[j];
    PyObject* const* items = &r.values[j * n];
    PyObject* dt = PyTuple_GET_ITEM(dtypes, j);
    if (!THPDtype_Check(dt) || !writable(k, reinterpret_cast<THPDtype*>(dt)->scalar_type)) {
      PyErr_Format(PyExc_ValueError, "collate_dicts: key %zd cannot be written in the dtype %R", j, dt);
      return -1;
    }
    const c10::ScalarType dtype = reinterpret_cast<THPDtype*>(dt)->scalar_type;
    if (check && !as_read(items, n, k)) {
      PyErr_SetString(PyExc_RuntimeError, "the batch changed between its read and its write");
      return -1;
    }
    if (k.kind > TENSOR_ROWS) {
      made[j] = write_numbers(items, n, k, dtype);
      if (!made[j].defined()) return 0;
      continue;
    }
    const long long T = PyLong_AsLongLong(PyTuple_GET_ITEM(widths, j));
    const unsigned long long bits = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(bits_obj, j));
    if (PyErr_Occurred()) return -1;
    if (T < k.rows.longest) {
      PyErr_Format(PyExc_ValueError, "collate_dicts: key %zd has rows of %lld, wider than its width %lld", j,
                   static_cast<long long>(k.rows.longest), T);
      return -1;
    }
    if (!write_rows(items, n, k, T, bits, left, made[j])) return 0;   // a list of other numbers
    if (j == mark) mark_T = T;
  }
  if (mark >= 0 && (want & 1)) {
    lengths = at::detail::empty_cpu({n}, at::kLong);
    std::memcpy(lengths.data_ptr(), r.key[mark].rows.lens, static_cast<size_t>(n) * 8);
  }
  if (mark >= 0 && (want & 2)) {
    const int64_t T = mark_T;
    mask = at::detail::empty_cpu({n, T}, at::kBool);
    char* p = static_cast<char*>(mask.data_ptr());
    for (Py_ssize_t i = 0; T > 0 && i < n; i++, p += T) {   // T == 0: no data pointer to write to
      const int64_t m = r.key[mark].rows.lens[i];
      dt_fill_bytes(p, left ? 0 : 1, static_cast<size_t>(left ? T - m : m));
      dt_fill_bytes(p + (left ? T - m : m), left ? 1 : 0, static_cast<size_t>(left ? m : T - m));
    }
  }
  out = PyDict_New();
  if (out == nullptr) return -1;
  for (Py_ssize_t j = 0; j < nk; j++) {
    PyObject* t = wrap(made[j]);
    const bool ok = t != nullptr && PyDict_SetItem(out, PyTuple_GET_ITEM(r.keys, j), t) == 0;
    Py_XDECREF(t);
    if (!ok) {
      Py_CLEAR(out);
      return -1;
    }
  }
  return 1;
}

// collate_dicts(samples, keys, layouts, decide, widths=None) -> None | (out, mask | None, lengths | None,
// layout, totals)
PyObject* collate_dicts(PyObject*, PyObject* args) {
  PyObject *samples, *keys, *layouts, *decide, *widths = Py_None;
  if (!PyArg_ParseTuple(args, "O!O!O!O|O", &PyList_Type, &samples, &PyTuple_Type, &keys, &PyDict_Type, &layouts,
                        &decide, &widths))
    return nullptr;
  if (widths != Py_None && (!PyBytes_CheckExact(widths) || PyBytes_GET_SIZE(widths) % 8 != 0)) {
    PyErr_SetString(PyExc_TypeError, "collate_dicts: widths should be None or bytes of int64 widths");
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(samples), nk = PyTuple_GET_SIZE(keys);
  if (n == 0 || nk == 0) Py_RETURN_NONE;
  std::unique_ptr<DictRead, ReleaseRead> r(take_read());
  r->n = n;
  r->nk = nk;
  r->keys = r->hold(keys);
  const int got = read_batch(samples, *r);
  if (got <= 0) {
    if (got < 0) return nullptr;
    Py_RETURN_NONE;
  }
  PyObject *facts, *totals;
  // the table's bytes are held by the caller's tuple of arguments for the whole call
  const bool table = widths != Py_None;
  const char* width_of = table ? PyBytes_AS_STRING(widths) : nullptr;
  if (!facts_of(*r, width_of, table ? PyBytes_GET_SIZE(widths) / 8 : 0, facts, totals)) return nullptr;
  // the facts are ints alone: their lookup runs no Python code, and the batch stays as read
  PyObject* layout = PyDict_GetItemWithError(layouts, facts);
  const bool decided = layout == nullptr;
  if (layout != nullptr) {
    Py_INCREF(layout);
  } else if (!PyErr_Occurred()) {
    layout = PyObject_CallOneArg(decide, facts);
  }
  Py_DECREF(facts);
  if (layout == nullptr || layout == Py_None) {
    Py_DECREF(totals);
    if (layout == nullptr) return nullptr;
    return layout;   // None: the caller's other route collates the batch
  }
  PyObject* out = nullptr;
  at::Tensor mask, lengths;
  const int written = write_batch(*r, layout, decided, out, mask, lengths);
  if (written <= 0) {
    Py_DECREF(layout);
    Py_DECREF(totals);
    if (written < 0) return nullptr;
    Py_RETURN_NONE;
  }
  return tuple_of({out, wrap(mask), wrap(lengths), layout, totals});
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
    {"collate_dicts", guarded<collate_dicts>, METH_VARARGS,
     "collate_dicts(samples, keys, layouts, decide, widths=None) -> None | (out, mask, lengths, layout, totals)\n\n"
     "Read a batch of B exact dicts holding the keys of the tuple keys (sample 0 in their order) in one\n"
     "pass, and write it by its layout: layouts[facts], else decide(facts) (a layout or None). facts is\n"
     "(B, code, longest) per key: the code says the kind of its values (bits 0-2: the module's LIST_ROWS:\n"
     "exact lists; TENSOR_ROWS: plain 1-D CPU tensors of one dtype; INTS, FLOATS, BOOLS: Python numbers\n"
     "of one kind; TENSOR_SCALARS: plain 0-d CPU tensors of one dtype), whether a tensor requires grad\n"
     "(GRAD), whether the rows share one length (ONE_LENGTH), and for tensors 1 + their scalar type\n"
     "(bits 5 on: scalar_dtypes()[code >> 5] is the torch dtype); longest is the longest row (0 for\n"
     "numbers), or, for rows of more than one length, widths[longest] where the bytes widths (int64 in\n"
     "native order, the caller's table of the width each longest row pads to) has that entry. A layout is a tuple whose first items are (widths, dtypes, fill_bits, mark, want, left):\n"
     "per key, row keys padded to widths[j] with fill_bits[j] (the fill's bit pattern), on the left when\n"
     "left; number keys stacked; each in dtypes[j] (int64 for lists of ints and Python ints, float64 for\n"
     "floats, bool for bools, a tensor's own); mask (bool (B, T), true on data) and lengths (int64 (B,))\n"
     "of the row key at index mark (-1: none) as want asks (1 lengths, 2 mask), else None. totals holds\n"
     "each key's sum of row lengths. None, with nothing raised, for a batch the reader does not take, a\n"
     "layout of None, or a list holding something other than exact ints in int64 (the read looks at\n"
     "sample 0's type only). It decides nothing."},
    {"scalar_dtypes", guarded<scalar_dtypes>, METH_NOARGS,
     "scalar_dtypes() -> tuple\n\n"
     "None, then the torch dtype of each scalar type in its order: the dtype of a key code c is\n"
     "scalar_dtypes()[c >> 5]."},
    {"first_requiring_grad", guarded<first_requiring_grad>, METH_VARARGS,
     "first_requiring_grad(items) -> int\n\n"
     "The index of the first torch tensor in the list items that requires grad, or -1 (other objects\n"
     "are skipped)."},
    {"dict_columns", guarded<dict_columns>, METH_VARARGS,
     "dict_columns(samples) -> None | (keys, columns)\n\n"
     "For a list of exact dicts with sample 0's key set: its keys (in its order) and per key the list of\n"
     "the B values; None for anything else (a missing or extra key, another mapping type)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_torch_tensors",
                      "Native bridge to torch: reads CPU tensors' sizes, strides and pointers; reads a batch "
                      "of flat dicts and writes it by a layout decided in Python.",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__torch_tensors(void) {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && (PyModule_AddStringConstant(m, "built_for", DYNTILE_TORCH_VERSION) != 0 ||
                       PyModule_AddIntConstant(m, "api", DYNTILE_NATIVE_API) != 0 ||
                       PyModule_AddIntConstant(m, "LIST_ROWS", LIST_ROWS) != 0 ||
                       PyModule_AddIntConstant(m, "TENSOR_ROWS", TENSOR_ROWS) != 0 ||
                       PyModule_AddIntConstant(m, "INTS", INTS) != 0 ||
                       PyModule_AddIntConstant(m, "FLOATS", FLOATS) != 0 ||
                       PyModule_AddIntConstant(m, "BOOLS", BOOLS) != 0 ||
                       PyModule_AddIntConstant(m, "TENSOR_SCALARS", TENSOR_SCALARS) != 0 ||
                       PyModule_AddIntConstant(m, "GRAD", GRAD) != 0 ||
                       PyModule_AddIntConstant(m, "ONE_LENGTH", ONE_LENGTH) != 0)) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
