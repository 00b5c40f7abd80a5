#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <frameobject.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#include "internal/pycore_code.h"
#define O(t,f) printf("%-40s %5zu\n", #t "." #f, offsetof(t,f))
#define S(t) printf("%-40s %5zu\n", "sizeof(" #t ")", sizeof(t))
int main(void){
  printf("PY_VERSION %s\n", PY_VERSION);
  S(_PyRuntimeState);
#if PY_VERSION_HEX >= 0x030D0000
  O(_PyRuntimeState, debug_offsets);
#endif
  O(_PyRuntimeState, interpreters.head);
  O(_PyRuntimeState, interpreters.main);
#if PY_VERSION_HEX < 0x030C0000
  O(_PyRuntimeState, gilstate);
  O(_PyRuntimeState, gilstate.tstate_current);
  O(_PyRuntimeState, gilstate.autoTSSkey);
#else
  O(_PyRuntimeState, autoTSSkey);
#endif
#if PY_VERSION_HEX < 0x030C0000 && PY_VERSION_HEX >= 0x030B0000
  O(_PyRuntimeState, _finalizing);
#endif
  O(PyInterpreterState, next);
#if PY_VERSION_HEX >= 0x030B0000
  O(PyInterpreterState, threads.head);
#else
  O(PyInterpreterState, tstate_head);
#endif
  O(PyInterpreterState, id);
#if PY_VERSION_HEX >= 0x030C0000
  O(PyInterpreterState, ceval.gil);
  O(PyInterpreterState, _gil);
#endif
#if PY_VERSION_HEX < 0x030C0000
  O(PyInterpreterState, ceval);
#endif
  S(PyThreadState);
  O(PyThreadState, prev);
  O(PyThreadState, next);
  O(PyThreadState, interp);
#if PY_VERSION_HEX >= 0x030D0000
  O(PyThreadState, current_frame);
  O(PyThreadState, eval_breaker);
#elif PY_VERSION_HEX >= 0x030B0000
  O(PyThreadState, cframe);
  O(_PyCFrame, current_frame);
  O(_PyCFrame, previous);
#else
  O(PyThreadState, frame);
  O(PyThreadState, cframe);
#endif
  O(PyThreadState, thread_id);
#if PY_VERSION_HEX >= 0x030B0000
  O(PyThreadState, native_thread_id);
#endif
  O(PyThreadState, id);
#if PY_VERSION_HEX >= 0x030C0000
  O(PyThreadState, _status);
#endif
#if PY_VERSION_HEX >= 0x030B0000
  S(_PyInterpreterFrame);
# if PY_VERSION_HEX >= 0x030D0000
  O(_PyInterpreterFrame, f_executable);
  O(_PyInterpreterFrame, instr_ptr);
# else
  O(_PyInterpreterFrame, f_code);
  O(_PyInterpreterFrame, prev_instr);
# endif
  O(_PyInterpreterFrame, previous);
  FUNCOBJ
  O(_PyInterpreterFrame, f_globals);
  O(_PyInterpreterFrame, f_locals);
  O(_PyInterpreterFrame, frame_obj);
  O(_PyInterpreterFrame, stacktop);
# if PY_VERSION_HEX < 0x030C0000
  O(_PyInterpreterFrame, is_entry);
# else
  O(_PyInterpreterFrame, return_offset);
# endif
  O(_PyInterpreterFrame, owner);
  O(_PyInterpreterFrame, localsplus);
  O(PyFrameObject, f_frame);
  O(PyFrameObject, f_back);
  O(PyGenObject, gi_iframe);
#else
  S(PyFrameObject);
  O(PyFrameObject, f_back);
  O(PyFrameObject, f_code);
  O(PyFrameObject, f_lasti);
  O(PyFrameObject, f_lineno);
  O(PyFrameObject, f_gen);
  O(PyFrameObject, f_state);
#endif
  S(PyCodeObject);
  O(PyCodeObject, co_argcount);
  O(PyCodeObject, co_kwonlyargcount);
  O(PyCodeObject, co_flags);
  O(PyCodeObject, co_firstlineno);
  O(PyCodeObject, co_filename);
  O(PyCodeObject, co_name);
  O(PyCodeObject, co_linetable);
#if PY_VERSION_HEX >= 0x030B0000
  O(PyCodeObject, co_qualname);
  O(PyCodeObject, co_code_adaptive);
  O(PyCodeObject, co_nlocalsplus);
#if PY_VERSION_HEX >= 0x030C0000
  O(PyCodeObject, co_framesize);
#endif
#else
  O(PyCodeObject, co_code);
#endif
  S(PyObject); S(PyVarObject);
  O(PyVarObject, ob_size);
  S(PyASCIIObject); S(PyCompactUnicodeObject); S(PyUnicodeObject);
  O(PyASCIIObject, length);
  O(PyASCIIObject, hash);
  O(PyASCIIObject, state);
#if PY_VERSION_HEX < 0x030C0000
  O(PyASCIIObject, wstr);
  O(PyCompactUnicodeObject, wstr_length);
#endif
  O(PyCompactUnicodeObject, utf8_length);
  O(PyCompactUnicodeObject, utf8);
  O(PyUnicodeObject, data);
  O(PyBytesObject, ob_sval);
  O(PyTupleObject, ob_item);
  O(PyTypeObject, tp_name);
  O(PyTypeObject, tp_basicsize);
  return 0;
}
