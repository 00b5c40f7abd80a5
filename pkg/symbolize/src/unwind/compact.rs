//! Compact unwind tables: an object's call frame information (`.eh_frame`, `.debug_frame`)
//! compiled once into sorted rows that a BPF program can binary-search and apply with a few
//! loads, as Parca Agent and the OpenTelemetry eBPF profiler do ("stack deltas").
//!
//! [`compile`] runs each FDE's CFA program once (gimli) and keeps, per address where the rule
//! changes, what an x86-64 walk needs: how the CFA is found (rsp or rbp plus an offset, one of
//! the two DWARF expressions of PLT stubs, or a signal trampoline's frame), where the caller's
//! rbp is saved, and whether the function is the outermost. The return address is always at
//! CFA − 8 (a row whose return address rule says otherwise is [`RowKind::Unsupported`]). A row
//! the walk cannot apply is kept as [`RowKind::Unsupported`], so the walk stops there and says
//! so, rather than guess; where functions leave a gap an [`RowKind::End`] row says that no CFI
//! covers the addresses from there. Rows equal to their predecessor are dropped.
//!
//! Bounded by construction: a CFI section larger than [`Limits::max_section_bytes`] is not read,
//! and a table growing past [`Limits::max_rows`] stops with [`CompileError::TooManyRows`]; the
//! work is linear in the section's size.

use std::fs::File;
use std::path::Path;

use crate::read_at::read_cache;
use gimli::{
    BaseAddresses, CfaRule, DebugFrame, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection,
};
use rustc_hash::FxHashMap;

use super::{CENSUS_FUNCTIONS, FewRules, FramePointerCensus, RA, RBP, RSP, inflate_section};

/// How a row finds the caller's frame (the CFA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RowKind {
    /// No CFI covers the addresses from this row's on (a gap between functions).
    End = 0,
    /// CFA = rsp + offset.
    Sp = 1,
    /// CFA = rbp + offset.
    Bp = 2,
    /// A PLT stub's expression: CFA = rsp + 8, plus 8 once `(rip & 15) >= offset` (its `push`).
    Plt = 3,
    /// A signal trampoline (glibc's `__restore_rt`): the interrupted registers are in the
    /// `ucontext` at rsp.
    Signal = 4,
    /// The outermost function (its return address is undefined): the stack ends here.
    Outermost = 5,
    /// A rule the walk cannot apply (another register, another expression).
    Unsupported = 6,
}

/// Where the caller's rbp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RbpRule {
    /// Unchanged: the callee has not touched it (or restored it).
    Same = 0,
    /// Saved at CFA + offset.
    At = 1,
    /// Lost (undefined, or a rule the walk cannot apply): a frame that needs it cannot be
    /// unwound.
    Lost = 2,
}

/// One row: from `pc` (a virtual address of the object) up to the next row's, this rule holds.
/// 12 bytes, as the BPF program's rows. A [`CompactTable`] stores its rows in half of that
/// (the largest objects have millions of rows but hundreds of distinct rules: LLVM's 1.44
/// million rows name 785) and gives them out in this form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CompactRow {
    /// The first address the row covers (objects are refused whose code lies past 4 GiB:
    /// [`CompileError::AddressTooLarge`]).
    pub pc: u32,
    /// Of the CFA from its register (for [`RowKind::Plt`], the threshold of `rip & 15`).
    pub cfa_offset: i32,
    /// How the CFA is found.
    pub kind: RowKind,
    /// Where the caller's rbp is.
    pub rbp: RbpRule,
    /// Of the saved rbp from the CFA ([`RbpRule::At`]).
    pub rbp_offset: i16,
}

/// A row's rule: all of a [`CompactRow`] but its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Rule {
    cfa_offset: i32,
    kind: RowKind,
    rbp: RbpRule,
    rbp_offset: i16,
}

/// The rule of [`RowKind::End`] rows, first in every table's rules.
const END_RULE: Rule = Rule {
    cfa_offset: 0,
    kind: RowKind::End,
    rbp: RbpRule::Same,
    rbp_offset: 0,
};

