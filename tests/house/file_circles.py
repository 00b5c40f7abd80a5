#!/usr/bin/env python3
"""File circles in product code: the check for issue #33, point 1.

Issue #33 asks for "No file circles anywhere in product code". This script draws, for every
crate of the workspace, the file-level import graph of its product code and prints every
circle in it. Its rule for an arrow is the issue's:

    an arrow from file A to file B when A uses an item defined in B (the crate root's `mod`
    lines and `pub use` re-exports are not arrows, and a use through a re-export points at
    the file that defines the item).

How it reads the code (Python 3, standard library only, no cargo, no rustc):

* Crates: every Cargo.toml under cmd/, pkg/, querylang/, tsdb/ and tests/ (not under target/,
  fuzz/ or node_modules/). Each library and binary target is its own crate (its own module
  tree); test, bench, example targets and build scripts are not product code and are skipped.
* Module tree: from the target's root file, following `mod x;` (x.rs or x/mod.rs, `#[path]`
  honoured) and inline `mod x { ... }`. Items under `#[cfg(test)]` (or `cfg(all(test, ..))`),
  e.g. `#[cfg(test)] mod tests { ... }` and `#[cfg(test)] mod tests;`, are skipped, so files
  only reached that way are never read. Other cfgs (`cfg(any(test, feature = ..))`,
  `cfg(not(test))`, features) count as product code.
* Items defined in a file: struct, enum, union, fn, trait, type, const, static, inline mod,
  macro_rules (with `#[macro_export]` also at the crate root), items declared inside an
  item-level macro call (`thread_local! { static X ..}`, and the names given to a crate-local
  macro whose body declares `struct $name` and the like).
* Uses: `use` trees (braces, `self`, `super`, `crate`, `as`, globs, uniform paths that start
  at a child module or item of the current module), and paths in code that start with
  `crate::`, `super::`, `self::`, `$crate::`, or with a name that the current module defines or
  imports by `use` (e.g. `use crate::foo;` then `foo::Bar`). Paths in serde attributes'
  strings (`with`, `serialize_with`, `deserialize_with`, `default`, `from`, `into`, ...) count.
  A bare name counts only when it was brought in by `use` (or a glob) from a crate path.
  Anything else (std, other crates, locals, fields, methods) draws no arrow.
* Resolution: a path is walked module by module; at each step a name is a child module, an
  item defined there, or a `use` binding there (followed to where it points: this is how
  re-exports lead to the defining file), or a name from a glob import there. Once a path
  reaches an item the rest (associated items, variants) is ignored. A private `use` of an item
  is an arrow by itself (trait imports are used without their name showing); a `pub use`
  (any `pub(..)`) is a re-export and draws no arrow by itself, but uses of its name in the same
  file do. Importing a module draws no arrow; its items used through it do. A path that
  reaches a module but not a known item there (e.g. items made by an unknown macro) points at
  that module's file and is marked with a `?`.
* Arrows from a file to itself are dropped. Circles are the strongly connected groups of more
  than one file; inside each group the script lists, for every arrow in it, the shortest
  circle through that arrow (deduplicated), with the items behind each arrow.

Usage:
    tests/house/file_circles.py                 # every crate; exit 1 if any circle
    tests/house/file_circles.py --crate parca-tsdb
    tests/house/file_circles.py --edges parca-api   # every arrow of a crate, with its items
    tests/house/file_circles.py --unresolved        # also list the `?` arrows

Before the crates it prints each workspace package's lib and bin crate names against the
top-level modules of pkg/grpc-proto's generated code (`parca::..`, `google::..`, from the
.proto files' `package` lines and any generated file under target/), flagging a lib crate
named like one of them. (Cargo itself forbids circles between crates.)

Known limits: it is a token-level reader, not rustc. Paths written in a macro_rules body count
for the file that defines the macro, not for its callers. Block-scoped `use` inside functions is
treated as if it were at the module's top; local variables that shadow a `use`d name are not
tracked (fields, `let x`, parameters and method names are excluded by their syntax); items
produced by macros it does not understand are only found through the `?` fallback; cfg
predicates other than test-only ones are not evaluated; generated code pulled in with
`include!(concat!(env!("OUT_DIR"), ..))` is not read.
"""

import argparse
import os
import re
import sys
from collections import deque

SCAN_DIRS = ("cmd", "pkg", "querylang", "tsdb", "tests")
SKIP_DIRS = {"target", "fuzz", "node_modules", ".git"}

KEYWORDS = {
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move",
    "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true",
    "type", "unsafe", "use", "where", "while", "yield", "macro_rules", "union", "gen",
}
PATH_STARTERS = {"crate", "self", "super", "Self"}
# Tokens before a bare name that make it a declaration, not a use.
DECL_BEFORE = {"let", "mut", "ref", "fn", "struct", "enum", "union", "trait", "type", "const",
               "static", "mod", "macro_rules", "as"}
ITEM_KEYWORDS = {"fn", "struct", "enum", "union", "trait", "type", "const", "static", "mod",
                 "use", "impl", "extern", "macro_rules"}
QUALIFIERS = {"unsafe", "async", "default", "safe"}
SERDE_PATH_KEYS = {"with", "serialize_with", "deserialize_with", "default", "from", "try_from",
                   "into", "getter", "remote"}

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RAW_STR_RE = re.compile(r'[bc]?r(#*)"')
NUM_RE = re.compile(r"[0-9][0-9A-Za-z_]*(?:\.[0-9][0-9A-Za-z_]*)?")
PATH_STR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*$")


