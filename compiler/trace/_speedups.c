/* C versions of the trace recorder's two loops over every node it names, which were most of what recording costs:
 *
 * - visit(): the walk that gives a node and the nodes below it their trace ids (compiler/trace/nodes.py, _visit);
 * - node_columns(): a flush's node columns, five columns of little-endian u32: op, dtype code, arg code, number of
 *   sources, and the sources' trace ids (compiler/trace/columns.py, node_columns_py). In Python that is a dozen passes
 *   over the nodes, each reading one field of objects that left the cache long ago.
 *
 * The Python functions are the reference and the fallback where this is not built; tests check that both give the
 * same ids and the same bytes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* Where the UOp type keeps its fields (slots), found once by configure(): reading a slot is then a load. */
static PyTypeObject *uop_type = NULL;
static Py_ssize_t off_op = -1, off_dtype = -1, off_src = -1, off_arg = -1;
static Py_ssize_t off_dict = -1; /* where a UOp keeps its instance dict pointer; -1: not known, ask getattr */
static PyObject *str_tid = NULL;
static PyObject *owns_memory = NULL; /* the op of a node that owns memory (Ops.BUFFER): it and what is above it are
                                        transient, see compiler/trace/nodes.py */
#define MAX_DEPTH 10000              /* nested visits at most, whatever the recursion limit: the C stack is finite */

typedef struct {
  unsigned char *data;
  Py_ssize_t len, cap;
} Column;

static int col_init(Column *c, Py_ssize_t cap) {
  c->len = 0;
  c->cap = cap < 16 ? 16 : cap;
  c->data = PyMem_Malloc((size_t)c->cap * 4);
  if (c->data == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

static int col_push(Column *c, unsigned long long v) {
  if (v > 0xFFFFFFFFull) {
    PyErr_SetString(PyExc_OverflowError, "a trace column value does not fit in 32 bits");
    return -1;
  }
  if (c->len == c->cap) {
    Py_ssize_t cap = c->cap * 2;
    unsigned char *d = PyMem_Realloc(c->data, (size_t)cap * 4);
    if (d == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    c->data = d;
    c->cap = cap;
  }
  unsigned char *p = c->data + c->len * 4;
  p[0] = (unsigned char)(v & 0xFF);
  p[1] = (unsigned char)((v >> 8) & 0xFF);
  p[2] = (unsigned char)((v >> 16) & 0xFF);
  p[3] = (unsigned char)((v >> 24) & 0xFF);
  c->len++;
  return 0;
}

static PyObject *col_bytes(Column *c) {
  return PyBytes_FromStringAndSize((const char *)c->data, c->len * 4);
}

static PyObject *field(PyObject *node, Py_ssize_t off, const char *name) {
  /* a new reference to a slot of a UOp (the attribute, for anything else) */
  if (Py_TYPE(node) == uop_type) {
    PyObject *v = *(PyObject **)((char *)node + off);
    if (v != NULL) {
      Py_INCREF(v);
      return v;
    }
  }
  return PyObject_GetAttrString(node, name);
}

static long long as_u32(PyObject *v) {
  /* an int in 0..2**32-1, or -1 with an error set */
  unsigned long long x = PyLong_AsUnsignedLongLong(v);
  if (x == (unsigned long long)-1 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_OverflowError, "a trace column value is not an int in 0..2**32-1");
    }
    return -1;
  }
  if (x > 0xFFFFFFFFull) {
    PyErr_SetString(PyExc_OverflowError, "a trace column value does not fit in 32 bits");
    return -1;
  }
  return (long long)x;
}

typedef struct {
  PyObject *by_id;  /* dict: id(object) -> code */
  PyObject *code;   /* callable: object -> code, for an object not seen before */
  PyObject *last;   /* the object looked up last (a reference, so that its address stays its own) and its code */
  long long last_code;
} Codes;

static long long code_of(Codes *c, PyObject *obj) {
  /* obj's code: the cached one, or the table's, or a new one from c->code (which the table then keeps) */
  if (obj == c->last) return c->last_code;
  PyObject *key = PyLong_FromVoidPtr(obj);
  if (key == NULL) return -1;
  PyObject *v = PyDict_GetItemWithError(c->by_id, key);
  long long code;
  if (v != NULL) {
    code = as_u32(v);
  } else if (PyErr_Occurred()) {
    code = -1;
  } else {
    PyObject *made = PyObject_CallOneArg(c->code, obj);
    if (made == NULL) {
      Py_DECREF(key);
      return -1;
    }
    code = as_u32(made);
    if (code >= 0 && PyDict_SetItem(c->by_id, key, made) < 0) code = -1;
    Py_DECREF(made);
  }
  Py_DECREF(key);
  if (code >= 0) {
    Py_INCREF(obj);
    Py_XSETREF(c->last, obj);
    c->last_code = code;
  }
  return code;
}

static long long src_id(PyObject *ids, PyObject *s) {
  /* a source's trace id: in the ids dict (a kept node), else its _tid attribute's second item (a transient one) */
  PyObject *v = PyDict_GetItemWithError(ids, s);
  if (v != NULL) return as_u32(v);
  if (PyErr_Occurred()) return -1;
  PyObject *tid = PyObject_GetAttr(s, str_tid);
  if (tid == NULL) return -1;
  long long r;
  if (PyTuple_Check(tid) && PyTuple_GET_SIZE(tid) == 2) {
    r = as_u32(PyTuple_GET_ITEM(tid, 1));
  } else {
    PyErr_SetString(PyExc_ValueError, "a source node has no trace id");
    r = -1;
  }
  Py_DECREF(tid);
  return r;
}

static PyObject *configure(PyObject *Py_UNUSED(self), PyObject *args) {
  /* configure(UOp, Ops.BUFFER): find the slots of op, dtype, src and arg; the op of nodes that own memory */
  PyObject *type, *op;
  if (!PyArg_ParseTuple(args, "O!O:configure", &PyType_Type, &type, &op)) return NULL;
  const char *names[4] = {"op", "dtype", "src", "arg"};
  Py_ssize_t offs[4];
  for (int i = 0; i < 4; i++) {
    PyObject *d = PyObject_GetAttrString(type, names[i]);
    if (d == NULL) return NULL;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok) offs[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) {
      PyErr_Format(PyExc_TypeError, "%s is not an object slot of the UOp type", names[i]);
      return NULL;
    }
  }
  Py_INCREF(type);
  Py_XSETREF(uop_type, (PyTypeObject *)type);
  Py_INCREF(op);
  Py_XSETREF(owns_memory, op);
  off_op = offs[0];
  off_dtype = offs[1];
  off_src = offs[2];
  off_arg = offs[3];
  /* a negative tp_dictoffset counts from the end of the object: for a fixed-size one, from tp_basicsize */
  PyTypeObject *t = (PyTypeObject *)type;
  Py_ssize_t d = t->tp_dictoffset;
#ifdef Py_TPFLAGS_MANAGED_DICT
  int managed = (t->tp_flags & Py_TPFLAGS_MANAGED_DICT) != 0; /* (3.11+) the dict is not at an offset */
#else
  int managed = 0;
#endif
  off_dict = (t->tp_itemsize == 0 && !managed && d != 0) ? (d < 0 ? t->tp_basicsize + d : d) : -1;
  Py_RETURN_NONE;
}