/// The rule of [`RowKind::Unsupported`] rows.
const UNSUPPORTED_RULE: Rule = Rule {
    cfa_offset: 0,
    kind: RowKind::Unsupported,
    rbp: RbpRule::Lost,
    rbp_offset: 0,
};

/// Index of [`END_RULE`] in a table's rules.
const END: u16 = 0;

/// How a [`CompactTable`] stores a row: its address and the index of its rule (6 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(2))]
struct PackedRow {
    pc: u32,
    rule: u16,
}

impl CompactRow {
    #[cfg(test)]
    fn rule(&self) -> Rule {
        Rule {
            cfa_offset: self.cfa_offset,
            kind: self.kind,
            rbp: self.rbp,
            rbp_offset: self.rbp_offset,
        }
    }

    fn new(pc: u32, rule: Rule) -> CompactRow {
        CompactRow {
            pc,
            cfa_offset: rule.cfa_offset,
            kind: rule.kind,
            rbp: rule.rbp,
            rbp_offset: rule.rbp_offset,
        }
    }
}

pub use super::MAX_SECTION_BYTES;

/// The bounds of one compilation.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// CFI sections larger than this (decompressed) are not read.
    pub max_section_bytes: u64,
    /// Rows at most (before equal neighbours are merged).
    pub max_rows: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_section_bytes: MAX_SECTION_BYTES,
            max_rows: 8 << 20,
        }
    }
}

/// Why an object's table could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The object could not be read or parsed.
    #[error(transparent)]
    Object(#[from] crate::Error),
    /// A CFI section is larger than allowed.
    #[error("`{path}` has a {section} of {size_bytes} bytes, over the limit of {max_bytes}")]
    SectionTooLarge {
        /// The object.
        path: std::path::PathBuf,
        /// `.eh_frame` or `.debug_frame`.
        section: &'static str,
        /// Its size.
        size_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },
    /// Code described past 4 GiB: rows hold 32-bit addresses.
    #[error("`{path}` has code at {address:#x}, past the 4 GiB that unwind tables address")]
    AddressTooLarge {
        /// The object.
        path: std::path::PathBuf,
        /// The end of the first function past the limit.
        address: u64,
    },
    /// The table would need more distinct rules than its rows can name.
    #[error("`{path}`'s unwind table needs more than {max_rules} distinct rules")]
    TooManyRules {
        /// The object.
        path: std::path::PathBuf,
        /// The limit.
        max_rules: usize,
    },
    /// The table would hold more rows than allowed.
    #[error("`{path}`'s unwind table passes the limit of {max_rows} rows")]
    TooManyRows {
        /// The object.
        path: std::path::PathBuf,
        /// The limit.
        max_rows: usize,
    },
}

/// An object's compiled unwind table.
#[derive(Debug, Clone, Default)]
pub struct CompactTable {
    /// Sorted by address, no two neighbours with the same rule.
    rows: Vec<PackedRow>,
    /// The distinct rules the rows name, [`END_RULE`] first.
    rules: Vec<Rule>,
    /// What the CFI says of the object's frame pointers.
    pub census: FramePointerCensus,
    /// FDEs whose CFA program gimli refused (malformed): their code has no rows. A malformed
    /// entry that ends a section's scan counts here too.
    pub bad_fdes: u64,
    /// FDEs compiled.
    pub fdes: u64,
    /// The object's executable `PT_LOAD` segments: (file offset, file size, virtual address).
    pub segments: Vec<(u64, u64, u64)>,
}

impl CompactTable {
    /// The row covering virtual address `vaddr`, when one does (an [`RowKind::End`] row
    /// covers nothing).
    pub fn row(&self, vaddr: u64) -> Option<CompactRow> {
        let i = self
            .rows
            .partition_point(|r| u64::from(r.pc) <= vaddr)
            .checked_sub(1)?;
        let row = self.rows[i];
        (row.rule != END).then(|| self.unpack(row))
    }

    /// The rows, sorted by address, no two neighbours with the same rule.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = CompactRow> + '_ {
        self.rows.iter().map(|&r| self.unpack(r))
    }

    /// How many rows there are.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are none (the object has no CFI).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn unpack(&self, row: PackedRow) -> CompactRow {
        CompactRow::new(row.pc, self.rules[usize::from(row.rule)])
    }

    /// The virtual address the start of an executable mapping at `file_offset` stands for
    /// (see [`mapping_vaddr`]).
    pub fn mapping_vaddr(&self, file_offset: u64) -> Option<u64> {
        mapping_vaddr(&self.segments, file_offset)
    }
}