# ----------------------------------------------------------------------------------------------
# Lexing: identifiers, punctuation (`::` and `!=` kept whole), literals; comments dropped.


class Tok:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind, text, line):
        self.kind, self.text, self.line = kind, text, line

    def __repr__(self):
        return f"{self.kind}:{self.text}@{self.line}"


def lex(src):
    toks = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            line += src.count("\n", i, j)
            i = j
            continue
        m = RAW_STR_RE.match(src, i) if c in "bcr" else None
        if m:
            close = '"' + m.group(1)
            j = src.find(close, m.end())
            j = n if j < 0 else j
            toks.append(Tok("str", src[m.end():j], line))
            line += src.count("\n", i, j)
            i = j + len(close)
            continue
        if c == '"' or (c in "bc" and src.startswith('"', i + 1)):
            j = i + (1 if c == '"' else 2)
            start = j
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("str", src[start:j], line))
            line += src.count("\n", i, j)
            i = j + 1
            continue
        if c == "'" or (c == "b" and src.startswith("'", i + 1)):
            j = i + (1 if c == "'" else 2)
            if j < n and src[j] == "\\":
                k = src.find("'", j + 2)
                i = n if k < 0 else k + 1
                toks.append(Tok("char", "", line))
                continue
            if j + 1 < n and src[j + 1] == "'":
                toks.append(Tok("char", src[j], line))
                i = j + 2
                continue
            if c == "'":
                m = IDENT_RE.match(src, j)
                i = m.end() if m else j
                toks.append(Tok("life", src[j:i], line))
                continue
        if src.startswith("r#", i):
            m = IDENT_RE.match(src, i + 2)
            if m:
                toks.append(Tok("id", m.group(0), line))
                i = m.end()
                continue
        m = IDENT_RE.match(src, i)
        if m:
            toks.append(Tok("id", m.group(0), line))
            i = m.end()
            continue
        if c.isdigit():
            m = NUM_RE.match(src, i)
            toks.append(Tok("num", m.group(0), line))
            i = m.end()
            continue
        two = src[i:i + 2]
        if two in ("::", "!=", "->", "=>", ".."):
            toks.append(Tok("p", two, line))
            i += 2
            continue
        if not c.isascii() and c.isidentifier():
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            toks.append(Tok("id", src[i:j], line))
            i = j
            continue
        toks.append(Tok("p", c, line))
        i += 1
    return toks


# ----------------------------------------------------------------------------------------------
# The module tree of one crate.


class Module:
    def __init__(self, name, parent, file, child_dir, inline):
        self.name, self.parent, self.file = name, parent, file
        self.child_dir, self.inline = child_dir, inline
        self.children = {}  # name -> Module
        self.defs = {}  # name -> (kind, file, line)
        self.uses = {}  # binding name -> [Use]
        self.globs = []  # [Use]
        self.path = (parent.path + (name,)) if parent else ()


class Use:
    __slots__ = ("module", "segs", "name", "pub", "line", "glob")

    def __init__(self, module, segs, name, pub, line, glob):
        self.module, self.segs, self.name = module, segs, name
        self.pub, self.line, self.glob = pub, line, glob


class Ref:
    __slots__ = ("file", "module", "segs", "line", "kind")

    def __init__(self, file, module, segs, line, kind):
        self.file, self.module, self.segs, self.line, self.kind = file, module, segs, line, kind


class Attr:
    def __init__(self, toks, inner):
        self.toks, self.inner = toks, inner  # toks: inside the brackets
        self.name = toks[0].text if toks else ""

    def cfg_test(self):
        """`#[cfg(test)]` or `#[cfg(all(.., test, ..))]`: compiled only into tests."""
        t = self.toks
        if self.name != "cfg" or len(t) < 3:
            return False
        inner = [x.text for x in t[2:-1]]
        if inner == ["test"]:
            return True
        if inner and inner[0] == "all" and len(inner) > 2:
            depth, arg, args = 0, [], []
            for x in inner[2:-1]:
                if x in "([{":
                    depth += 1
                elif x in ")]}":
                    depth -= 1
                if x == "," and depth == 0:
                    args.append(arg)
                    arg = []
                else:
                    arg.append(x)
            args.append(arg)
            return ["test"] in args
        return False

    def value(self, key):
        t = self.toks
        for k in range(len(t) - 2):
            if t[k].text == key and t[k + 1].text == "=" and t[k + 2].kind == "str":
                return t[k + 2].text
        return None


def matching(T, i, end):
    """T[i] opens a bracket; the index just after its partner."""
    depth = 0
    while i < end:
        x = T[i].text if T[i].kind == "p" else ""
        if x in ("(", "[", "{"):
            depth += 1
        elif x in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return end


def item_end(T, i, end, semi_only=False):
    """The index after the item starting at i: its `;` or its first `{ .. }` at depth 0."""
    while i < end:
        t = T[i]
        if t.kind == "p":
            if t.text == ";":
                return i + 1
            if t.text == "{" and not semi_only:
                return matching(T, i, end)
            if t.text in ("(", "[", "{"):
                i = matching(T, i, end)
                continue
            if t.text in (")", "]", "}"):
                return i  # the end of the enclosing block: the item was cut short
        i += 1
    return end


