# Verify CPython struct offsets at runtime by reading the interpreter's own memory via ctypes.
# Usage: <python> verify.py   (works on 3.10, 3.11, 3.12, 3.13 x86_64, GIL builds)
import ctypes, sys, threading, gc, types, struct

V = sys.version_info[:2]
OFF = {
    (3, 10): dict(rt_interp_head=32, rt_tstate_current=568, rt_autotss=584,
                  is_threads_head=8, ts_next=8, ts_interp=16, ts_frame=24, ts_thread_id=176,
                  ts_native_thread_id=None,
                  # PyFrameObject (heap object)
                  fr_back=24, fr_code=32, fr_lasti=96,
                  co_firstlineno=40, co_filename=104, co_name=112, co_qualname=None, co_linetable=120,
                  co_code_adaptive=None, ascii_data=48, compact_data=72, gi_iframe=None),
    (3, 11): dict(rt_interp_head=40, rt_tstate_current=576, rt_autotss=592,
                  is_threads_head=16, ts_next=8, ts_interp=16, ts_cframe=56, cf_current_frame=8,
                  ts_thread_id=152, ts_native_thread_id=160,
                  fr_code=32, fr_back=48, fr_instr=56, fr_is_entry=68, fr_owner=69,
                  co_firstlineno=72, co_filename=112, co_name=120, co_qualname=128, co_linetable=136,
                  co_code_adaptive=184, ascii_data=48, compact_data=72, gi_iframe=80),
    (3, 12): dict(rt_interp_head=40, rt_tstate_current=None, rt_autotss=1544,
                  is_threads_head=72, ts_next=8, ts_interp=16, ts_cframe=56, cf_current_frame=0,
                  ts_thread_id=136, ts_native_thread_id=144,
                  fr_code=0, fr_back=8, fr_instr=56, fr_is_entry=None, fr_owner=70,
                  co_firstlineno=68, co_filename=112, co_name=120, co_qualname=128, co_linetable=136,
                  co_code_adaptive=192, ascii_data=40, compact_data=56, gi_iframe=72),
    (3, 13): dict(rt_interp_head=632, rt_tstate_current=None, rt_autotss=2160,
                  is_threads_head=7344, ts_next=8, ts_interp=16, ts_current_frame=72,
                  ts_thread_id=152, ts_native_thread_id=160,
                  fr_code=0, fr_back=8, fr_instr=56, fr_is_entry=None, fr_owner=70,
                  co_firstlineno=68, co_filename=112, co_name=120, co_qualname=128, co_linetable=136,
                  co_code_adaptive=200, ascii_data=40, compact_data=56, gi_iframe=72),
}[V]

u64 = lambda a: ctypes.c_uint64.from_address(a).value
u32 = lambda a: ctypes.c_uint32.from_address(a).value
i32 = lambda a: ctypes.c_int32.from_address(a).value
u8 = lambda a: ctypes.c_uint8.from_address(a).value
ok_count = 0
def check(name, got, want):
    global ok_count
    status = "OK " if got == want else "FAIL"
    if got == want:
        ok_count += 1
    print(f"  [{status}] {name}: got={got!r} want={want!r}")

api = ctypes.pythonapi
api.PyThreadState_Get.restype = ctypes.c_void_p
api.PyInterpreterState_Get.restype = ctypes.c_void_p
runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
print(sys.executable, sys.version.split()[0], "_PyRuntime @ 0x%x" % runtime)
try:
    pv = ctypes.c_uint32.in_dll(api, "Py_Version").value
    print("  Py_Version = 0x%08x  (sys.hexversion 0x%08x)" % (pv, sys.hexversion))
except ValueError:
    print("  Py_Version symbol: absent")

# ---- strings ----
def read_str(addr):
    """Read a str object (compact) from memory."""
    state = u32(addr + 32)
    length = u64(addr + 16)
    kind = (state >> 2) & 7
    compact = (state >> 5) & 1
    ascii_ = (state >> 6) & 1
    assert compact, "non-compact string"
    if ascii_:
        return ctypes.string_at(addr + OFF["ascii_data"], length).decode("ascii")
    raw = ctypes.string_at(addr + OFF["compact_data"], length * kind)
    return raw.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind])

def read_bytes(addr):
    n = u64(addr + 16)  # ob_size
    return ctypes.string_at(addr + 32, n)  # ob_sval

# ---- line tables ----
def varint(t, i):
    b = t[i]; i += 1
    val = b & 63; shift = 0
    while b & 64:
        b = t[i]; i += 1
        shift += 6
        val |= (b & 63) << shift
    return val, i

def svarint(t, i):
    v, i = varint(t, i)
    return (-(v >> 1) if v & 1 else (v >> 1)), i

