//! What a Ruby frame's method is called: its class's name (`Worker#`, `Jobs::Hot.`), read from
//! the method entry the frame holds and its owner's instance variables, whose ids are learnt
//! per process from class `Object`; and a C method's own name, from the VM's table of symbol
//! names, found by its shape and checked against those two ids.

use std::ops::Range;

use super::layout::{
    FL_SINGLETON, ID_SCOPE_SHIFT, IMEMO_MENT, LAST_OP_ID, Layout, METHOD_TYPE_ISEQ,
    METHOD_TYPE_MASK, ST_DELETED_HASH, ST_ENTRY_BYTES, SYMBOLS_PER_PAGE, T_CLASS, T_IMEMO, T_MASK,
    T_MODULE, array_element, read_string, word,
};
use crate::interp::Memory;

/// Most instance variables of a class looked through for its name.
const MAX_CLASS_IVARS: u64 = 256;
/// Most bytes of an object's `.data` looked through for the symbol table, and most candidates
/// tried there.
const MAX_DATA_SCAN: u64 = 1 << 20;
const MAX_SYMBOL_CANDIDATES: usize = 4096;

/// A method entry (`rb_method_entry_t`, an `imemo_ment`) as read from the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MethodEntry {
    /// Its definition's type (`METHOD_TYPE_*`).
    pub kind: u32,
    /// The first word of the definition's body: an iseq method's iseq.
    pub body: u64,
    /// The id of the name it was defined with (an alias's entry keeps the original's).
    pub original_id: u64,
    /// The class or module that owns it (a singleton class for `def self.x`).
    pub owner: u64,
}

impl MethodEntry {
    /// Reads the method entry at `me`; `None` when `me` holds none (a cref, 0, a forged
    /// pointer).
    pub(super) fn read(memory: &Memory, layout: &Layout, me: u64) -> Option<MethodEntry> {
        if me == 0 || !me.is_multiple_of(8) {
            return None;
        }
        let flags = memory.u64(me)?;
        if flags & T_MASK != T_IMEMO || (flags >> 12) & 0xf != IMEMO_MENT {
            return None;
        }
        let def = memory.u64(me + layout.me_def)?;
        let kind = memory.u32(def)? & METHOD_TYPE_MASK;
        Some(MethodEntry {
            kind,
            body: memory.u64(def + layout.def_body)?,
            original_id: memory.u64(def + layout.def_original_id)?,
            owner: memory.u64(me + layout.me_owner)?,
        })
    }

    /// Whether it is the entry of the method defined in Ruby by `iseq`: what tells a frame's
    /// own entry from a cref, a C method's entry, or an entry freed and reused since.
    pub(super) fn defines(&self, iseq: u64) -> bool {
        self.kind == METHOD_TYPE_ISEQ && self.body == iseq
    }
}

/// How this process's classes keep their names: the ids of the `__classpath__` and
/// `__attached__` instance variables. They are dynamic ids (their values differ between builds
/// and with what the VM interned first), learnt from class `Object`, whose name is known, and
/// its singleton class, which is attached to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClassIvars {
    classpath: u64,
    attached: u64,
}

impl ClassIvars {
    /// Learns the ids from class `Object`, kept at `root_class` (`rb_cObject`); `None` when its
    /// name or singleton class cannot be read.
    pub(super) fn learn(memory: &Memory, layout: &Layout, root_class: u64) -> Option<ClassIvars> {
        let object = memory.u64(root_class).filter(|&o| o != 0)?;
        let (classpath, _) = class_ivars(memory, layout, object)?
            .into_iter()
            .find(|&(_, value)| read_string(memory, layout, value).as_deref() == Some("Object"))?;
        let singleton = memory.u64(object + layout.basic_klass)?;
        let (attached, _) = class_ivars(memory, layout, singleton)?
            .into_iter()
            .find(|&(_, value)| value == object)?;
        Some(ClassIvars {
            classpath,
            attached,
        })
    }

    /// What a method owned by `owner` is named after, as Ruby 3.4's backtraces qualify it:
    /// `Worker#` for an instance method of `Worker` (or of a module), `Worker.` for a singleton
    /// method of the class. `None` when the class has no name (anonymous) or `owner` is no
    /// class.
    pub(super) fn qualifier(self, memory: &Memory, layout: &Layout, owner: u64) -> Option<String> {
        let owner_flags = memory.u64(owner)?;
        if owner_flags & T_MASK == T_CLASS && owner_flags & FL_SINGLETON != 0 {
            let attached = class_ivar(memory, layout, owner, self.attached)?;
            Some(format!("{}.", self.class_path(memory, layout, attached)?))
        } else {
            Some(format!("{}#", self.class_path(memory, layout, owner)?))
        }
    }