def expr_end(T, i, end):
    """The index after a statement, field, argument or match arm starting at i."""
    while i < end:
        t = T[i]
        if t.kind == "p":
            if t.text in (";", ","):
                return i + 1
            if t.text in ("(", "[", "{"):
                i = matching(T, i, end)
                continue
            if t.text in (")", "]", "}"):
                return i
        i += 1
    return end


def is_p(T, i, text):
    return i < len(T) and T[i].kind == "p" and T[i].text == text


def is_id(T, i, text=None):
    return i < len(T) and T[i].kind == "id" and (text is None or T[i].text == text)


class Crate:
    def __init__(self, package, kind, name, root_file, ws_root):
        self.package, self.kind, self.name = package, kind, name
        self.root_file = root_file  # absolute
        self.ws_root = ws_root
        self.base = os.path.dirname(root_file)  # files are shown relative to this
        self.files = []  # relative names, in reading order
        self.refs = []
        self.macros = {}  # name -> [(Module, file, line)]
        self.local_macro_defs = {}  # name -> True if its body declares `struct $x` and such
        self.unreadable = []
        self.root = None
        self._memo = {}

    def rel(self, path):
        return os.path.relpath(path, self.base)

    def label(self):
        return f"{self.package} ({self.kind} {self.name})"

    # -- reading -------------------------------------------------------------------------------

    def load(self):
        d = os.path.dirname(self.root_file)
        self.root = Module("crate", None, self.rel(self.root_file), d, False)
        self.read_file(self.root, self.root_file)

    def read_file(self, mod, path):
        try:
            with open(path, encoding="utf-8") as f:
                src = f.read()
        except OSError as e:
            self.unreadable.append(f"{self.rel(path)}: {e}")
            return
        rel = self.rel(path)
        self.files.append(rel)
        T = lex(src)
        self.parse_items(T, 0, len(T), mod, rel)

    def read_attrs(self, T, i, end):
        attrs = []
        while i < end and is_p(T, i, "#"):
            inner = is_p(T, i + 1, "!")
            j = i + (2 if inner else 1)
            if not is_p(T, j, "["):
                break
            k = matching(T, j, end)
            attrs.append(Attr(T[j + 1:k - 1], inner))
            i = k
        return attrs, i

    def skip_vis(self, T, i):
        if is_id(T, i, "pub"):
            i += 1
            if is_p(T, i, "(") and (is_id(T, i + 1, "crate") or is_id(T, i + 1, "super")
                                    or is_id(T, i + 1, "self") or is_id(T, i + 1, "in")):
                i = matching(T, i, len(T))
            return i, True
        return i, False

    def parse_items(self, T, i, end, mod, file):
        while i < end:
            if is_p(T, i, ";"):
                i += 1
                continue
            start = i
            attrs, i = self.read_attrs(T, i, end)
            if i >= end:
                break
            if any(a.inner and a.cfg_test() for a in attrs):
                return  # `#![cfg(test)]`: the whole module is test code
            outer = [a for a in attrs if not a.inner]
            if any(a.cfg_test() for a in outer):
                j, _ = self.skip_vis(T, i)
                i = self.skip_item(T, j, end)
                continue
            for a in outer:
                self.scan_attr(a, mod, file)
            i, pub = self.skip_vis(T, i)
            while is_id(T, i) and (T[i].text in QUALIFIERS or
                                   (T[i].text == "const" and is_id(T, i + 1) and
                                    T[i + 1].text in ("fn", "unsafe", "async", "extern"))):
                if T[i].text == "default" and not is_id(T, i + 1):
                    break
                i += 1
            if i >= end:
                break
            t = T[i]
            kw = t.text if t.kind == "id" else None
            if kw == "extern":
                if is_id(T, i + 1, "crate"):
                    i = item_end(T, i, end, semi_only=True)
                    continue
                j = i + 1
                if j < end and T[j].kind == "str":
                    j += 1
                if is_p(T, j, "{"):
                    k = matching(T, j, end)
                    self.parse_items(T, j + 1, k - 1, mod, file)
                    i = k
                    continue
                i = j  # `extern "C" fn`
                t = T[i]
                kw = t.text if t.kind == "id" else None
            if kw == "mod" and is_id(T, i + 1):
                name = T[i + 1].text
                if is_p(T, i + 2, ";"):
                    self.declare_file_mod(mod, name, outer, file)
                    i += 3
                    continue
                if is_p(T, i + 2, "{"):
                    k = matching(T, i + 2, end)
                    child = Module(name, mod, file, os.path.join(mod.child_dir, name), True)
                    mod.children[name] = child
                    self.parse_items(T, i + 3, k - 1, child, file)
                    i = k
                    continue
            if kw == "use" and not is_p(T, i + 1, "<"):
                k = item_end(T, i, end, semi_only=True)
                self.add_use(T, i + 1, k - 1, mod, file, pub)
                i = k
                continue
            if kw == "macro_rules" and is_p(T, i + 1, "!") and is_id(T, i + 2):
                name = T[i + 2].text
                k = i + 3
                if k < end and T[k].kind == "p" and T[k].text in "([{":
                    k = matching(T, k, end)
                body = T[i + 3:k]
                self.define(mod, name, "macro", file, t.line)
                self.macros.setdefault(name, []).append((mod, file, t.line))
                if any(a.name == "macro_export" for a in outer):
                    self.root.defs.setdefault(name, ("macro", file, t.line))
                self.local_macro_defs[name] = any(
                    body[x].kind == "id" and body[x].text in
                    ("struct", "enum", "fn", "type", "trait", "static", "const", "union", "mod")
                    and body[x + 1].text == "$" for x in range(len(body) - 1))
                self.scan_code(T, i + 3, k, mod, file)
                i = k
                continue
            if kw in ("fn", "struct", "enum", "trait", "type") or (
                    kw == "union" and is_id(T, i + 1) and
                    (is_p(T, i + 2, "{") or is_p(T, i + 2, "<"))):
                k = item_end(T, i, end, semi_only=(kw == "type"))
                if is_id(T, i + 1):
                    self.define(mod, T[i + 1].text, kw, file, t.line)
                if kw == "enum":
                    self.scan_enum(T, i + 2, k, mod, file)
                else:
                    self.scan_code(T, i + 2, k, mod, file)
                i = k
                continue
            if kw in ("const", "static"):
                j = i + 1
                if is_id(T, j, "mut"):
                    j += 1
                k = item_end(T, i, end, semi_only=True)
                if is_id(T, j) and T[j].text != "_":
                    self.define(mod, T[j].text, kw, file, t.line)
                self.scan_code(T, j + 1, k, mod, file)
                i = k
                continue
            if kw == "impl" or (kw == "auto" and is_id(T, i + 1, "trait")):
                k = item_end(T, i, end)
                self.scan_code(T, i + 1, k, mod, file)
                i = k
                continue
            # An item-level macro call: `name! { .. }`, `path::name!( .. );`.
            j = i
            while is_id(T, j) and is_p(T, j + 1, "::"):
                j += 2
            if is_id(T, j) and is_p(T, j + 1, "!") and j + 2 < end and T[j + 2].kind == "p" \
                    and T[j + 2].text in "([{":
                k = matching(T, j + 2, end)
                self.macro_defs(T, j, j + 2, k, mod, file)
                self.scan_code(T, i, k, mod, file)
                i = k
                continue
            k = item_end(T, i, end)
            if k <= start:
                k = start + 1
            self.scan_code(T, i, k, mod, file)
            i = k

    def scan_enum(self, T, i, end, mod, file):
        """An enum's generics and variants, without taking the variants' own names for uses."""
        j = i
        while j < end and not is_p(T, j, "{"):
            j += 1
        self.scan_code(T, i, j, mod, file)
        close = matching(T, j, end) - 1
        j += 1
        while j < close:
            attrs, j = self.read_attrs(T, j, close)
            if any(a.cfg_test() for a in attrs):
                j = self.skip_to_comma(T, j, close) + 1
                continue
            for a in attrs:
                self.scan_attr(a, mod, file)
            if is_id(T, j):
                j += 1  # the variant's name
            k = self.skip_to_comma(T, j, close)
            self.scan_code(T, j, k, mod, file)
            j = k + 1

    def skip_to_comma(self, T, i, end):
        while i < end and not is_p(T, i, ","):
            if T[i].kind == "p" and T[i].text in "([{":
                i = matching(T, i, end)
            else:
                i += 1
        return i

    def skip_item(self, T, i, end):
        while is_id(T, i) and (T[i].text in QUALIFIERS or T[i].text == "const"
                               and is_id(T, i + 1, "fn")):
            i += 1
        kw = T[i].text if i < end else ""
        if kw == "macro_rules" or (is_id(T, i) and is_p(T, i + 1, "!")):
            j = i + 2 + (1 if kw == "macro_rules" else 0)
            if j < end and T[j].kind == "p" and T[j].text in "([{":
                return matching(T, j, end)
        return item_end(T, i, end, semi_only=kw in ("const", "static", "type", "use"))

    def define(self, mod, name, kind, file, line):
        mod.defs.setdefault(name, (kind, file, line))

    def macro_defs(self, T, name_i, open_i, close_i, mod, file):
        """Names an item-level macro call declares: `static X`, `struct Y` inside it, or the
        plain names given to a crate-local macro whose body declares `struct $name` and such."""
        args = T[open_i + 1:close_i - 1]
        local = self.local_macro_defs.get(T[name_i].text, False)
        k = 0
        while k < len(args):
            a = args[k]
            if is_p(args, k, "#"):
                j = k + 1 + (1 if is_p(args, k + 1, "!") else 0)
                if is_p(args, j, "["):
                    k = matching(args, j, len(args))
                    continue
            if a.kind == "id" and a.text in ("struct", "enum", "fn", "type", "trait", "static",
                                            "const", "union") and is_id(args, k + 1):
                j = k + 1
                if args[j].text == "mut":
                    j += 1
                if is_id(args, j) and args[j].text not in KEYWORDS:
                    self.define(mod, args[j].text, "macro-made", file, a.line)
            elif local and a.kind == "id" and a.text not in KEYWORDS and \
                    not is_p(args, k - 1, "::") and not is_p(args, k + 1, "::"):
                self.define(mod, a.text, "macro-made", file, a.line)
            if a.kind == "p" and a.text in "([{" and local:
                k = matching(args, k, len(args))  # only depth-0 names for local macros
                continue
            k += 1

    def declare_file_mod(self, mod, name, attrs, file):
        path_attr = None
        for a in attrs:
            if a.name == "path":
                path_attr = a.value("path")
        cands = []
        if path_attr:
            base = mod.child_dir if mod.inline else os.path.dirname(
                os.path.join(self.base, mod.file))
            cands.append(os.path.normpath(os.path.join(base, path_attr)))
        else:
            cands.append(os.path.join(mod.child_dir, name + ".rs"))
            cands.append(os.path.join(mod.child_dir, name, "mod.rs"))
        for c in cands:
            if os.path.isfile(c):
                if path_attr or os.path.basename(c) == "mod.rs":
                    child_dir = os.path.dirname(c)
                else:
                    child_dir = c[:-3]
                child = Module(name, mod, self.rel(c), child_dir, False)
                mod.children[name] = child
                self.read_file(child, c)
                return
        self.unreadable.append(f"{mod.file}: `mod {name};` has no file ({', '.join(map(self.rel, cands))})")

    # -- uses and references -------------------------------------------------------------------

    def add_use(self, T, i, end, mod, file, pub):
        leaves = []
        self.use_tree(T, i, end, [], leaves)
        for segs, name, glob, line in leaves:
            u = Use(mod, segs, name, pub, line, glob)
            if glob:
                mod.globs.append(u)
            elif name != "_":
                mod.uses.setdefault(name, []).append(u)
            if not pub:
                self.refs.append(Ref(file, mod, segs, line, "use-glob" if glob else "use"))

    def use_tree(self, T, i, end, prefix, out):
        segs = list(prefix)
        if is_p(T, i, "::"):
            segs.append("::")
            i += 1
        while i < end:
            t = T[i]
            if is_p(T, i, "{"):
                close = matching(T, i, end) - 1
                i += 1
                while i < close:
                    i = self.use_tree(T, i, close, segs, out)
                    while i < close and not is_p(T, i, ","):
                        i += 1  # anything unexpected
                    i += 1
                return close + 1
            if is_p(T, i, "*"):
                out.append((segs, None, True, t.line))
                return i + 1
            if t.kind == "id":
                segs.append(t.text)
                i += 1
                if is_p(T, i, "::"):
                    i += 1
                    continue
                name = segs[-1]
                if is_id(T, i, "as") and is_id(T, i + 1):
                    name = T[i + 1].text
                    i += 2
                if segs[-1] == "self":
                    segs = segs[:-1]
                    if name == "self":
                        name = segs[-1] if segs else "self"
                out.append((segs, name, False, t.line))
                return i
            return i + 1
        return i

    def scan_attr(self, a, mod, file):
        """Paths an attribute names: tokens (`value_parser = crate::x::f`) and serde's
        strings (`deserialize_with = "duration::deserialize_opt"`)."""
        t = a.toks
        if a.name in ("cfg", "cfg_attr", "doc", "path"):
            return
        for k in range(len(t) - 2):
            if t[k].kind == "id" and t[k].text in SERDE_PATH_KEYS and t[k + 1].text == "=" \
                    and t[k + 2].kind == "str" and PATH_STR_RE.match(t[k + 2].text):
                segs = t[k + 2].text.split("::")
                if t[k].text == "with":
                    for f in ("serialize", "deserialize"):
                        self.refs.append(Ref(file, mod, segs + [f], t[k].line, "path"))
                else:
                    self.refs.append(Ref(file, mod, segs, t[k].line,
                                         "path" if len(segs) > 1 else "bare"))
        self.scan_code(t, 1, len(t), mod, file)

    def scan_code(self, T, i, end, mod, file):
        while i < end:
            t = T[i]
            if t.kind == "p":
                if t.text == "#" and (is_p(T, i + 1, "[") or
                                      (is_p(T, i + 1, "!") and is_p(T, i + 2, "["))):
                    attrs, j = self.read_attrs(T, i, end)
                    if any(a.cfg_test() for a in attrs if not a.inner):
                        j, _ = self.skip_vis(T, j)
                        k = j
                        while is_id(T, k) and T[k].text in QUALIFIERS:
                            k += 1
                        if is_id(T, k) and (T[k].text in ITEM_KEYWORDS or is_p(T, k + 1, "!")):
                            i = self.skip_item(T, j, end)
                        else:
                            i = expr_end(T, j, end)
                        continue
                    for a in attrs:
                        self.scan_attr(a, mod, file)
                    i = j
                    continue
                if t.text == "." and is_id(T, i + 1):
                    i += 2  # a field or a method
                    continue
                i += 1  # other punctuation; the `$` of `$crate` too (then `crate`)
                continue
            if t.kind != "id":
                i += 1
                continue
            after_dollar = is_p(T, i - 1, "$")
            if after_dollar and t.text != "crate":
                i += 1  # a macro's metavariable
                continue
            if t.text == "use" and not is_p(T, i + 1, "<") and not after_dollar:
                k = item_end(T, i, end, semi_only=True)
                self.add_use(T, i + 1, k - 1, mod, file, False)
                i = k
                continue
            prev = T[i - 1] if i > 0 else None
            if prev is not None and prev.kind == "p" and prev.text == "::":
                i += 1
                continue
            if t.text in KEYWORDS and t.text not in PATH_STARTERS:
                i += 1
                continue
            segs = [t.text]
            j = i + 1
            while j < end and is_p(T, j, "::"):
                if is_id(T, j + 1):
                    segs.append(T[j + 1].text)
                    j += 2
                elif is_p(T, j + 1, "<"):
                    depth, j = 0, j + 1
                    while j < end:
                        if is_p(T, j, "<"):
                            depth += 1
                        elif is_p(T, j, ">"):
                            depth -= 1
                            if depth == 0:
                                j += 1
                                break
                        j += 1
                else:
                    break
            is_macro = is_p(T, j, "!")
            if is_macro:
                kind = "macro"
            elif len(segs) > 1:
                kind = "path"
            else:
                kind = "bare"
                ptext = prev.text if prev is not None else ""
                if ptext in DECL_BEFORE or (is_p(T, j, ":") and not is_p(T, j + 1, ":")):
                    kind = None
            if kind:
                self.refs.append(Ref(file, mod, segs, t.line, kind))
            i += 1

    # -- resolution ----------------------------------------------------------------------------

    def lookup(self, mod, name, guard):
        """`name` in `mod`'s namespace: ('mod', Module) | ('item', file, name, kind) | None."""
        if name in mod.children:
            return ("mod", mod.children[name])
        if name in mod.defs:
            kind, file, _ = mod.defs[name]
            return ("item", file, name, kind)
        for u in mod.uses.get(name, ()):
            r = self.resolve_use(u, guard)
            if r:
                return r
        if mod.uses.get(name):
            return ("external", name)  # imported from another crate (or std)
        for g in mod.globs:
            r = self.resolve_use(g, guard)
            if r and r[0] == "mod" and r[1] is not mod:
                r = self.lookup(r[1], name, guard | {id(g)})
                if r:
                    return r
        return None

    def resolve_use(self, u, guard):
        key = id(u)
        if key in guard:
            return None
        if key in self._memo:
            return self._memo[key]
        r = self.resolve_path(u.module, u.segs, guard | {key})
        self._memo[key] = r
        return r

    def resolve_path(self, mod, segs, guard=frozenset()):
        if not segs:
            return ("mod", mod)
        s0 = segs[0]
        if s0 == "::" or s0 == "Self":
            return None
        if s0 == "crate":
            cur = ("mod", self.root)
        elif s0 == "self":
            cur = ("mod", mod)
        elif s0 == "super":
            cur = ("mod", mod.parent) if mod.parent else None
        else:
            cur = self.lookup(mod, s0, guard)
        idx = 1
        while cur and idx < len(segs):
            if cur[0] == "external":
                return None
            if cur[0] != "mod":
                return cur
            s = segs[idx]
            idx += 1
            if s == "super":
                cur = ("mod", cur[1].parent) if cur[1].parent else None
                continue
            if s == "self":
                continue
            r = self.lookup(cur[1], s, guard)
            if r is None:
                return ("unresolved", cur[1].file, s, "?")
            cur = r
        return cur

    def resolve_ref(self, ref):
        """The (file, item) a reference uses, or None."""
        segs, mod = ref.segs, ref.module
        if ref.kind == "macro" and len(segs) == 1:
            m = mod
            while m is not None:
                if m.defs.get(segs[0], ("",))[0] == "macro":
                    return ("item", m.defs[segs[0]][1], segs[0] + "!", "macro")
                m = m.parent
            for u in mod.uses.get(segs[0], ()):
                r = self.resolve_use(u, frozenset())
                if r and r[0] in ("item", "unresolved"):
                    return r
            return None
        if ref.kind == "bare":
            name = segs[0]
            if name in mod.defs or name in mod.children or name in PATH_STARTERS:
                return None
            for u in mod.uses.get(name, ()):
                r = self.resolve_use(u, frozenset())
                if r and r[0] in ("item", "unresolved"):
                    return r
            if mod.uses.get(name):
                return None
            for g in mod.globs:
                r = self.resolve_use(g, frozenset())
                if r and r[0] == "mod" and r[1] is not mod:
                    r = self.lookup(r[1], name, frozenset({id(g)}))
                    if r and r[0] in ("item", "unresolved"):
                        return r
            return None
        r = self.resolve_path(mod, segs)
        if r is None or r[0] in ("mod", "external"):
            return None
        if ref.kind == "use-glob" and r[0] != "item":
            return None
        return r

    def edges(self):
        """{(from, to): {item: first line}} over product files, arrows to itself dropped."""
        out = {}
        for ref in self.refs:
            r = self.resolve_ref(ref)
            if not r:
                continue
            target = r[1]
            if target == ref.file:
                continue
            name = r[2] + ("?" if r[0] == "unresolved" else "")
            if ref.kind == "macro" and not name.endswith("!"):
                name += "!"
            items = out.setdefault((ref.file, target), {})
            items.setdefault(name, ref.line)
        return out