static PyObject *tid_of(PyObject *s) {
  /* a new reference to s._tid: most UOps have no instance dict at all (only a transient one gets one, for its _tid),
     and then it is the class's None, found without an attribute lookup */
  if (Py_TYPE(s) == uop_type && off_dict > 0 && *(PyObject **)((char *)s + off_dict) == NULL) Py_RETURN_NONE;
  return PyObject_GetAttr(s, str_tid);
}

typedef struct {
  PyObject *ids, *add, *new_id, *token, *give;
  int depth;
} Walk;

static int walk(Walk *w, PyObject *x) {
  /* Give x and the nodes below it without an id an id, sources first: 1 if x is transient, 0 if kept, -1 on error. */
  if (w->depth >= MAX_DEPTH) {
    PyErr_SetString(PyExc_RecursionError, "a trace's node walk went too deep");
    return -1;
  }
  if (Py_EnterRecursiveCall(" in a trace's node walk")) return -1;
  w->depth++;
  int result = -1, transient;
  PyObject *src = NULL, *op = field(x, off_op, "op");
  if (op == NULL) goto done;
  transient = op == owns_memory;
  Py_DECREF(op);
  if ((src = field(x, off_src, "src")) == NULL) goto done;
  if (!PyTuple_Check(src)) {
    PyErr_SetString(PyExc_TypeError, "a node's src is not a tuple");
    goto done;
  }
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(src); j++) {
    PyObject *s = PyTuple_GET_ITEM(src, j);
    int known = PyDict_Contains(w->ids, s);
    if (known < 0) goto done;
    if (known) continue;
    PyObject *tid = tid_of(s);
    if (tid == NULL) goto done;
    int mine = PyTuple_Check(tid) && PyTuple_GET_SIZE(tid) == 2 && PyTuple_GET_ITEM(tid, 0) == w->token;
    Py_DECREF(tid);
    if (!mine) {
      int r = walk(w, s);
      if (r < 0) goto done;
      if (r == 0) continue;
    }
    transient = 1;
  }
  if (transient) {
    PyObject *r = PyObject_CallOneArg(w->give, x);
    if (r == NULL) goto done;
    Py_DECREF(r);
    result = 1;
  } else {
    PyObject *nid = PyObject_CallNoArgs(w->new_id);
    if (nid == NULL) goto done;
    int err = PyDict_SetItem(w->ids, x, nid);
    Py_DECREF(nid);
    if (err < 0) goto done;
    PyObject *r = PyObject_CallOneArg(w->add, x);
    if (r == NULL) goto done;
    Py_DECREF(r);
    result = 0;
  }
