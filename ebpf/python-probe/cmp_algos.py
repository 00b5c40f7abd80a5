# Compare OTel's and py-spy's 3.11+ location-table walkers against CPython's co_lines() (ground truth)
import gc, types, sys
def varint(t, i):
    b = t[i]; i += 1; val = b & 63; shift = 0
    while b & 64:
        b = t[i]; i += 1; shift += 6; val |= (b & 63) << shift
    return val, i
def svarint(t, i):
    v, i = varint(t, i); return (-(v >> 1) if v & 1 else v >> 1), i
def entries(t):
    i = 0
    while i < len(t):
        first = t[i]; i += 1
        code = (first >> 3) & 15; length = (first & 7) + 1
        if code == 15: d = None
        elif code == 14:
            d, i = svarint(t, i); _, i = varint(t, i); _, i = varint(t, i); _, i = varint(t, i)
        elif code == 13: d, i = svarint(t, i)
        elif code >= 10: d = code - 10; i += 2
        else: d = 0; i += 1
        yield code, length, d
def ours(co, idx):
    line = co.co_firstlineno; addr = 0
    for code, length, d in entries(co.co_linetable):
        if d is not None: line += d
        if addr <= idx < addr + length:
            return None if d is None else line
        addr += length
def otel(co, bci):  # walkLocationTable: returns delta from firstlineno, 0 => unknown
    curI = 0; line = 0; it = entries(co.co_linetable)
    while curI <= bci:
        try: code, length, d = next(it)
        except StopIteration: return 0
        curI += length
        if code == 15: line = -1
        else: line += d
    return max(line, 0)
def pyspy(co, byte_off):  # CompactCodeObjectImpl::get_line_number, lasti = byte offset
    line = co.co_firstlineno; addr = 0
    for code, length, d in entries(co.co_linetable):
        addr += length * 2
        line += 0 if d is None else d
        if addr >= byte_off: break
    return line
codes = set(); stack = [o.__code__ for o in gc.get_objects() if isinstance(o, types.FunctionType)]; allc = []
while stack:
    c = stack.pop()
    if id(c) in codes: continue
    codes.add(id(c)); allc.append(c); stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
n = bo = bp = bu = 0
for c in allc:
    for s, e, line in c.co_lines():
        for off in range(s, e, 2):
            n += 1; idx = off // 2
            if ours(c, idx) != line: bu += 1
            o = otel(c, idx); o = None if o == 0 and line != c.co_firstlineno else c.co_firstlineno + o
            if o != line and not (line is None): bo += 1
            if pyspy(c, off) != line and line is not None: bp += 1
print(sys.version.split()[0], "instructions", n, "ours-mismatch", bu, "otel-mismatch(line known)", bo, "pyspy-mismatch(line known)", bp)
def otel_fixed(co, bci):
    curI = 0; line = 0; it = entries(co.co_linetable)
    while curI <= bci:
        code, length, d = next(it)
        curI += length
        if code != 15: line += d
    return line
def pyspy_fixed(co, byte_off):
    line = co.co_firstlineno; addr = 0
    for code, length, d in entries(co.co_linetable):
        addr += length * 2
        line += 0 if d is None else d
        if addr > byte_off: break
    return line
a = b = 0
for c in allc:
    for s, e, line in c.co_lines():
        if line is None: continue
        for off in range(s, e, 2):
            if c.co_firstlineno + otel_fixed(c, off // 2) != line: a += 1
            if pyspy_fixed(c, off) != line: b += 1
print("otel without the -1 reset:", a, " pyspy with '>' instead of '>=':", b)