# ----------------------------------------------------------------------------------------------
# Cargo.toml (just what is needed: the package name, the lib and the bins).


def read_manifest(path):
    sections = []  # (header, {key: value})
    cur = ("", {})
    sections.append(cur)
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip() if not raw.strip().startswith("#") else ""
            if not line:
                continue
            if line.startswith("["):
                cur = (line.strip("[] "), {})
                sections.append(cur)
                continue
            m = re.match(r'([A-Za-z0-9_.-]+)\s*=\s*"([^"]*)"', line)
            if m:
                cur[1][m.group(1)] = m.group(2)
    return sections


def targets_of(manifest):
    """[(kind, crate name, root file)] of a package's lib and bins; its package name."""
    d = os.path.dirname(manifest)
    sections = read_manifest(manifest)
    package = next((s[1].get("name") for s in sections if s[0] == "package"), None) or \
        os.path.basename(d)
    out = []
    lib = next((s[1] for s in sections if s[0] == "lib"), None)
    lib_path = os.path.join(d, (lib or {}).get("path", "src/lib.rs"))
    if os.path.isfile(lib_path):
        out.append(("lib", (lib or {}).get("name", package).replace("-", "_"), lib_path))
    bins = [s[1] for s in sections if s[0] == "bin"]
    seen = set()
    for b in bins:
        name = b.get("name", package)
        p = os.path.join(d, b.get("path", f"src/bin/{name}.rs"))
        if not b.get("path") and not os.path.isfile(p):
            p = os.path.join(d, "src/bin", name, "main.rs")
        if not b.get("path") and name == package and not os.path.isfile(p):
            p = os.path.join(d, "src/main.rs")
        if os.path.isfile(p):
            out.append(("bin", name, p))
            seen.add(os.path.normpath(p))
    main = os.path.join(d, "src/main.rs")
    if os.path.isfile(main) and os.path.normpath(main) not in seen:
        out.append(("bin", package, main))
        seen.add(os.path.normpath(main))
    bindir = os.path.join(d, "src/bin")
    if os.path.isdir(bindir):
        for e in sorted(os.listdir(bindir)):
            p = os.path.join(bindir, e)
            if e.endswith(".rs"):
                name = e[:-3]
            elif os.path.isfile(os.path.join(p, "main.rs")):
                name, p = e, os.path.join(p, "main.rs")
            else:
                continue
            if os.path.normpath(p) not in seen:
                out.append(("bin", name, p))
    return package, out