/// The virtual address that the first byte of an executable mapping of an object at
/// `file_offset` (page-aligned, as in `/proc/PID/maps`) stands for, given the object's
/// executable `segments`: the segment whose pages hold that offset. A segment need not start
/// on a page (lld puts `.text` at file offset 0x16930, address 0x17930), so the mapping's first
/// byte may lie before it, and also inside the previous, read-only, segment's last page: only
/// the executable segments are asked.
pub fn mapping_vaddr(segments: &[(u64, u64, u64)], file_offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| file_offset >= s.0 & !0xfff && file_offset < s.0 + s.1.max(1))
        .map(|s| file_offset.wrapping_sub(s.0).wrapping_add(s.2))
}

/// A PLT stub's CFA expression: `DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and;
/// DW_OP_lit<N>; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus`, N being 11 (`.plt`'s 16-byte
/// entries) or 10. Returns N.
fn plt_threshold(expr: &[u8]) -> Option<i32> {
    match expr {
        [
            0x77,
            0x08,
            0x80,
            0x00,
            0x3f,
            0x1a,
            lit,
            0x2a,
            0x33,
            0x24,
            0x22,
        ] if (0x30..=0x4f).contains(lit) => Some(i32::from(*lit - 0x30)),
        _ => None,
    }
}

/// A signal trampoline's CFA expression: `DW_OP_breg7 160; DW_OP_deref` (the interrupted rsp,
/// saved in the `ucontext` at rsp).
fn is_signal_cfa(expr: &[u8]) -> bool {
    expr == [0x77, 0xa0, 0x01, 0x06]
}

struct Sections {
    eh: Vec<u8>,
    eh_address: u64,
    debug: Vec<u8>,
    text_address: u64,
    got_address: u64,
    go: bool,
    segments: Vec<(u64, u64, u64)>,
}

/// Sizes of an object's call frame information sections, as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CfiSizes {
    /// `.eh_frame`.
    pub eh_frame: u64,
    /// `.debug_frame`.
    pub debug_frame: u64,
}

impl CfiSizes {
    /// Both together: what compiling the table costs, in proportion.
    pub fn total(&self) -> u64 {
        self.eh_frame.saturating_add(self.debug_frame)
    }

    /// Whether a section passes [`Limits::max_section_bytes`] as stored (the compiler refuses
    /// it with [`CompileError::SectionTooLarge`]; known before anything is read).
    pub fn past(&self, limits: &Limits) -> bool {
        self.eh_frame.max(self.debug_frame) > limits.max_section_bytes
    }
}

/// The CFI section sizes of the object open as `file`, from its section headers alone; `None`
/// when they cannot be read.
pub fn cfi_sizes(file: &File) -> Option<CfiSizes> {
    use object::read::elf::{FileHeader, SectionHeader};
    let cache = read_cache(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, &cache).ok()?;
    let size = |name: &[u8]| {
        sections
            .section_by_name(endian, name)
            .map_or(0, |(_, s)| s.sh_size(endian))
    };
    Some(CfiSizes {
        eh_frame: size(b".eh_frame"),
        debug_frame: size(b".debug_frame"),
    })
}