def addr2line_311(table, firstlineno, unit_index):
    """3.11+ location table. unit_index = instruction index in code units (2 bytes)."""
    line = firstlineno
    addr = 0  # in code units
    i = 0
    while i < len(table):
        first = table[i]; i += 1
        assert first & 0x80
        code = (first >> 3) & 15
        length = (first & 7) + 1
        if code == 15:
            ldelta = None
        elif code == 14:
            ldelta, i = svarint(table, i)
            _, i = varint(table, i); _, i = varint(table, i); _, i = varint(table, i)
        elif code == 13:
            ldelta, i = svarint(table, i)
        elif code >= 10:
            ldelta = code - 10; i += 2
        else:
            ldelta = 0; i += 1
        if ldelta is not None:
            line += ldelta
        if addr <= unit_index < addr + length:
            return None if ldelta is None else line
        addr += length
    return None

def addr2line_310(table, firstlineno, byte_offset):
    """3.10 co_linetable: pairs (sdelta unsigned byte, ldelta signed byte; -128 = no line)."""
    line = firstlineno
    end = 0
    for j in range(0, len(table) - 1, 2):
        sdelta = table[j]; ldelta = struct.unpack("b", table[j + 1:j + 2])[0]
        start = end; end = start + sdelta
        if ldelta == -128:
            cur = None
        else:
            line += ldelta; cur = line
        if start <= byte_offset < end:
            return cur
    return None

def code_line(code_addr, unit_index):
    table = read_bytes(u64(code_addr + OFF["co_linetable"]))
    first = i32(code_addr + OFF["co_firstlineno"])
    if V >= (3, 11):
        return addr2line_311(table, first, unit_index)
    return addr2line_310(table, first, unit_index * 2)

# ---- 1. runtime -> interp -> tstate ----
print("== runtime chain")
interp = u64(runtime + OFF["rt_interp_head"])
check("_PyRuntime.interpreters.head == PyInterpreterState_Get()", interp, api.PyInterpreterState_Get())
tstate_me = api.PyThreadState_Get()

results = {}
ready = threading.Event(); stop = threading.Event()
def worker():
    results["native"] = threading.get_native_id(); results["ident"] = threading.get_ident()
    ready.set(); stop.wait()
t = threading.Thread(target=worker); t.start(); ready.wait()

ts = u64(interp + OFF["is_threads_head"])
seen = []
while ts:
    seen.append((ts, u64(ts + OFF["ts_thread_id"]),
                 u64(ts + OFF["ts_native_thread_id"]) if OFF["ts_native_thread_id"] else None,
                 u64(ts + OFF["ts_interp"])))
    ts = u64(ts + OFF["ts_next"])
stop.set(); t.join()
check("threads list contains PyThreadState_Get()", tstate_me in [s[0] for s in seen], True)
check("every tstate.interp == interp", all(s[3] == interp for s in seen), True)
check("thread_id set == {main ident, worker ident}", sorted(s[1] for s in seen),
      sorted([threading.main_thread().ident, results["ident"]]))
if OFF["ts_native_thread_id"]:
    check("native_thread_id set == {main tid, worker tid}", sorted(s[2] for s in seen),
          sorted([threading.main_thread().native_id, results["native"]]))
check("threads.head is newest thread (worker)", seen[0][1], results["ident"])
if OFF["rt_tstate_current"]:
    check("_PyRuntime.gilstate.tstate_current == PyThreadState_Get()", u64(runtime + OFF["rt_tstate_current"]), tstate_me)

# pthread TSD: glibc x86_64 specific_1stblock at fs:0x310, entry size 16, data at +8
libc = ctypes.CDLL(None, use_errno=True)
fsbase = ctypes.c_uint64()
libc.syscall(158, 0x1003, ctypes.byref(fsbase))  # arch_prctl(ARCH_GET_FS)
tss_initialized = i32(runtime + OFF["rt_autotss"]); key = u32(runtime + OFF["rt_autotss"] + 4)
print("  autoTSSkey: _is_initialized=%d key=%d fsbase=0x%x" % (tss_initialized, key, fsbase.value))
check("*(fsbase+0x310+key*16+8) == PyThreadState_Get() (pthread_getspecific(autoTSSkey))",
      u64(fsbase.value + 0x310 + key * 16 + 8), tstate_me)