def find_manifests(ws):
    found = []
    for top in SCAN_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ws, top)):
            dirnames[:] = sorted(x for x in dirnames if x not in SKIP_DIRS)
            if "Cargo.toml" in filenames:
                found.append(os.path.join(dirpath, "Cargo.toml"))
    return sorted(found)


# ----------------------------------------------------------------------------------------------
# Circles.


def strongly_connected(nodes, succ):
    index, low, on, stack, groups = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            groups.append(sorted(group))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return groups


def shortest_path(succ, start, goal, allowed):
    prev = {start: None}
    q = deque([start])
    while q:
        v = q.popleft()
        if v == goal:
            path = []
            while v is not None:
                path.append(v)
                v = prev[v]
            return path[::-1]
        for w in sorted(succ.get(v, ())):
            if w in allowed and w not in prev:
                prev[w] = v
                q.append(w)
    return None


def circles(edges):
    """[(group, [cycle])]: each group of >1 files and the shortest circle through each of its
    arrows (a cycle is a list of files, the first repeated at the end)."""
    succ, nodes = {}, set()
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
        nodes.update((a, b))
    out = []
    for group in strongly_connected(nodes, succ):
        if len(group) < 2:
            continue
        members = set(group)
        seen, cycles = set(), []
        for a in group:
            for b in sorted(succ.get(a, ())):
                if b not in members:
                    continue
                path = shortest_path(succ, b, a, members)
                cyc = [a] + path
                body = cyc[:-1]
                r = body.index(min(body))
                canon = tuple(body[r:] + body[:r])
                if canon not in seen:
                    seen.add(canon)
                    cycles.append(list(canon) + [canon[0]])
        cycles.sort(key=lambda c: (len(c), c))
        out.append((group, cycles))
    return out