/// Reads the CFI sections of the object open as `file` (`path` names it in messages).
fn read_sections(file: &File, path: &Path, limits: &Limits) -> Result<Sections, CompileError> {
    use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
    use std::os::unix::fs::FileExt;
    let cache = read_cache(file);
    let elf_error = |source| crate::Error::Elf {
        path: path.to_owned(),
        source,
    };
    let header =
        object::elf::FileHeader64::<object::Endianness>::parse(&cache).map_err(elf_error)?;
    let endian = header.endian().map_err(elf_error)?;
    let sections = header.sections(endian, &cache).map_err(elf_error)?;
    let too_large = |section: &'static str, size_bytes: u64| CompileError::SectionTooLarge {
        path: path.to_owned(),
        section,
        size_bytes,
        max_bytes: limits.max_section_bytes,
    };
    // (bytes, address) of a section, or nothing when it is absent or has no bytes in the file.
    let read = |name: &'static str| -> Result<Option<(Vec<u8>, u64)>, CompileError> {
        let Some((_, s)) = sections.section_by_name(endian, name.as_bytes()) else {
            return Ok(None);
        };
        if s.sh_type(endian) == object::elf::SHT_NOBITS {
            return Ok(None);
        }
        let compressed = s.sh_flags(endian) & u64::from(object::elf::SHF_COMPRESSED) != 0;
        if compressed {
            if let Ok(Some((h, _, _))) = s.compression(endian, &cache) {
                use object::read::elf::CompressionHeader;
                let size = h.ch_size(endian);
                if size > limits.max_section_bytes {
                    return Err(too_large(name, size));
                }
            }
            return Ok(inflate_section(s, endian, &cache).map(|b| (b, s.sh_addr(endian))));
        }
        let size = s.sh_size(endian);
        if size > limits.max_section_bytes {
            return Err(too_large(name, size));
        }
        let mut bytes = vec![0u8; size as usize];
        file.read_exact_at(&mut bytes, s.sh_offset(endian))
            .map_err(|source| crate::Error::Io {
                path: path.to_owned(),
                source,
            })?;
        Ok(Some((bytes, s.sh_addr(endian))))
    };
    let address = |name: &[u8]| {
        sections
            .section_by_name(endian, name)
            .map_or(0, |(_, s)| s.sh_addr(endian))
    };
    let segments = header
        .program_headers(endian, &cache)
        .map_err(elf_error)?
        .iter()
        .filter(|p| {
            p.p_type(endian) == object::elf::PT_LOAD && p.p_flags(endian) & object::elf::PF_X != 0
        })
        .map(|p| (p.p_offset(endian), p.p_filesz(endian), p.p_vaddr(endian)))
        .collect();
    let (eh, eh_address) = read(".eh_frame")?.unwrap_or_default();
    let (debug, _) = read(".debug_frame")?.unwrap_or_default();
    Ok(Sections {
        eh,
        eh_address,
        debug,
        text_address: address(b".text"),
        got_address: address(b".got"),
        go: [&b".go.buildinfo"[..], b".note.go.buildid", b".gopclntab"]
            .iter()
            .any(|name| sections.section_by_name(endian, name).is_some()),
        segments,
    })
}

/// Compiles the unwind table of the object open as `file` (`path` names it in messages). An
/// object without CFI gives an empty table.
pub fn compile(file: &File, path: &Path, limits: &Limits) -> Result<CompactTable, CompileError> {
    let s = read_sections(file, path, limits)?;
    let bases = BaseAddresses::default()
        .set_eh_frame(s.eh_address)
        .set_text(s.text_address)
        .set_got(s.got_address);
    let mut out = Compiler {
        rows: Vec::new(),
        rules: vec![END_RULE],
        rule_ids: FxHashMap::from_iter([(END_RULE, END)]),
        functions: Vec::new(),
        bad_fdes: 0,
        fdes: 0,
        limits,
        path,
    };
    // `.debug_frame` first: where both cover an address `.eh_frame`'s rows come later and win.
    let mut debug_frame = DebugFrame::new(&s.debug, LittleEndian);
    debug_frame.set_address_size(8);
    out.section(&debug_frame, &s.debug, &bases)?;
    let mut eh_frame = EhFrame::new(&s.eh, LittleEndian);
    eh_frame.set_address_size(8);
    out.section(&eh_frame, &s.eh, &bases)?;
    let two_sections = !s.eh.is_empty() && !s.debug.is_empty();
    // The sections' bytes are not needed any more: the rows are sorted without them.
    drop(s.eh);
    drop(s.debug);
    let mut table = out.finish(s.go, two_sections);
    table.segments = s.segments;
    Ok(table)
}

struct Compiler<'a> {
    /// Rows in the sections' order (`.debug_frame`'s, then `.eh_frame`'s), sorted later.
    rows: Vec<PackedRow>,
    /// The distinct rules, [`END_RULE`] first, and their indexes.
    rules: Vec<Rule>,
    rule_ids: FxHashMap<Rule, u16>,
    /// (start, end) of each FDE, for the census.
    functions: Vec<(u32, u32)>,
    bad_fdes: u64,
    fdes: u64,
    limits: &'a Limits,
    path: &'a Path,
}