    /// A named class's or module's path (`Worker`, `Jobs::Worker`).
    pub(super) fn class_path(self, memory: &Memory, layout: &Layout, class: u64) -> Option<String> {
        let flags = memory.u64(class)?;
        if !matches!(flags & T_MASK, T_CLASS | T_MODULE) {
            return None;
        }
        let path = class_ivar(memory, layout, class, self.classpath)?;
        read_string(memory, layout, path)
    }
}

/// The VM's table of symbol names (`ruby_global_symbols.ids`): where a C method's name is,
/// by the id its entry holds. The table is not exported; it is looked for in libruby's `.data`
/// by its shape (a word that holds an array) and believed only where it names the two ids
/// learnt from `Object` (`__classpath__`, `__attached__`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SymbolNames {
    ids: u64,
}

impl SymbolNames {
    /// Looks for the table in `data` (the object's `.data` in the process); `None` when no
    /// candidate names both known ids.
    pub(super) fn find(
        memory: &Memory,
        layout: &Layout,
        data: Range<u64>,
        known: ClassIvars,
    ) -> Option<SymbolNames> {
        let len = data.end.checked_sub(data.start)?.min(MAX_DATA_SCAN);
        let bytes = memory.bytes(data.start, len as usize)?;
        let at = layout.symbols_ids as usize;
        // `rb_symbols_t` starts with the last serial given (a u32, then padding) and holds the
        // array at `at`.
        (0..bytes.len().saturating_sub(at + 8))
            .step_by(8)
            .filter(|&off| {
                let last = word(&bytes[off..], 0);
                last != 0 && last >> 32 == 0
            })
            .map(|off| word(&bytes[off + at..], 0))
            .filter(|&ids| ids != 0 && ids.is_multiple_of(8))
            .take(MAX_SYMBOL_CANDIDATES)
            .map(|ids| SymbolNames { ids })
            .find(|table| {
                table.name(memory, layout, known.classpath).as_deref() == Some("__classpath__")
                    && table.name(memory, layout, known.attached).as_deref() == Some("__attached__")
            })
    }

    /// The name of symbol `id` (`each`, `+`).
    pub(super) fn name(self, memory: &Memory, layout: &Layout, id: u64) -> Option<String> {
        let serial = if id > LAST_OP_ID {
            id >> ID_SCOPE_SHIFT
        } else {
            id
        };
        let page = array_element(memory, layout, self.ids, serial / SYMBOLS_PER_PAGE)?;
        let name = array_element(memory, layout, page, (serial % SYMBOLS_PER_PAGE) * 2)?;
        read_string(memory, layout, name)
    }
}

/// A class's instance variables, as (id, value): the live entries of its `iv_tbl`, at most
/// [`MAX_CLASS_IVARS`].
fn class_ivars(memory: &Memory, layout: &Layout, class: u64) -> Option<Vec<(u64, u64)>> {
    let ext = memory.u64(class + layout.class_ext).filter(|&e| e != 0)?;
    let table = memory.u64(ext + layout.ext_iv_tbl).filter(|&t| t != 0)?;
    let header = memory.array::<24>(table + layout.st_entries_start)?;
    let (start, bound, entries) = (word(&header, 0), word(&header, 1), word(&header, 2));
    let n = bound.checked_sub(start)?.min(MAX_CLASS_IVARS);
    let bytes = memory.bytes(
        entries.checked_add(start.checked_mul(ST_ENTRY_BYTES)?)?,
        (n * ST_ENTRY_BYTES) as usize,
    )?;
    Some(
        bytes
            .chunks_exact(ST_ENTRY_BYTES as usize)
            .filter(|e| word(e, 0) != ST_DELETED_HASH)
            .map(|e| (word(e, 1), word(e, 2)))
            .collect(),
    )
}