def fmt_items(items, with_lines=False, limit=12):
    names = sorted(items, key=lambda n: (items[n], n)) if with_lines else sorted(items)
    shown = [f"{n}:{items[n]}" if with_lines else n for n in names]
    if limit and len(shown) > limit:
        shown = shown[:limit] + [f"... {len(shown) - limit} more"]
    return ", ".join(shown)


# ----------------------------------------------------------------------------------------------
# Crate names against generated module roots (`parca::..` in pkg/grpc-proto).


def generated_roots(ws):
    """Top-level module names of pkg/grpc-proto's generated code: its .proto packages' first
    component, and the `pub mod` names of a generated file left in target/, if any."""
    roots, where = set(), []
    proto_dir = os.path.join(ws, "pkg", "grpc-proto")
    for dirpath, dirnames, filenames in os.walk(proto_dir):
        dirnames[:] = [x for x in dirnames if x not in SKIP_DIRS]
        for fn in filenames:
            if fn.endswith(".proto"):
                with open(os.path.join(dirpath, fn), encoding="utf-8", errors="replace") as f:
                    m = re.search(r"^\s*package\s+([A-Za-z0-9_.]+)\s*;", f.read(), re.M)
                if m:
                    roots.add(m.group(1).split(".")[0])
    where.append("package lines of pkg/grpc-proto's .proto files")
    target = os.path.join(ws, "target")
    for prof in ("debug", "release"):
        build = os.path.join(target, prof, "build")
        if not os.path.isdir(build):
            continue
        for e in sorted(os.listdir(build)):
            p = os.path.join(build, e, "out", "parca_api.rs")
            if e.startswith("parca-grpc-proto-") and os.path.isfile(p):
                with open(p, encoding="utf-8", errors="replace") as f:
                    roots.update(re.findall(r"^pub mod ([A-Za-z0-9_]+)", f.read(), re.M))
                where.append(os.path.relpath(p, ws))
                break
    return roots, where


