# While a worker thread is blocked (GIL released) in Event.wait, read its Python stack from the main
# thread via interp->threads list (matched by native_thread_id), and check its TSD slot too.
import ctypes, sys, threading, time
V = sys.version_info[:2]
O = {(3,10): (32, 8, 176, None, 24, None, 584), (3,11): (40, 16, 152, 160, 56, 8, 592),
     (3,12): (40, 72, 136, 144, 56, 0, 1544), (3,13): (632, 7344, 152, 160, 72, None, 2160)}[V]
FR = {(3,10): (32, 24), (3,11): (32, 48), (3,12): (0, 8), (3,13): (0, 8)}[V]  # f_code, previous/f_back
ASCII = 48 if V <= (3, 11) else 40
u64 = lambda a: ctypes.c_uint64.from_address(a).value
api = ctypes.pythonapi; rt = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
libc = ctypes.CDLL(None)
info = {}
def blocked_worker_function():
    fs = ctypes.c_uint64(); libc.syscall(158, 0x1003, ctypes.byref(fs))
    info["fs"] = fs.value; info["tid"] = threading.get_native_id(); info["ident"] = threading.get_ident()
    api.PyThreadState_Get.restype = ctypes.c_void_p; info["ts"] = api.PyThreadState_Get()
    ev.wait()
ev = threading.Event()
t = threading.Thread(target=blocked_worker_function); t.start(); time.sleep(0.2)
key = ctypes.c_uint32.from_address(rt + O[6] + 4).value
print(sys.version.split()[0], "worker TSD slot == worker tstate:", u64(info["fs"] + 0x310 + key * 16 + 8) == info["ts"])
interp = u64(rt + O[0]); ts = u64(interp + O[1]); found = None
while ts:
    tid_match = (u64(ts + O[3]) == info["tid"]) if O[3] else (u64(ts + O[2]) == info["ident"])
    if tid_match: found = ts
    ts = u64(ts + 8)
print("  found worker tstate by", "native_thread_id" if O[3] else "thread_id(pthread_t)", ":", found == info["ts"])
if V == (3, 10): f = u64(found + O[4])
elif V >= (3, 13): f = u64(found + O[4])
else: f = u64(u64(found + O[4]) + O[5])
names = []
while f:
    c = u64(f + FR[0])
    if c != id(None):
        n = u64(c + (112 if V == (3,10) else 120))
        st = ctypes.c_uint32.from_address(n + 32).value
        names.append(ctypes.string_at(n + ASCII, u64(n + 16)).decode() if (st >> 6) & 1 else "?")
    else:
        names.append("<None>")
    f = u64(f + FR[1])
print("  worker python stack (leaf first):", names)
ev.set(); t.join()
