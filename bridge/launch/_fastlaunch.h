/* ptxbridge.launch._fastlaunch's two halves: what _fastlaunch.c (plans, the module) exports to _launcher.c
 * (the vectorcall Launcher in front of them) and back.  The launch ABI itself is launch_abi.h. */
#ifndef PTXBRIDGE_FASTLAUNCH_H
#define PTXBRIDGE_FASTLAUNCH_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyTypeObject PlanType;
extern PyTypeObject LauncherType;

/* 4 / (4,) / (4, 2) / [4, 2, 1] of exact positive ints below 2**31 -> out; 0 (no error set) for
 * anything else, which the Python path then judges. */
int parse_dim(PyObject *value, unsigned out[3]);

/* One launch of a Plan over argv[0:nargs]: 1 when the driver was called (its CUresult in *code),
 * 0 when declined (nothing launched, no error set), -1 with a Python error set. */
int plan_run(PyObject *plan, PyObject *const *argv, Py_ssize_t nargs, const unsigned grid[3],
             const unsigned block[3], long shared, PyObject *stream, int *code);

/* Interns the names and readies LauncherType: 0 with a Python error set. */
int launcher_ready(void);

#endif