# 3.13: debug offsets
if V >= (3, 13):
    print("== _Py_DebugOffsets at _PyRuntime+0")
    check("cookie", ctypes.string_at(runtime, 8), b"xdebugpy")
    check("version == sys.hexversion", u64(runtime + 8), sys.hexversion)
    check("free_threaded", u64(runtime + 16), 0)
    # runtime_state(size, finalizing, interpreters_head) starts at 24
    check("runtime_state.interpreters_head", u64(runtime + 24 + 16), OFF["rt_interp_head"])
    # interpreter_state starts at 48: size,id,next,threads_head,...
    check("interpreter_state.threads_head", u64(runtime + 48 + 24), OFF["is_threads_head"])
    base = 48 + 13 * 8  # thread_state: size,prev,next,interp,current_frame,thread_id,native_thread_id,datastack_chunk,status
    ts_vals = [u64(runtime + base + 8 * k) for k in range(9)]
    print("  thread_state:", ts_vals)
    check("thread_state.current_frame", ts_vals[4], OFF["ts_current_frame"])
    check("thread_state.native_thread_id", ts_vals[6], OFF["ts_native_thread_id"])
    base += 9 * 8  # interpreter_frame: size, previous, executable, instr_ptr, localsplus, owner
    fr_vals = [u64(runtime + base + 8 * k) for k in range(6)]
    print("  interpreter_frame:", fr_vals)
    check("interpreter_frame.{previous,executable,instr_ptr,owner}", (fr_vals[1], fr_vals[2], fr_vals[3], fr_vals[5]),
          (OFF["fr_back"], OFF["fr_code"], OFF["fr_instr"], OFF["fr_owner"]))
    base += 6 * 8  # code_object: size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds, co_code_adaptive
    co_vals = [u64(runtime + base + 8 * k) for k in range(10)]
    print("  code_object:", co_vals)
    check("code_object.{filename,name,qualname,linetable,firstlineno,co_code_adaptive}",
          (co_vals[1], co_vals[2], co_vals[3], co_vals[4], co_vals[5], co_vals[9]),
          (OFF["co_filename"], OFF["co_name"], OFF["co_qualname"], OFF["co_linetable"], OFF["co_firstlineno"], OFF["co_code_adaptive"]))

# ---- 2. frame walk ----
def current_frame(tstate):
    if V == (3, 10):
        return u64(tstate + OFF["ts_frame"])
    if V >= (3, 13):
        return u64(tstate + OFF["ts_current_frame"])
    return u64(u64(tstate + OFF["ts_cframe"]) + OFF["cf_current_frame"])

def walk(tstate):
    out = []
    f = current_frame(tstate)
    while f:
        code = u64(f + OFF["fr_code"])
        if V == (3, 10):
            lasti_units = i32(f + OFF["fr_lasti"])
            owner = None; entry = None
        else:
            instr = u64(f + OFF["fr_instr"])
            lasti_units = (instr - code - OFF["co_code_adaptive"]) // 2
            owner = u8(f + OFF["fr_owner"])
            entry = u8(f + OFF["fr_is_entry"]) if OFF["fr_is_entry"] else (owner == 3)
        out.append(dict(frame=f, code=code, lasti=lasti_units, owner=owner, entry=entry))
        f = u64(f + OFF["fr_back"])
    return out

def describe(fr):
    c = fr["code"]
    if V >= (3, 13) and c == id(None):
        return "<None executable (shim)>"
    name = read_str(u64(c + OFF["co_name"]))
    qual = read_str(u64(c + OFF["co_qualname"])) if OFF["co_qualname"] else None
    fn = read_str(u64(c + OFF["co_filename"]))
    line = code_line(c, fr["lasti"]) if fr["lasti"] >= 0 else None
    return f"{qual or name} ({fn}:{line}) owner={fr['owner']} entry={fr['entry']} lasti={fr['lasti']}"

class Snap:
    pass
def py_frames():
    # start at snapshot()'s caller: those frames are suspended in the same CALL during walk() and here
    f = sys._getframe(2)
    out = []
    while f:
        s = Snap(); s.f_code = f.f_code; s.f_lasti = f.f_lasti; s.f_lineno = f.f_lineno
        out.append(s); f = f.f_back
    return out

def snapshot():
    raw = walk(api.PyThreadState_Get())
    pyf = py_frames()
    return raw, pyf

