/* ptxbridge.launch._fastlaunch: attribute reads of one Python type, its descriptors looked up once.
 *
 * A cupy.ndarray's facts are properties (Cython getset descriptors); PyObject_GetAttr finds each one
 * again per read (the type's MRO, the instance dict).  An AttrCache keeps, for the last type it saw,
 * the data descriptor of each name and the type's version tag: while the tag is unchanged (CPython
 * clears it whenever the type or a base is modified) the descriptor's getter is called directly, which
 * is what PyObject_GetAttr would end up calling (a data descriptor wins over the instance dict).  For a
 * getset descriptor that is its C getter itself: getset_get's one other step, the isinstance test of
 * the object against the descriptor's class, is made once per type here (for cupy.ndarray, a subclass
 * of _ndarray_base, getset_get walks the MRO on every read).
 * A name that is not a data descriptor there is read with PyObject_GetAttr.
 */
#include "_fastlaunch.h"

static void refresh(AttrCache *c, PyTypeObject *type) {
    Py_XSETREF(c->type, (PyTypeObject *)Py_NewRef(type));
    for (int k = 0; k < c->count; ++k) {
        PyObject *found = _PyType_Lookup(type, c->names[k]); /* borrowed; assigns the version tag */
        int data = found != NULL && Py_TYPE(found)->tp_descr_get != NULL && Py_TYPE(found)->tp_descr_set != NULL;
        Py_XSETREF(c->descr[k], data ? Py_NewRef(found) : NULL);
        /* getset_get's isinstance test, made once: a descriptor copied into an unrelated class keeps it */
        c->get[k] = data && Py_IS_TYPE(found, &PyGetSetDescr_Type)
                    && PyType_IsSubtype(type, PyDescr_TYPE(found)) ? ((PyGetSetDescrObject *)found)->d_getset->get
                                                                  : NULL;
    }
    c->version = (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? type->tp_version_tag : 0;
}

PyObject *cached_attr(AttrCache *c, PyObject *obj, int k) {
    PyTypeObject *type = Py_TYPE(obj);
    if (type != c->type || c->version == 0 || type->tp_version_tag != c->version
        || !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        refresh(c, type);
    PyObject *descr = c->descr[k];
    if (descr == NULL || c->version == 0) return PyObject_GetAttr(obj, c->names[k]);
    if (c->get[k] != NULL) return c->get[k](obj, ((PyGetSetDescrObject *)descr)->d_getset->closure);
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)type);
}

int cached_int(AttrCache *c, PyObject *obj, int k, long long *out) {
    PyObject *value = cached_attr(c, obj, k);
    int ok = value != NULL && exact_int(value, out);
    Py_XDECREF(value);
    if (!ok) PyErr_Clear();
    return ok;
}

void attr_cache_clear(AttrCache *c) {
    Py_CLEAR(c->type);
    for (int k = 0; k < c->count; ++k) Py_CLEAR(c->descr[k]);
}