impl Compiler<'_> {
    fn section<'s, S: UnwindSection<gimli::EndianSlice<'s, LittleEndian>>>(
        &mut self,
        section: &S,
        bytes: &'s [u8],
        bases: &BaseAddresses,
    ) -> Result<(), CompileError>
    where
        S::Offset: gimli::UnwindOffset<usize>,
    {
        let mut ctx = Box::new(UnwindContext::<usize, FewRules>::new_in());
        let mut entries = section.entries(bases);
        // A malformed entry ends the scan: what was compiled before it stays usable.
        loop {
            let entry = match entries.next() {
                Ok(Some(entry)) => entry,
                Ok(None) => break,
                Err(_) => {
                    self.bad_fdes += 1;
                    break;
                }
            };
            let gimli::CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let Ok(fde) = partial.parse(S::cie_from_offset) else {
                self.bad_fdes += 1;
                continue;
            };
            if fde.len() == 0 {
                continue;
            }
            // Every address of the FDE fits the rows' 32 bits.
            let (Ok(start), Ok(end)) = (
                u32::try_from(fde.initial_address()),
                u32::try_from(fde.initial_address().saturating_add(fde.len())),
            ) else {
                return Err(CompileError::AddressTooLarge {
                    path: self.path.to_owned(),
                    address: fde.initial_address().saturating_add(fde.len()),
                });
            };
            self.fdes += 1;
            let signal = fde.cie().is_signal_trampoline();
            let before = self.rows.len();
            let Ok(mut table) = fde.rows(section, bases, &mut ctx) else {
                self.bad_fdes += 1;
                continue;
            };
            let mut ok = true;
            loop {
                match table.next_row() {
                    Ok(Some(row)) => {
                        // Within its FDE, whose end was checked to fit.
                        let pc = row.start_address() as u32;
                        self.push(pc, convert(row, bytes, signal))?;
                        if self.rows.len() > self.limits.max_rows {
                            return Err(CompileError::TooManyRows {
                                path: self.path.to_owned(),
                                max_rows: self.limits.max_rows,
                            });
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        ok = false;
                        break;
                    }
                }
            }
            if !ok {
                // A CFA program gimli refused: its code is marked, not guessed at.
                self.bad_fdes += 1;
                self.rows.truncate(before);
                let rule = self.rule_id(UNSUPPORTED_RULE)?;
                self.rows.push(PackedRow { pc: start, rule });
            }
            // Where the function ends, nothing covers until another row says so (the sort puts
            // a function starting there after this marker).
            self.push(end, END_RULE)?;
            self.functions.push((start, end));
        }
        Ok(())
    }

    /// The index of `rule` among the table's rules, added when new.
    fn rule_id(&mut self, rule: Rule) -> Result<u16, CompileError> {
        if let Some(&id) = self.rule_ids.get(&rule) {
            return Ok(id);
        }
        let Ok(id) = u16::try_from(self.rules.len()) else {
            return Err(CompileError::TooManyRules {
                path: self.path.to_owned(),
                max_rules: usize::from(u16::MAX) + 1,
            });
        };
        self.rules.push(rule);
        self.rule_ids.insert(rule, id);
        Ok(id)
    }

    /// Appends a row, merging it at once with the last when the sections list them in address
    /// order (as linkers write them): a row with the last one's rule adds nothing, and a row at
    /// the address of an end marker replaces it. What is left is merged after the sort; memory
    /// stays near the final table's.
    fn push(&mut self, pc: u32, rule: Rule) -> Result<(), CompileError> {
        // Most rows repeat the last one's rule: compared before the rules' map is asked.
        if let Some(last) = self.rows.last()
            && last.pc < pc
            && self.rules[usize::from(last.rule)] == rule
        {
            return Ok(());
        }
        let rule = self.rule_id(rule)?;
        let row = PackedRow { pc, rule };
        if let Some(last) = self.rows.last_mut()
            && last.pc == pc
            && last.rule == END
        {
            *last = row;
            return Ok(());
        }
        self.rows.push(row);
        Ok(())
    }

    fn finish(mut self, go: bool, two_sections: bool) -> CompactTable {
        // By address; at one address an end marker first, then the rows in the sections'
        // order (`.debug_frame`'s, then `.eh_frame`'s: the sort is then stable), the last
        // winning. With one section no two rows but an end marker share an address, and the
        // unstable sort needs no memory of its own.
        let key = |r: &PackedRow| (r.pc, r.rule != END);
        if two_sections {
            self.rows.sort_by_key(key);
        } else {
            self.rows.sort_unstable_by_key(key);
        }
        // Merged in place: `n` rows kept at the front.
        let mut rows = std::mem::take(&mut self.rows);
        let mut n = 0;
        for i in 0..rows.len() {
            let row = rows[i];
            if n > 0 && rows[n - 1].pc == row.pc {
                rows[n - 1] = row;
                // The one replaced may have differed from its predecessor where this does not.
                if n >= 2 && rows[n - 2].rule == row.rule {
                    n -= 1;
                }
                continue;
            }
            if n > 0 && rows[n - 1].rule == row.rule {
                continue;
            }
            if n == 0 && row.rule == END {
                continue;
            }
            rows[n] = row;
            n += 1;
        }
        rows.truncate(n);
        rows.shrink_to_fit();
        let mut rules = std::mem::take(&mut self.rules);
        rules.shrink_to_fit();
        let mut table = CompactTable {
            rows,
            rules,
            census: FramePointerCensus {
                go,
                ..FramePointerCensus::default()
            },
            bad_fdes: self.bad_fdes,
            fdes: self.fdes,
            segments: Vec::new(),
        };
        if !go {
            self.functions.sort_unstable();
            table.census = census(&table, &self.functions);
        }
        table
    }
}