def compare(raw, pyf, label):
    print("== frame walk:", label)
    k0 = [fr["code"] for fr in raw].index(id(snapshot.__code__))
    for fr in raw[k0:]:
        print("   ", describe(fr))
    # remove shim frames (3.12: code name '<shim>'; 3.13: f_executable None) to align with Python-visible frames
    real = []
    for fr in raw:
        if V >= (3, 12) and fr["owner"] == 3:
            continue
        real.append(fr)
    # frames above snapshot() were live while walking (their memory in the per-thread data stack is
    # reused by later calls), so start at snapshot()'s own frame; py_frames starts at snapshot's caller
    k = [fr["code"] for fr in real].index(id(snapshot.__code__))
    real = real[k + 1:]
    check(label + ": frame count", len(real), len(pyf))
    for fr, f in zip(real, pyf):
        check(label + ": f_code of " + f.f_code.co_name, fr["code"], id(f.f_code))
        check(label + ": lasti*2 == f.f_lasti (" + f.f_code.co_name + ")", fr["lasti"] * 2, f.f_lasti)
        check(label + ": decoded line == f.f_lineno (" + f.f_code.co_name + ")", code_line(fr["code"], fr["lasti"]), f.f_lineno)
        check(label + ": co_name", read_str(u64(fr["code"] + OFF["co_name"])), f.f_code.co_name)
        if OFF["co_qualname"]:
            check(label + ": co_qualname", read_str(u64(fr["code"] + OFF["co_qualname"])), f.f_code.co_qualname)
        check(label + ": co_filename", read_str(u64(fr["code"] + OFF["co_filename"])), f.f_code.co_filename)
        check(label + ": co_firstlineno", i32(fr["code"] + OFF["co_firstlineno"]), f.f_code.co_firstlineno)

class Klass:
    def method(self):
        raw, pyf = snapshot()
        return raw, pyf

def direct():
    return Klass().method()

raw, pyf = direct()
compare(raw, pyf, "direct py->py calls")

# through C: map() calls the function from C => entry frame (3.11 is_entry / 3.12+ shim owner==3)
raw, pyf = list(map(lambda _: direct(), [0]))[0]
raw = raw[[fr["code"] for fr in raw].index(id(snapshot.__code__)):]
compare(raw, pyf, "via C map()")
if V >= (3, 11):
    lam = [fr for fr in raw if fr["code"] != id(None) and fr["owner"] != 3 and read_str(u64(fr["code"] + OFF["co_name"])) == "<lambda>"][0]
    idx = raw.index(lam)
    if V == (3, 11):
        check("3.11: lambda called from C has is_entry=1", lam["entry"], 1)
        check("3.11: frames above are not entry", [r["entry"] for r in raw[:idx]], [0] * idx)
    else:
        check("3.12+: frame below the lambda is a shim with owner==3", raw[idx + 1]["owner"], 3)
        if V == (3, 12):
            check("3.12: shim code name/filename", (read_str(u64(raw[idx + 1]["code"] + OFF["co_name"])), read_str(u64(raw[idx + 1]["code"] + OFF["co_filename"]))), ("<interpreter trampoline>", "<shim>"))

# generators: the frame lives inside the generator object (owner==1)
def gen():
    yield snapshot()
g = gen()
raw, pyf = next(g)
compare(raw, pyf, "generator")
if V >= (3, 11):
    check("generator frame address == id(gen)+gi_iframe", raw[[fr["code"] for fr in raw].index(id(gen.__code__))]["frame"], id(g) + OFF["gi_iframe"])
    check("generator frame owner == FRAME_OWNED_BY_GENERATOR(1)", raw[[fr["code"] for fr in raw].index(id(gen.__code__))]["owner"], 1)

# non-ASCII strings
src = "def h\u00e9llo():\n    return snapshot()\ndef \u51fd\u6570():\n    return snapshot()\n"
ns = {"snapshot": snapshot}
exec(compile(src, "\U0001d4bb_file.py", "exec"), ns)
for fn in ("h\u00e9llo", "\u51fd\u6570"):
    raw, pyf = ns[fn]()
    compare(raw, pyf, "non-ascii " + fn)

# ---- 3. exhaustive line table check over all code objects ----
codes = []
for o in gc.get_objects():
    if isinstance(o, types.FunctionType):
        codes.append(o.__code__)
seen_ids = set(); stack = list(codes); allcodes = []
while stack:
    c = stack.pop()
    if id(c) in seen_ids:
        continue
    seen_ids.add(id(c)); allcodes.append(c)
    stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
bad = 0; total = 0
for c in allcodes:
    want = {}
    for start, end, line in c.co_lines():
        for off in range(start, end, 2):
            want[off] = line
    for off, line in want.items():
        total += 1
        got = code_line(id(c), off // 2)
        if got != line:
            bad += 1
            if bad < 5:
                print("   mismatch", c.co_qualname if V >= (3, 11) else c.co_name, off, got, line)
check("addr2line over %d code objects / %d instructions: mismatches" % (len(allcodes), total), bad, 0)
if V >= (3, 11):
    check("PyCode_Type.tp_basicsize == offsetof(co_code_adaptive)",
          u64(ctypes.addressof(ctypes.c_char.in_dll(api, "PyCode_Type")) + 32), OFF["co_code_adaptive"])
    # co_code_adaptive really holds the bytecode (unspecialized prefix compare is not exact; check length)
    check("type(code).__basicsize__", type(allcodes[0]).__basicsize__, OFF["co_code_adaptive"])
print("TOTAL OK:", ok_count)