/// The value of a class's instance variable `id`.
fn class_ivar(memory: &Memory, layout: &Layout, class: u64, id: u64) -> Option<u64> {
    class_ivars(memory, layout, class)?
        .into_iter()
        .find_map(|(key, value)| (key == id).then_some(value))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::ruby::layout::{METHOD_TYPE_CFUNC, RUBY_3_1, T_ARRAY, T_STRING};

    /// A Ruby 3.1 `String` of up to 16 bytes, embedded.
    fn forged_string(text: &[u8]) -> Box<[u64; 4]> {
        let layout = &RUBY_3_1;
        let mut s = Box::new([0u64; 4]);
        s[0] = T_STRING | ((text.len() as u64) << layout.string_embed_len_shift);
        let mut bytes = [0u8; 16];
        bytes[..text.len()].copy_from_slice(text);
        s[2] = u64::from_ne_bytes(bytes[..8].try_into().unwrap());
        s[3] = u64::from_ne_bytes(bytes[8..].try_into().unwrap());
        s
    }

    /// A Ruby 3.1 class: RBasic (flags, klass), super, ext → {iv_index_tbl, iv_tbl → an
    /// `st_table` of two entries, the first deleted and the second live}.
    struct ForgedClass {
        object: Box<[u64; 4]>,
        _ext: Box<[u64; 2]>,
        table: Box<[u64; 7]>,
        _entries: Box<[u64; 6]>,
    }

    impl ForgedClass {
        fn addr(&self) -> u64 {
            self.object.as_ptr() as u64
        }
    }

    fn forged_class(flags: u64, ivars: [(u64, u64); 2]) -> ForgedClass {
        let entries = Box::new([
            ST_DELETED_HASH,
            ivars[0].0,
            ivars[0].1,
            1,
            ivars[1].0,
            ivars[1].1,
        ]);
        let table = Box::new([0, 0, 2, 0, 0, 2, entries.as_ptr() as u64]);
        let ext = Box::new([0, table.as_ptr() as u64]);
        let object = Box::new([flags, 0, 0, ext.as_ptr() as u64]);
        ForgedClass {
            object,
            _ext: ext,
            table,
            _entries: entries,
        }
    }

    /// Classes, their ivar tables, a method entry and its definition forged in this process's
    /// own memory as Ruby 3.1 lays them out: the ids are learnt from `Object`, classes are
    /// named by them, and an entry is read whole, or not at all from what is no entry.
    #[test]
    fn methods_are_named_after_their_classes_and_forged_entries_are_not() {
        let memory = Memory::open(Path::new("/proc"), std::process::id()).unwrap();
        let layout = &RUBY_3_1;
        let (classpath, attached) = (3841u64, 3089u64);
        let object_name = forged_string(b"Object");
        let mut object = forged_class(T_CLASS, [(7, 7), (classpath, object_name.as_ptr() as u64)]);
        let object_singleton =
            forged_class(T_CLASS | FL_SINGLETON, [(9, 9), (attached, object.addr())]);
        object.object[1] = object_singleton.addr();
        let root = [object.addr()];
        let ids = ClassIvars::learn(&memory, layout, root.as_ptr() as u64).unwrap();
        assert_eq!(
            ids,
            ClassIvars {
                classpath,
                attached
            }
        );

        let hot_name = forged_string(b"Jobs::Hot");
        // The deleted entry holds the id too, with another value: it is not read.
        let hot = forged_class(
            T_MODULE,
            [
                (classpath, object_name.as_ptr() as u64),
                (classpath, hot_name.as_ptr() as u64),
            ],
        );
        let hot_singleton = forged_class(T_CLASS | FL_SINGLETON, [(1, 1), (attached, hot.addr())]);
        let q = |owner: &ForgedClass| ids.qualifier(&memory, layout, owner.addr());
        assert_eq!(q(&object).as_deref(), Some("Object#"));
        assert_eq!(q(&hot).as_deref(), Some("Jobs::Hot#"));
        assert_eq!(q(&hot_singleton).as_deref(), Some("Jobs::Hot."));
        // No class: no qualifier.
        assert_eq!(
            ids.qualifier(&memory, layout, object_name.as_ptr() as u64),
            None
        );

        // A method entry: its definition's type, body and original name, and its owner.
        let iseq = 0x1234_5678u64;
        let def = [u64::from(METHOD_TYPE_CFUNC) | (1 << 5), iseq, 0, 0, 3009];
        let me = [
            T_IMEMO | (IMEMO_MENT << 12),
            0,
            def.as_ptr() as u64,
            0,
            hot_singleton.addr(),
        ];
        let read = |me: &[u64; 5]| MethodEntry::read(&memory, layout, me.as_ptr() as u64);
        assert_eq!(
            read(&me),
            Some(MethodEntry {
                kind: METHOD_TYPE_CFUNC,
                body: iseq,
                original_id: 3009,
                owner: hot_singleton.addr(),
            })
        );
        // A C method's entry defines no iseq; an iseq method's defines its own and no other
        // (an entry freed and reused for another method).
        assert!(!read(&me).unwrap().defines(iseq));
        let iseq_def = [u64::from(METHOD_TYPE_ISEQ), iseq, 0, 0, 3009];
        let mut iseq_me = me;
        iseq_me[2] = iseq_def.as_ptr() as u64;
        assert!(read(&iseq_me).unwrap().defines(iseq));
        assert!(!read(&iseq_me).unwrap().defines(iseq + 8));
        // A cref, or a pointer to garbage: none.
        let mut cref = me;
        cref[0] = T_IMEMO | (1 << 12);
        assert_eq!(read(&cref), None);
        assert_eq!(MethodEntry::read(&memory, layout, 0x10), None);
        assert_eq!(
            MethodEntry::read(&memory, layout, me.as_ptr() as u64 + 1),
            None
        );
        // An iv table whose entries start past the address space: refused, no overflow.
        let mut huge = forged_class(T_CLASS, [(0, 0), (classpath, hot_name.as_ptr() as u64)]);
        (huge.table[4], huge.table[5]) = (1 << 60, (1 << 60) + 2);
        assert_eq!(ids.class_path(&memory, layout, huge.addr()), None);
    }

    /// A Ruby 3.1 `Array` kept on the heap (not embedded), of `elements`.
    fn forged_array(elements: &[u64]) -> Box<[u64; 5]> {
        Box::new([
            T_ARRAY,
            0,
            elements.len() as u64,
            0,
            elements.as_ptr() as u64,
        ])
    }

    /// A symbol table forged in `.data`-like memory, among words that only look like it: found
    /// by the two names it must give, and read by serial (operators by their own id).
    #[test]
    fn the_symbol_table_is_found_by_the_names_it_must_give() {
        let memory = Memory::open(Path::new("/proc"), std::process::id()).unwrap();
        let layout = &RUBY_3_1;
        let known = ClassIvars {
            classpath: 3841,
            attached: 3089,
        };
        let names = [
            ("__classpath__", 3841 >> 4),
            ("__attached__", 3089 >> 4),
            ("each", 3009 >> 4),
            ("+", 43),
        ];
        let strings: Vec<Box<[u64; 4]>> = names
            .iter()
            .map(|(n, _)| forged_string(n.as_bytes()))
            .collect();
        let mut page = vec![0u64; 1024];
        for ((_, serial), string) in names.iter().zip(&strings) {
            page[serial * 2] = string.as_ptr() as u64;
        }
        let page_array = forged_array(&page);
        let pages = [page_array.as_ptr() as u64];
        let ids = forged_array(&pages);
        // A decoy table whose names are wrong, then the real one.
        let decoy_page = vec![strings[2].as_ptr() as u64; 1024];
        let decoy_page_array = forged_array(&decoy_page);
        let decoy_pages = [decoy_page_array.as_ptr() as u64];
        let decoy = forged_array(&decoy_pages);
        let data = [
            0xdead_beef_0000_0001,
            3000,
            0,
            decoy.as_ptr() as u64,
            0,
            3541,
            0,
            ids.as_ptr() as u64,
            0,
        ];
        let start = data.as_ptr() as u64;
        let table = SymbolNames::find(&memory, layout, start..start + 72, known).unwrap();
        assert_eq!(
            table,
            SymbolNames {
                ids: ids.as_ptr() as u64
            }
        );
        assert_eq!(table.name(&memory, layout, 3009).as_deref(), Some("each"));
        assert_eq!(table.name(&memory, layout, 43).as_deref(), Some("+"));
        // Past the table, or a serial with no name: none.
        assert_eq!(table.name(&memory, layout, 1 << 40), None);
        assert_eq!(table.name(&memory, layout, 3000), None);
        // Without the real table: not found.
        assert_eq!(
            SymbolNames::find(&memory, layout, start..start + 40, known),
            None
        );
    }
}