done:
  Py_XDECREF(src);
  w->depth--;
  Py_LeaveRecursiveCall();
  return result;
}

static PyObject *visit(PyObject *Py_UNUSED(self), PyObject *args) {
  Walk w = {0};
  PyObject *x;
  if (!PyArg_ParseTuple(args, "O!OOOOO:visit", &PyDict_Type, &w.ids, &w.add, &w.new_id, &w.token, &w.give, &x))
    return NULL;
  if (uop_type == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "visit() before configure()");
    return NULL;
  }
  /* the arguments are held by the caller's tuple for the whole walk */
  int r = walk(&w, x);
  if (r < 0) return NULL;
  return PyBool_FromLong(r);
}

static PyObject *node_columns(PyObject *Py_UNUSED(self), PyObject *args) {
  PyObject *nodes, *ids;
  Codes dt = {0}, ar = {0};
  if (!PyArg_ParseTuple(args, "O!O!O!O!OO:node_columns", &PyList_Type, &nodes, &PyDict_Type, &ids, &PyDict_Type,
                        &dt.by_id, &PyDict_Type, &ar.by_id, &dt.code, &ar.code))
    return NULL;
  if (uop_type == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "node_columns() before configure()");
    return NULL;
  }
  /* a reference to the list: a code callback runs Python code, which may change what the caller passed */
  Py_INCREF(nodes);
  Py_ssize_t n = PyList_GET_SIZE(nodes);
  Column op, dtype, arg, nsrc, src;
  op.data = dtype.data = arg.data = nsrc.data = src.data = NULL;
  PyObject *result = NULL;
  if (col_init(&op, n) < 0 || col_init(&dtype, n) < 0 || col_init(&arg, n) < 0 || col_init(&nsrc, n) < 0 ||
      col_init(&src, 2 * n) < 0)
    goto done;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
    PyObject *node = PyList_GET_ITEM(nodes, i);
    Py_INCREF(node);
    PyObject *f_op = field(node, off_op, "op"), *f_dtype = NULL, *f_arg = NULL, *f_src = NULL;
    int ok = 0;
    long long v;
    if (f_op == NULL || (v = as_u32(f_op)) < 0 || col_push(&op, (unsigned long long)v) < 0) goto node_done;
    if ((f_dtype = field(node, off_dtype, "dtype")) == NULL || (v = code_of(&dt, f_dtype)) < 0 ||
        col_push(&dtype, (unsigned long long)v) < 0)
      goto node_done;
    if ((f_arg = field(node, off_arg, "arg")) == NULL || (v = code_of(&ar, f_arg)) < 0 ||
        col_push(&arg, (unsigned long long)v) < 0)
      goto node_done;
    if ((f_src = field(node, off_src, "src")) == NULL) goto node_done;
    if (!PyTuple_Check(f_src)) {
      PyErr_SetString(PyExc_TypeError, "a node's src is not a tuple");
      goto node_done;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(f_src);
    if (col_push(&nsrc, (unsigned long long)k) < 0) goto node_done;
    for (Py_ssize_t j = 0; j < k; j++) {
      if ((v = src_id(ids, PyTuple_GET_ITEM(f_src, j))) < 0 || col_push(&src, (unsigned long long)v) < 0)
        goto node_done;
    }
    ok = 1;
  node_done:
    Py_XDECREF(f_op);
    Py_XDECREF(f_dtype);
    Py_XDECREF(f_arg);
    Py_XDECREF(f_src);
    Py_DECREF(node);
    if (!ok) goto done;
  }
  result = Py_BuildValue("(NNNNN)", col_bytes(&op), col_bytes(&dtype), col_bytes(&arg), col_bytes(&nsrc),
                         col_bytes(&src));
done:
  Py_XDECREF(dt.last);
  Py_XDECREF(ar.last);
  Py_DECREF(nodes);
  PyMem_Free(op.data);
  PyMem_Free(dtype.data);
  PyMem_Free(arg.data);
  PyMem_Free(nsrc.data);
  PyMem_Free(src.data);
  return result;
}

static PyMethodDef methods[] = {
  {"configure", configure, METH_VARARGS,
   "configure(UOp, Ops.BUFFER): where the UOp type keeps op, dtype, src and arg; the op of nodes that own memory."},
  {"visit", visit, METH_VARARGS,
   "visit(ids, add, new_id, token, give, x) -> bool: give x and the nodes below it without a trace id one, sources "
   "first (ids[node] = new_id(), then add(node)); a transient node goes to give(node) instead. True if x is "
   "transient (see compiler/trace/nodes.py, _visit)."},
  {"node_columns", node_columns, METH_VARARGS,
   "node_columns(nodes, ids, dtype_ids, arg_ids, dtype_code, arg_code) -> (op, dtype, arg, nsrc, src): five columns "
   "of little-endian u32 (see compiler/trace/columns.py)."},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
  str_tid = PyUnicode_InternFromString("_tid");
  if (str_tid == NULL) return NULL;
  return PyModule_Create(&module);
}