/// The census of [`FramePointerCensus`] from compiled rows: the row in the middle of up to
/// [`CENSUS_FUNCTIONS`] functions spread over the object.
fn census(table: &CompactTable, functions: &[(u32, u32)]) -> FramePointerCensus {
    let mut census = FramePointerCensus::default();
    if functions.is_empty() {
        return census;
    }
    let step = functions.len().div_ceil(CENSUS_FUNCTIONS);
    for &(start, end) in functions.iter().step_by(step) {
        // Functions of a few instructions are leaves or stubs: they say nothing.
        if end - start < 16 {
            continue;
        }
        let Some(row) = table.row(u64::from(start + (end - start) / 2)) else {
            continue;
        };
        if row.kind == RowKind::Unsupported {
            continue;
        }
        census.sampled += 1;
        if row.kind == RowKind::Bp && row.cfa_offset == 16 {
            census.framed += 1;
        }
    }
    census
}

fn convert<S: gimli::UnwindContextStorage<usize>>(
    row: &gimli::UnwindTableRow<usize, S>,
    section: &[u8],
    signal: bool,
) -> Rule {
    let expr = |e: &gimli::UnwindExpression<usize>| {
        section
            .get(e.offset..e.offset.saturating_add(e.length))
            .unwrap_or_default()
    };
    let mut out = UNSUPPORTED_RULE;
    let (kind, offset) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == RSP => {
            (RowKind::Sp, *offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if *register == RBP => {
            (RowKind::Bp, *offset)
        }
        CfaRule::RegisterAndOffset { .. } => return out,
        CfaRule::Expression(e) => {
            let bytes = expr(e);
            if signal && is_signal_cfa(bytes) {
                out.kind = RowKind::Signal;
                out.rbp = RbpRule::Same;
                return out;
            }
            match plt_threshold(bytes) {
                Some(n) => (RowKind::Plt, i64::from(n)),
                None => return out,
            }
        }
    };
    let Ok(offset) = i32::try_from(offset) else {
        return out;
    };
    out.cfa_offset = offset;
    // The caller's rsp is the CFA unless a rule says otherwise.
    if row
        .register(RSP)
        .is_some_and(|r| r != RegisterRule::ValOffset(0))
    {
        return out;
    }
    match row.register(RA) {
        // No rule for the return address: undefined, the end of the stack.
        None | Some(RegisterRule::Undefined) => {
            out.kind = RowKind::Outermost;
            out.rbp = RbpRule::Same;
            return out;
        }
        Some(RegisterRule::Offset(-8)) => {}
        Some(_) => return out,
    }
    out.kind = kind;
    match row.register(RBP) {
        None | Some(RegisterRule::SameValue) => out.rbp = RbpRule::Same,
        Some(RegisterRule::Offset(n)) => match i16::try_from(n) {
            Ok(n) => {
                out.rbp = RbpRule::At;
                out.rbp_offset = n;
            }
            Err(_) => out.rbp = RbpRule::Lost,
        },
        Some(_) => out.rbp = RbpRule::Lost,
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile_path(path: &str) -> Option<CompactTable> {
        let path = Path::new(path);
        let Ok(file) = File::open(path) else {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("SKIP: {} missing", path.display());
            }
            return None;
        };
        Some(compile(&file, path, &Limits::default()).unwrap())
    }

    /// Checks what every table must hold: sorted rows, no two equal neighbours.
    fn well_formed(t: &CompactTable) -> Vec<CompactRow> {
        let rows: Vec<CompactRow> = t.rows().collect();
        assert!(rows.windows(2).all(|w| w[0].pc < w[1].pc));
        assert!(rows.windows(2).all(|w| w[0].rule() != w[1].rule()));
        rows
    }

    #[test]
    fn debian_gzip_and_xz_compile_into_rows_that_cover_their_functions() {
        for bin in ["/usr/bin/gzip", "/usr/bin/xz"] {
            let Some(t) = compile_path(bin) else {
                continue;
            };
            let rows = well_formed(&t);
            assert!(t.fdes > 50, "{bin}: {} FDEs", t.fdes);
            assert_eq!(t.bad_fdes, 0, "{bin}");
            // Built without frame pointers: most rows define the CFA from rsp.
            let sp = rows.iter().filter(|r| r.kind == RowKind::Sp).count();
            assert!(sp * 2 > rows.len(), "{bin}: {sp} of {}", rows.len());
            assert!(!t.census.keeps_frame_pointers(), "{bin}: {:?}", t.census);
            // The PLT's expression is recognized (Debian links with lazy binding's .plt).
            let plt = rows.iter().filter(|r| r.kind == RowKind::Plt).count();
            assert!(plt >= 1, "{bin}: no PLT row");
            // `_start` is the outermost function.
            assert!(rows.iter().any(|r| r.kind == RowKind::Outermost), "{bin}");
            // Fewer rows than the FDEs' rows taken one by one: equal neighbours merged.
            assert!(rows.len() < 20 * t.fdes as usize);
            assert!(
                rows.iter().all(|r| r.kind != RowKind::Unsupported),
                "{bin}: {:?}",
                rows.iter().find(|r| r.kind == RowKind::Unsupported)
            );
        }
    }

    #[test]
    fn libc_has_its_signal_trampoline_and_rbp_saves() {
        let Some(t) = compile_path("/lib/x86_64-linux-gnu/libc.so.6") else {
            return;
        };
        let rows = well_formed(&t);
        assert!(t.fdes > 1000);
        assert_eq!(rows.iter().filter(|r| r.kind == RowKind::Signal).count(), 1);
        // Functions that save rbp (pushed after the return address: CFA − 16).
        assert!(
            rows.iter()
                .any(|r| r.rbp == RbpRule::At && r.rbp_offset == -16)
        );
        // Every address covered by a row is in some FDE; an end marker follows the last.
        assert_eq!(rows.last().unwrap().kind, RowKind::End);
        let unsupported = rows
            .iter()
            .filter(|r| r.kind == RowKind::Unsupported)
            .count();
        // glibc's assembly has a handful of expressions the walk does not take.
        assert!(unsupported * 100 < rows.len(), "{unsupported}");
    }

    #[test]
    fn the_row_for_an_address_agrees_with_the_lazy_table() {
        let path = Path::new("/usr/bin/gzip");
        let Some(t) = compile_path("/usr/bin/gzip") else {
            return;
        };
        let lazy = super::super::UnwindTable::read(&File::open(path).unwrap(), path).unwrap();
        let rows = well_formed(&t);
        let (first, last) = (rows[0].pc, rows.last().unwrap().pc);
        let mut checked = 0;
        for addr in (u64::from(first)..u64::from(last)).step_by(7) {
            let compact = t.row(addr);
            let row = lazy.row(addr);
            match (compact, row) {
                (None, None) => {}
                (Some(c), Some(r)) => {
                    checked += 1;
                    let cfa = match c.kind {
                        RowKind::Sp => Some(super::super::Cfa::Sp(i64::from(c.cfa_offset))),
                        RowKind::Bp => Some(super::super::Cfa::Bp(i64::from(c.cfa_offset))),
                        _ => None,
                    };
                    if let Some(cfa) = cfa {
                        assert_eq!(cfa, r.cfa, "at {addr:#x}");
                    }
                }
                (c, r) => panic!("at {addr:#x}: {c:?} vs {r:?}"),
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn a_mapping_finds_its_executable_segment_even_off_page() {
        // lld's layout: a read-only segment, then .text at offset 0x16930, address 0x17930.
        let segments = [(0x16930, 0x3f010, 0x17930)];
        // The r-x mapping starts at the page holding 0x16930.
        assert_eq!(mapping_vaddr(&segments, 0x16000), Some(0x17000));
        // gcc's layout: offsets and addresses equal, page-aligned.
        assert_eq!(
            mapping_vaddr(&[(0x1000, 0x5000, 0x1000)], 0x1000),
            Some(0x1000)
        );
        assert_eq!(mapping_vaddr(&segments, 0x0), None);
        let Some(t) = compile_path("/usr/bin/gzip") else {
            return;
        };
        assert_eq!(t.segments.len(), 1, "{:?}", t.segments);
        let file = File::open("/usr/bin/gzip").unwrap();
        assert!(cfi_sizes(&file).is_some_and(|s| s.total() > 1000 && s.total() < 1 << 20));
    }

    #[test]
    fn limits_bound_the_work() {
        let path = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let Ok(file) = File::open(path) else {
            return;
        };
        let small = Limits {
            max_section_bytes: 1024,
            ..Limits::default()
        };
        assert!(matches!(
            compile(&file, path, &small),
            Err(CompileError::SectionTooLarge { .. })
        ));
        let few = Limits {
            max_rows: 100,
            ..Limits::default()
        };
        assert!(matches!(
            compile(&file, path, &few),
            Err(CompileError::TooManyRows { max_rows: 100, .. })
        ));
    }

    #[test]
    fn a_section_past_the_limit_is_known_from_the_headers() {
        let limits = Limits::default();
        let small = CfiSizes {
            eh_frame: 1 << 20,
            debug_frame: 2 << 20,
        };
        assert!(!small.past(&limits));
        assert_eq!(small.total(), 3 << 20);
        let huge = CfiSizes {
            debug_frame: limits.max_section_bytes + 1,
            ..small
        };
        assert!(huge.past(&limits));
        // This test binary's own sizes are read, and within the limits.
        let exe = File::open(std::env::current_exe().unwrap()).unwrap();
        let own = cfi_sizes(&exe).unwrap();
        assert!(own.eh_frame > 0 && !own.past(&limits), "{own:?}");
    }

    #[test]
    fn garbage_cfi_gives_an_empty_table_or_marks_never_a_panic() {
        // An ELF whose .eh_frame is noise: this test binary with its CFI replaced.
        let exe = std::env::current_exe().unwrap();
        let mut bytes = std::fs::read(&exe).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        use object::{Object, ObjectSection};
        let Some((offset, size)) = elf
            .section_by_name(".eh_frame")
            .and_then(|s| s.file_range())
        else {
            return;
        };
        let mut x = 0x9E37_79B9u32;
        for b in &mut bytes[offset as usize..(offset + size) as usize] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad");
        std::fs::write(&bad, &bytes).unwrap();
        let t = compile(&File::open(&bad).unwrap(), &bad, &Limits::default()).unwrap();
        well_formed(&t);
        // Noise is named as such: at least the entry that ended the scan.
        assert!(t.bad_fdes >= 1, "{t:?}");
    }
}