def crate_names_report(ws, packages):
    roots, where = generated_roots(ws)
    print("== crate names and generated module roots")
    print(f"  generated module roots (from {'; '.join(where)}): {', '.join(sorted(roots)) or 'none'}")
    clash = []
    for package, targets in packages:
        parts = [f"{kind} {name}" for kind, name, _ in targets]
        print(f"  {package}: {', '.join(parts) or 'no lib or bin'}")
        for kind, name, _ in targets:
            if kind == "lib" and name in roots:
                clash.append(f"{package} (lib {name})")
    bins = sorted({name for _, t in packages for kind, name, _ in t if kind == "bin"} & roots)
    if clash:
        print(f"  CLASH: lib crates named like a generated module root: {', '.join(clash)}")
    else:
        print("  no lib crate is named like a generated module root, so `parca::..` paths "
              "can only mean the generated module")
    if bins:
        print(f"  binaries named like a generated root: {', '.join(bins)} (a binary is no "
              "library: no crate can depend on it, so it is not reachable by path)")
    print()


def unscanned_members(ws):
    """The root Cargo.toml's workspace members that lie outside the scanned directories."""
    try:
        with open(os.path.join(ws, "Cargo.toml"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return []
    m = re.search(r"^members\s*=\s*\[(.*?)\]", text, re.M | re.S)
    members = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    return [x for x in members if x.split("/")[0] not in SCAN_DIRS]


# ----------------------------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")), help="workspace root")
    ap.add_argument("--crate", action="append", default=[],
                    help="only this package (or lib/bin crate name, or directory); repeatable")
    ap.add_argument("--edges", action="append", default=[], metavar="CRATE",
                    help="print every arrow of this crate with the items behind it")
    ap.add_argument("--unresolved", action="store_true",
                    help="also list arrows resolved only to a module's file (`?` items)")
    ap.add_argument("--tolerate", action="append", default=[], metavar="PACKAGE",
                    help="circles of this package are printed but do not fail the check; a "
                         "tolerated package without circles does (take it off the list): the "
                         "ratchet CI runs while the last circles are being taken apart")
    args = ap.parse_args(argv)
    ws = os.path.abspath(args.root)

    def matches(sel, package, name, manifest):
        d = os.path.relpath(os.path.dirname(manifest), ws)
        return any(s in (package, name, d, d.rstrip("/")) or s.replace("-", "_") == name
                   for s in sel)

    packages, crates = [], []
    for manifest in find_manifests(ws):
        package, targets = targets_of(manifest)
        packages.append((package, targets))
        for kind, name, root in targets:
            if args.crate and not matches(args.crate, package, name, manifest):
                continue
            if args.edges and not args.crate and not matches(args.edges, package, name,
                                                            manifest):
                continue
            crates.append((manifest, package, kind, name, root))

    if not args.edges and not args.crate:
        crate_names_report(ws, packages)
        others = unscanned_members(ws)
        if others:
            print(f"workspace members outside {', '.join(SCAN_DIRS)} (not read): "
                  f"{', '.join(others)}\n")

    total_cycles = total_groups = 0
    circled = []
    failing = []
    tolerated_clean = set(args.tolerate)
    for manifest, package, kind, name, root in crates:
        c = Crate(package, kind, name, root, ws)
        c.load()
        edges = c.edges()
        where = os.path.relpath(c.base, ws)
        print(f"== {c.label()}  [{where}/, root {os.path.basename(root)}]: "
              f"{len(c.files)} files, {len(edges)} arrows")
        for u in c.unreadable:
            print(f"  warning: {u}")
        if args.edges and matches(args.edges, package, name, manifest):
            for (a, b) in sorted(edges):
                print(f"  {a} -> {b}: {fmt_items(edges[(a, b)], with_lines=True, limit=0)}")
        if args.unresolved:
            for (a, b), items in sorted(edges.items()):
                q = {n: l for n, l in items.items() if n.endswith("?")}
                if q:
                    print(f"  unresolved item, module file only: {a} -> {b}: "
                          f"{fmt_items(q, with_lines=True, limit=0)}")
        groups = circles(edges)
        if not groups:
            print("  no circles")
        for gi, (group, cycles) in enumerate(groups, 1):
            total_groups += 1
            total_cycles += len(cycles)
            print(f"  circle group {gi}: {len(group)} files: {', '.join(group)}")
            for cyc in cycles:
                print(f"    {' -> '.join(cyc)}")
                for a, b in zip(cyc, cyc[1:]):
                    print(f"      {a} -> {b}: {fmt_items(edges[(a, b)])}")
        if groups:
            circled.append(c.label())
            if package in args.tolerate:
                tolerated_clean.discard(package)
            else:
                failing.append(c.label())
        print()

    print(f"summary: {total_cycles} circles in {total_groups} groups of files, "
          f"in {len(circled)} of {len(crates)} crates"
          + (f" ({', '.join(circled)})" if circled else ""))
    if args.tolerate:
        for package in sorted(tolerated_clean):
            print(f"{package} is tolerated but has no circle left: take it off `--tolerate`")
        for label in failing:
            print(f"{label} has circles and is not tolerated")
        return 1 if failing or tolerated_clean else 0
    return 1 if total_cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
