//! Unwinding user stacks with DWARF call frame information, perf's `--call-graph dwarf` way: the
//! agent's BPF program copies a sample's registers and the top of its user stack, and
//! [`unwind`] walks that copy here with each object's `.eh_frame` (or `.debug_frame`).
//!
//! [`UnwindTable`] is built once per object (the agent caches it per build id and shares it
//! between every process that maps the file): it keeps the CFI sections' bytes and a sorted
//! index of their FDEs, and memoizes the row it computes for each address it is asked about.
//! Where no CFI covers an address (JIT code, Go code without `.debug_frame`, unknown
//! mappings), the walk uses frame pointers for that frame.
//!
//! Frame pointers are the fast path where they are valid: [`UnwindTable::keeps_frame_pointers`]
//! says whether an object's code keeps them (Go binaries; code built with
//! `-fno-omit-frame-pointer`, judged from its CFI), the BPF program walks such processes' stacks by
//! frame pointers itself, and [`frame_pointer_leaf`] checks the one frame a frame-pointer walk
//! can get wrong, the leaf's.
//!
//! x86-64 only: registers are DWARF's numbers 6 (rbp), 7 (rsp) and 16 (the return address).

pub mod compact;

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::read_at::read_cache;
use gimli::{
    BaseAddresses, CfaRule, DebugFrame, EhFrame, EndianSlice, LittleEndian, Register, RegisterRule,
    UnwindContext, UnwindSection,
};
use rustc_hash::FxHashMap;

use crate::Error;

const RBP: Register = Register(6);
const RSP: Register = Register(7);
const RA: Register = Register(16);

/// gimli's evaluation context with room for [`MAX_REGISTER_RULES`] register rules a row instead of
/// its default 192. The context copies a whole row at every `DW_CFA_remember_state` (common in
/// glibc and optimized code, which have several epilogues per function) and keeps up to four;
/// at 192 rules that copy was about half the agent's time compiling tables on a busy node. An
/// FDE that sets more rules than this is refused by gimli and marked as one the tables cannot
/// unwind, as any FDE gimli refuses.
#[derive(Debug)]
pub(crate) struct FewRules;

/// x86-64 has 17 general registers and the return address; SysV code saves no vector registers,
/// so CFI names at most those (glibc, Node.js, libjvm, LLVM, rustc's driver, CPython, PHP and
/// Ruby compile to the same tables, none refused, with 32 rules as with 192).
const MAX_REGISTER_RULES: usize = 32;

impl gimli::UnwindContextStorage<usize> for FewRules {
    type Rules = [(Register, RegisterRule<usize>); MAX_REGISTER_RULES];
    type Stack = Box<[gimli::UnwindTableRow<usize, Self>; 4]>;
}

/// Rows memoized per table before the memo is cleared (each is a few dozen bytes).
const MAX_MEMO_ROWS: usize = 1 << 16;

/// The registers a walk starts from (the sampled thread's user registers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registers {
    /// Instruction pointer (rip).
    pub ip: u64,
    /// Stack pointer (rsp).
    pub sp: u64,
    /// Frame pointer (rbp).
    pub bp: u64,
}

/// A copy of the top of a user stack: `bytes` were at addresses `[sp, sp + bytes.len())`.
#[derive(Debug, Clone, Copy)]
pub struct StackCopy<'a> {
    /// The address of `bytes[0]` (the stack pointer when the copy was made).
    pub sp: u64,
    /// The copied bytes.
    pub bytes: &'a [u8],
}

impl StackCopy<'_> {
    /// The 8 bytes at `addr`, when they were copied.
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let bytes = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackEnd {
    /// It reached the start: a frame whose return address is undefined (`_start`, a thread's
    /// first function), a null return address, or a null frame pointer.
    Complete,
    /// A frame had no unwind information and frame pointers did not lead on.
    NoUnwindInfo,
    /// The next frame lay outside the copied part of the stack (or was unreadable).
    Unreadable,
    /// The walk stopped at the depth limit with frames left: the stack was cut.
    DepthLimit,
    /// The unwind information was malformed, unsupported, or led nowhere (no progress).
    BadUnwindInfo,
}

impl StackEnd {
    /// Every reason, for metrics.
    pub const ALL: [StackEnd; 5] = [
        StackEnd::Complete,
        StackEnd::NoUnwindInfo,
        StackEnd::Unreadable,
        StackEnd::DepthLimit,
        StackEnd::BadUnwindInfo,
    ];

    /// A short name for labels (`complete`, `no_unwind_info`, `unreadable_memory`,
    /// `depth_limit`, `bad_unwind_info`).
    pub fn as_str(self) -> &'static str {
        match self {
            StackEnd::Complete => "complete",
            StackEnd::NoUnwindInfo => "no_unwind_info",
            StackEnd::Unreadable => "unreadable_memory",
            StackEnd::DepthLimit => "depth_limit",
            StackEnd::BadUnwindInfo => "bad_unwind_info",
        }
    }
}

/// Which CFI section an FDE or expression is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    EhFrame,
    DebugFrame,
}

/// A DWARF expression in a CFI section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExprRef {
    which: Which,
    offset: usize,
    length: usize,
}

/// How a register of the caller is recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Unchanged (callee-saved and not saved yet, or never touched).
    Same,
    /// No value: for the return address, the end of the stack.
    Undefined,
    /// Saved at CFA + n.
    At(i64),
    /// Is CFA + n.
    ValAt(i64),
    /// Saved at the address an expression computes.
    Expr(ExprRef),
    /// Is the value an expression computes.
    ValExpr(ExprRef),
    Unsupported,
}

/// How the CFA is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cfa {
    Sp(i64),
    Bp(i64),
    Expr(ExprRef),
    Unsupported,
}

/// One row of the CFI table, reduced to what an x86-64 walk needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    cfa: Cfa,
    ra: Rule,
    bp: Rule,
    sp: Rule,
    /// The FDE is a signal trampoline's: the caller's address is exact, not a return address.
    signal: bool,
}

/// One FDE of the index: the code it covers, where it is and where its CIE is.
#[derive(Debug, Clone, Copy)]
struct FdeEntry {
    start: u64,
    len: u32,
    /// Offsets in the section.
    offset: u32,
    cie: u32,
    which: Which,
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    vaddr: u64,
}

/// Where a CFI section's bytes are: read from the file when needed (uncompressed sections, the
/// usual case: only the index stays in memory), or held (compressed ones, as Go's).
#[derive(Debug, Default)]
struct Section {
    file_offset: Option<u64>,
    size: u64,
    memory: Box<[u8]>,
}

/// The call frame information of one object: a sorted index of the FDEs of `.eh_frame` and
/// `.debug_frame` (their bytes stay in the file and are read again for the few addresses whose
/// rows are computed), and the object's segments to turn file offsets into addresses.
pub struct UnwindTable {
    file: File,
    eh_frame: Section,
    eh_frame_address: u64,
    debug_frame: Section,
    text_address: u64,
    got_address: u64,
    fdes: Vec<FdeEntry>,
    segments: Vec<Segment>,
    memo: Mutex<FxHashMap<u64, Option<Row>>>,
    census: FramePointerCensus,
}

/// What an object's CFI says of its frame pointers: of `sampled` functions (up to
/// [`CENSUS_FUNCTIONS`], spread over the object), `framed` define their frame from rbp in the
/// middle of their code (`CFA = rbp + 16`), as code built with frame pointers does; code built
/// without them does so only for the odd function with `alloca`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FramePointerCensus {
    /// Functions whose row was read.
    pub sampled: u32,
    /// Of which keep rbp as their frame pointer.
    pub framed: u32,
    /// A Go binary: Go keeps frame pointers on x86-64 in every function with a frame (its CFI
    /// defines frames from rsp, so the census does not apply).
    pub go: bool,
}

/// Functions whose CFI row [`FramePointerCensus`] reads per object.
pub const CENSUS_FUNCTIONS: usize = 64;

impl FramePointerCensus {
    /// Whether the object's code keeps frame pointers: a Go binary, or nine in ten of the
    /// functions sampled framed by rbp. Calibrated on real binaries: Debian's packages (built
    /// without frame pointers) frame 0-11% of their functions; a Rust release build, whose
    /// standard library keeps frame pointers and whose own code does not, 79%; code built as
    /// Fedora and Ubuntu 24.04 build theirs (`-fno-omit-frame-pointer
    /// -mno-omit-leaf-frame-pointer`) nearly all. A mixed object must not pass: its stacks would
    /// skip callers. Each walk is also checked frame by frame ([`check_frame_pointer_walk`]).
    pub fn keeps_frame_pointers(&self) -> bool {
        self.go || (self.sampled >= 8 && self.framed * 10 >= self.sampled * 9)
    }
}

impl std::fmt::Debug for UnwindTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnwindTable")
            .field("n_fdes", &self.fdes.len())
            .field("eh_frame_bytes", &self.eh_frame.size)
            .field("debug_frame_bytes", &self.debug_frame.size)
            .finish()
    }
}

/// CFI sections larger than this (decompressed) are not read: larger ones come from hostile or
/// broken objects (the largest real ones here, LLVM's and `librustc_driver`'s, are under
/// 10 MB). [`UnwindTable::read`] keeps to it (the object is then walked with frame pointers),
/// and so does [`compact`] by default, so that a hostile object costs no more memory in one than
/// in the other.
pub const MAX_SECTION_BYTES: u64 = 64 << 20;

/// One CIE or FDE larger than this is not read.
const MAX_ENTRY_BYTES: u64 = 1 << 20;

impl UnwindTable {
    /// Reads the CFI of the object open as `file` (`path` names it in messages). An object
    /// without any gives an empty table (every frame in it is walked with frame pointers).
    #[expect(
        clippy::too_many_lines,
        reason = "one pass over an object's CFI, the limits checked at each entry"
    )]
    pub fn read(file: &File, path: &Path) -> Result<UnwindTable, Error> {
        use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
        use std::os::unix::fs::FileExt;
        // Headers only, through the low-level reader: `object::File::parse` would read the
        // symbol tables too (40 ms for curl, 150 ms for libLLVM), on the sampling thread.
        let cache = read_cache(file);
        let elf_error = |source| Error::Elf {
            path: path.to_owned(),
            source,
        };
        let header =
            object::elf::FileHeader64::<object::Endianness>::parse(&cache).map_err(elf_error)?;
        let endian = header.endian().map_err(elf_error)?;
        let sections = header.sections(endian, &cache).map_err(elf_error)?;
        // (file offset, size, address) of an uncompressed section with bytes in the file.
        let find = |name: &[u8]| -> Option<(u64, u64, u64)> {
            let (_, s) = sections.section_by_name(endian, name)?;
            let compressed = s.sh_flags(endian) & u64::from(object::elf::SHF_COMPRESSED) != 0;
            (s.sh_type(endian) != object::elf::SHT_NOBITS && !compressed)
                .then(|| (s.sh_offset(endian), s.sh_size(endian), s.sh_addr(endian)))
        };
        let read_bytes = |offset: u64, size: u64| -> Option<Vec<u8>> {
            if size > MAX_SECTION_BYTES {
                return None;
            }
            let mut bytes = vec![0u8; size as usize];
            file.read_exact_at(&mut bytes, offset).ok()?;
            Some(bytes)
        };
        let located = |(offset, size, _): (u64, u64, u64)| Section {
            file_offset: Some(offset),
            size,
            memory: Box::default(),
        };
        // The linker's sorted table of `.eh_frame`'s FDEs (8 bytes each) is the index when it
        // is there: `.eh_frame` itself is then never read whole.
        let eh = find(b".eh_frame").filter(|e| e.1 <= MAX_SECTION_BYTES);
        let hdr_index = find(b".eh_frame_hdr").and_then(|(offset, size, address)| {
            eh_frame_hdr_index(&read_bytes(offset, size)?, address)
        });
        let (eh_frame, eh_bytes, eh_frame_address) = match eh {
            Some(e) if hdr_index.is_some() => (located(e), Vec::new(), e.2),
            Some(e) => match read_bytes(e.0, e.1) {
                Some(bytes) => (located(e), bytes, e.2),
                None => (Section::default(), Vec::new(), 0),
            },
            None => (Section::default(), Vec::new(), 0),
        };
        // A compressed `.debug_frame` (Go's) is inflated and held; an uncompressed one stays
        // in the file.
        let (debug_frame, debug_bytes) = match find(b".debug_frame") {
            Some(d) => match read_bytes(d.0, d.1) {
                Some(bytes) => (located(d), bytes),
                None => (Section::default(), Vec::new()),
            },
            None => {
                let inflated = sections
                    .section_by_name(endian, b".debug_frame")
                    .and_then(|(_, s)| inflate_section(s, endian, &cache));
                match inflated {
                    Some(bytes) => (
                        Section {
                            file_offset: None,
                            size: bytes.len() as u64,
                            memory: bytes.into_boxed_slice(),
                        },
                        Vec::new(),
                    ),
                    None => (Section::default(), Vec::new()),
                }
            }
        };
        let go = [&b".go.buildinfo"[..], b".note.go.buildid", b".gopclntab"]
            .iter()
            .any(|name| sections.section_by_name(endian, name).is_some());
        let text_address = find(b".text").map_or(0, |t| t.2);
        let got_address = find(b".got").map_or(0, |g| g.2);
        let segments = header
            .program_headers(endian, &cache)
            .map_err(elf_error)?
            .iter()
            .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
            .map(|p| Segment {
                file_offset: p.p_offset(endian),
                file_size: p.p_filesz(endian),
                vaddr: p.p_vaddr(endian),
            })
            .collect();
        let mut table = UnwindTable {
            file: file.try_clone().map_err(|source| Error::Io {
                path: path.to_owned(),
                source,
            })?,
            eh_frame,
            eh_frame_address,
            debug_frame,
            text_address,
            got_address,
            fdes: Vec::new(),
            segments,
            memo: Mutex::new(FxHashMap::default()),
            census: FramePointerCensus {
                go,
                ..FramePointerCensus::default()
            },
        };
        let eh: &[u8] = if table.eh_frame.file_offset.is_some() {
            &eh_bytes
        } else {
            &table.eh_frame.memory
        };
        let debug: &[u8] = if table.debug_frame.file_offset.is_some() {
            &debug_bytes
        } else {
            &table.debug_frame.memory
        };
        let mut fdes = index(eh, debug, &table.bases(eh_frame_address));
        if let Some(hdr) = hdr_index {
            let eh_frame_address = table.eh_frame_address;
            fdes.extend(hdr.into_iter().filter_map(|(start, fde_address)| {
                Some(FdeEntry {
                    start,
                    len: 0,
                    offset: u32::try_from(fde_address.checked_sub(eh_frame_address)?).ok()?,
                    cie: u32::MAX,
                    which: Which::EhFrame,
                })
            }));
            fdes.sort_by_key(|f| (f.start, f.which == Which::EhFrame));
            fdes.shrink_to_fit();
        }
        table.fdes = fdes;
        if !go {
            table.census = table.take_census();
        }
        Ok(table)
    }

    /// Reads the row in the middle of up to [`CENSUS_FUNCTIONS`] functions spread over the
    /// object (the middle of a function is past its prologue and, but for short epilogues,
    /// before its epilogue).
    fn take_census(&self) -> FramePointerCensus {
        let mut census = FramePointerCensus::default();
        let n = self.fdes.len();
        if n == 0 {
            return census;
        }
        let step = n.div_ceil(CENSUS_FUNCTIONS);
        for i in (0..n).step_by(step) {
            let fde = self.fdes[i];
            // An entry from `.eh_frame_hdr` has no length: the next function's start bounds it.
            let end = if fde.len > 0 {
                fde.start + u64::from(fde.len)
            } else {
                match self.fdes.get(i + 1) {
                    Some(next) if next.start > fde.start => next.start,
                    _ => continue,
                }
            };
            // Functions of a few instructions are leaves or stubs: they say nothing.
            if end - fde.start < 16 {
                continue;
            }
            let Some(row) = self.compute_row(fde.start + (end - fde.start) / 2) else {
                continue;
            };
            if row.cfa == Cfa::Unsupported {
                continue;
            }
            census.sampled += 1;
            if row.cfa == Cfa::Bp(16) {
                census.framed += 1;
            }
        }
        census
    }

    /// What the object's CFI says of its frame pointers.
    pub fn frame_pointer_census(&self) -> FramePointerCensus {
        self.census
    }

    /// Whether the object's code keeps frame pointers, so that its stacks can be walked by
    /// them (see [`FramePointerCensus::keeps_frame_pointers`]).
    pub fn keeps_frame_pointers(&self) -> bool {
        self.census.keeps_frame_pointers()
    }

    fn bases(&self, eh_frame_address: u64) -> BaseAddresses {
        BaseAddresses::default()
            .set_eh_frame(eh_frame_address)
            .set_text(self.text_address)
            .set_got(self.got_address)
    }

    /// Number of FDEs indexed.
    pub fn n_fdes(&self) -> usize {
        self.fdes.len()
    }

    /// Bytes held (the index, and CFI sections that had to be decompressed), roughly.
    pub fn size_bytes(&self) -> u64 {
        (self.eh_frame.memory.len()
            + self.debug_frame.memory.len()
            + self.fdes.len() * std::mem::size_of::<FdeEntry>()) as u64
    }

    /// The virtual address of the byte at `file_offset` (see
    /// [`crate::ElfObject::vaddr_of_file_offset`]).
    pub fn vaddr_of_file_offset(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| {
                file_offset >= s.file_offset && file_offset - s.file_offset < s.file_size.max(1)
            })
            .map(|s| file_offset - s.file_offset + s.vaddr)
    }

    /// The row for `vaddr`, memoized; `None` when no FDE covers it.
    fn row(&self, vaddr: u64) -> Option<Row> {
        if let Some(row) = self.memo.lock().ok().and_then(|m| m.get(&vaddr).copied()) {
            return row;
        }
        let row = self.compute_row(vaddr);
        if let Ok(mut memo) = self.memo.lock() {
            if memo.len() >= MAX_MEMO_ROWS {
                memo.clear();
            }
            memo.insert(vaddr, row);
        }
        row
    }

    fn section(&self, which: Which) -> &Section {
        match which {
            Which::EhFrame => &self.eh_frame,
            Which::DebugFrame => &self.debug_frame,
        }
    }

    /// `len` bytes at `offset` of a section.
    fn bytes(&self, which: Which, offset: u64, len: u64) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let section = self.section(which);
        let end = offset.checked_add(len)?;
        if end > section.size || len > MAX_ENTRY_BYTES {
            return None;
        }
        match section.file_offset {
            Some(base) => {
                let mut buf = vec![0u8; len as usize];
                self.file.read_exact_at(&mut buf, base + offset).ok()?;
                Some(buf)
            }
            None => section
                .memory
                .get(offset as usize..end as usize)
                .map(<[u8]>::to_vec),
        }
    }

    /// The bytes of the CIE or FDE at `offset` (32-bit DWARF only, as on x86-64 Linux).
    fn entry(&self, which: Which, offset: u64) -> Option<Vec<u8>> {
        let head = self.bytes(which, offset, 4)?;
        let len = u32::from_le_bytes(head[..4].try_into().ok()?);
        if len >= 0xffff_fff0 {
            return None;
        }
        self.bytes(which, offset, 4 + u64::from(len))
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one match over the CFA and register rules of DWARF's CFI, as gimli gives them"
    )]
    fn compute_row(&self, vaddr: u64) -> Option<Row> {
        let i = self
            .fdes
            .partition_point(|f| f.start <= vaddr)
            .checked_sub(1)?;
        // Overlapping FDEs are rare; look back a little for one that covers the address. An
        // entry of `.eh_frame_hdr` does not know its length (0): gimli checks the range.
        let fde = *self.fdes[i.saturating_sub(3)..=i]
            .iter()
            .rev()
            .find(|f| f.len == 0 || vaddr - f.start < u64::from(f.len))?;
        let bad = Row {
            cfa: Cfa::Unsupported,
            ra: Rule::Unsupported,
            bp: Rule::Unsupported,
            sp: Rule::Unsupported,
            signal: false,
        };
        // The CIE, then the FDE with its CIE pointer pointing at it: a two-entry section that
        // gimli parses as it would the whole one. `.eh_frame`'s pointers and addresses are
        // relative to their position, so the FDE is placed where its address says.
        let Some(mut fde_bytes) = self.entry(fde.which, u64::from(fde.offset)) else {
            return Some(bad);
        };
        let cie_offset = if fde.cie != u32::MAX {
            u64::from(fde.cie)
        } else {
            // `.eh_frame`: the CIE pointer counts back from its own position.
            let pointer = u32::from_le_bytes(fde_bytes.get(4..8)?.try_into().ok()?);
            match (u64::from(fde.offset) + 4).checked_sub(u64::from(pointer)) {
                Some(offset) => offset,
                None => return Some(bad),
            }
        };
        let Some(cie) = self.entry(fde.which, cie_offset) else {
            return Some(bad);
        };
        let fde = FdeEntry {
            cie: cie_offset as u32,
            ..fde
        };
        let cie_len = cie.len();
        let pointer = match fde.which {
            // From the pointer field (at buffer offset cie_len + 4) back to the CIE (at 0).
            Which::EhFrame => (cie_len + 4) as u32,
            Which::DebugFrame => 0,
        };
        fde_bytes
            .get_mut(4..8)?
            .copy_from_slice(&pointer.to_le_bytes());
        let mut buf = cie;
        buf.extend_from_slice(&fde_bytes);
        let eh_base = (self.eh_frame_address + u64::from(fde.offset)).wrapping_sub(cie_len as u64);
        let bases = self.bases(eh_base);
        let mut ctx = UnwindContext::<usize, FewRules>::new_in();
        // Expression offsets in `buf` back to offsets in the section.
        let to_section = |off: usize| -> usize {
            if off >= cie_len {
                fde.offset as usize + (off - cie_len)
            } else {
                fde.cie as usize + off
            }
        };
        let converted = match fde.which {
            Which::EhFrame => {
                let mut s = EhFrame::new(&buf, LittleEndian);
                s.set_address_size(8);
                s.fde_from_offset(&bases, cie_len.into(), EhFrame::cie_from_offset)
                    .and_then(|f| {
                        let signal = f.cie().is_signal_trampoline();
                        f.unwind_info_for_address(&s, &bases, &mut ctx, vaddr)
                            .map(|r| convert(r, Which::EhFrame, signal, to_section))
                    })
            }
            Which::DebugFrame => {
                let mut s = DebugFrame::new(&buf, LittleEndian);
                s.set_address_size(8);
                s.fde_from_offset(&bases, cie_len.into(), DebugFrame::cie_from_offset)
                    .and_then(|f| {
                        let signal = f.cie().is_signal_trampoline();
                        f.unwind_info_for_address(&s, &bases, &mut ctx, vaddr)
                            .map(|r| convert(r, Which::DebugFrame, signal, to_section))
                    })
            }
        };
        match converted {
            Ok(row) => Some(row),
            Err(gimli::Error::NoUnwindInfoForAddress) => None,
            Err(_) => Some(bad),
        }
    }

    fn expression(&self, e: ExprRef) -> Option<Vec<u8>> {
        self.bytes(e.which, e.offset as u64, e.length as u64)
    }

    /// Evaluates an expression with the frame's registers and stack; `initial` is pushed first
    /// (the CFA, for register rules).
    fn evaluate(
        &self,
        e: ExprRef,
        regs: &FrameRegs,
        stack: &StackCopy<'_>,
        initial: Option<u64>,
    ) -> Option<u64> {
        let bytes = self.expression(e)?;
        let expr = gimli::Expression(EndianSlice::new(&bytes, LittleEndian));
        let encoding = gimli::Encoding {
            address_size: 8,
            format: gimli::Format::Dwarf32,
            version: 4,
        };
        let mut eval = expr.evaluation(encoding);
        if let Some(v) = initial {
            eval.set_initial_value(v);
        }
        let mut result = eval.evaluate().ok()?;
        // Bounded: each step resumes once; a hostile expression cannot loop forever here
        // because gimli bounds its own iterations.
        for _ in 0..64 {
            match result {
                gimli::EvaluationResult::Complete => {
                    let pieces = eval.result();
                    return match pieces.first()?.location {
                        gimli::Location::Address { address } => Some(address),
                        gimli::Location::Value { value } => value.to_u64(u64::MAX).ok(),
                        _ => None,
                    };
                }
                gimli::EvaluationResult::RequiresRegister { register, .. } => {
                    let value = match register {
                        RSP => regs.sp,
                        RBP => regs.bp?,
                        RA => regs.ip,
                        _ => return None,
                    };
                    result = eval
                        .resume_with_register(gimli::Value::Generic(value))
                        .ok()?;
                }
                gimli::EvaluationResult::RequiresMemory { address, size, .. } => {
                    if size != 8 {
                        return None;
                    }
                    let value = stack.read_u64(address)?;
                    result = eval.resume_with_memory(gimli::Value::Generic(value)).ok()?;
                }
                _ => return None,
            }
        }
        None
    }
}

/// The bytes of an `SHF_COMPRESSED` section, inflated (at most [`MAX_SECTION_BYTES`]).
fn inflate_section<'data, R: object::ReadRef<'data>>(
    section: &object::elf::SectionHeader64<object::Endianness>,
    endian: object::Endianness,
    data: R,
) -> Option<Vec<u8>> {
    use object::read::elf::{CompressionHeader, SectionHeader};
    let (header, offset, size) = section.compression(endian, data).ok()??;
    let format = match header.ch_type(endian) {
        object::elf::ELFCOMPRESS_ZLIB => object::read::CompressionFormat::Zlib,
        object::elf::ELFCOMPRESS_ZSTD => object::read::CompressionFormat::Zstandard,
        _ => return None,
    };
    let uncompressed_size = header.ch_size(endian);
    if uncompressed_size > MAX_SECTION_BYTES || size > MAX_SECTION_BYTES {
        return None;
    }
    let compressed = data.read_bytes_at(offset, size).ok()?;
    let bytes = object::read::CompressedData {
        format,
        data: compressed,
        uncompressed_size,
    }
    .decompress()
    .ok()?;
    Some(bytes.into_owned())
}

/// How the leaf of a stack walked by frame pointers stands (see [`frame_pointer_leaf`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafFrame {
    /// The leaf's frame is set up (`CFA = rbp + 16`), or no CFI covers it: the frame-pointer
    /// walk's first return address is the leaf's own.
    Framed,
    /// The leaf has no frame of its own yet or any more (a prologue, an epilogue, a frameless
    /// function) and rbp is still its caller's: the walk skipped the caller, whose address
    /// (a return address) is `caller`.
    Frameless {
        /// The leaf's return address.
        caller: u64,
    },
    /// The leaf is the outermost function (its return address is undefined).
    Outermost,
}

/// Checks the leaf of a stack walked by frame pointers from `regs` with the leaf function's CFI
/// (`lookup` gives the table of the object holding an address and the address's virtual
/// address in it) over `stack`, the top of the stack. A frame-pointer walk goes wrong only
/// there: a sample taken where the leaf function has not set up its frame, or has left it,
/// finds its caller's frame pointer in rbp and skips the caller. An error is how the stack
/// must end: the leaf's return address is not in `stack`, or the leaf changed rbp without
/// saving it where the walk looks (the walk's frames are then not its callers').
pub fn frame_pointer_leaf(
    regs: Registers,
    stack: &StackCopy<'_>,
    lookup: impl FnOnce(u64) -> Option<(Arc<UnwindTable>, u64)>,
) -> Result<LeafFrame, StackEnd> {
    let Some((table, vaddr)) = lookup(regs.ip) else {
        return Ok(LeafFrame::Framed);
    };
    let Some(row) = table.row(vaddr) else {
        return Ok(LeafFrame::Framed);
    };
    let r = FrameRegs {
        ip: regs.ip,
        sp: regs.sp,
        bp: Some(regs.bp),
    };
    let next = match step_cfi(&row, &table, &r, stack) {
        Ok(next) => next,
        Err(StackEnd::Complete) => return Ok(LeafFrame::Outermost),
        Err(end) => return Err(end),
    };
    if Some(next.sp) == regs.bp.checked_add(16) {
        return Ok(LeafFrame::Framed);
    }
    // The walk went on from rbp as the caller's frame pointer: right only if the leaf left
    // rbp as its caller had it.
    match next.bp {
        Some(bp) if bp != regs.bp => Err(StackEnd::BadUnwindInfo),
        _ => Ok(LeafFrame::Frameless { caller: next.ip }),
    }
}

/// Checks the return addresses of a frame-pointer walk (`return_addresses`, innermost first,
/// the leaf's own address not among them) against their functions' CFI: the step from a frame
/// to its caller read the frame's rbp, which is a frame pointer only if the function had set up
/// its frame at the call (`CFA = rbp + 16`), or is the outermost (its return address
/// undefined). Returns the index of the first return address whose function did not: the
/// addresses up to it are right, those after it are not to be trusted. Functions without CFI,
/// and Go's (whose CFI defines frames from rsp, and which keep frame pointers by construction),
/// are trusted.
pub fn check_frame_pointer_walk(
    return_addresses: &[u64],
    mut lookup: impl FnMut(u64) -> Option<(Arc<UnwindTable>, u64)>,
) -> Option<usize> {
    return_addresses.iter().position(|&ra| {
        let Some((table, vaddr)) = lookup(ra.wrapping_sub(1)) else {
            return false;
        };
        if table.census.go {
            return false;
        }
        match table.row(vaddr) {
            None => false,
            Some(row) => row.cfa != Cfa::Bp(16) && row.ra != Rule::Undefined,
        }
    })
}

/// The (initial address, FDE address) table of `.eh_frame_hdr` (`bytes`, at `address`), when
/// it has one.
fn eh_frame_hdr_index(bytes: &[u8], address: u64) -> Option<Vec<(u64, u64)>> {
    let bases = BaseAddresses::default().set_eh_frame_hdr(address);
    let hdr = gimli::EhFrameHdr::new(bytes, LittleEndian)
        .parse(&bases, 8)
        .ok()?;
    let table = hdr.table()?;
    let mut iter = table.iter(&bases);
    let mut out = Vec::new();
    while let Ok(Some((start, fde))) = iter.next() {
        if let (gimli::Pointer::Direct(start), gimli::Pointer::Direct(fde)) = (start, fde) {
            out.push((start, fde));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The FDEs of both sections, sorted by address.
fn index(eh: &[u8], debug: &[u8], bases: &BaseAddresses) -> Vec<FdeEntry> {
    fn collect<'a, S: UnwindSection<EndianSlice<'a, LittleEndian>>>(
        section: &S,
        bases: &BaseAddresses,
        which: Which,
        out: &mut Vec<FdeEntry>,
    ) where
        S::Offset: gimli::UnwindOffset<usize>,
    {
        let mut entries = section.entries(bases);
        // A malformed entry ends the scan: what was indexed before it stays usable.
        while let Ok(Some(entry)) = entries.next() {
            let gimli::CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let Ok(fde) = partial.parse(S::cie_from_offset) else {
                continue;
            };
            let (Ok(len), Ok(offset), Ok(cie)) = (
                u32::try_from(fde.len()),
                u32::try_from(fde.offset()),
                u32::try_from(fde.cie().offset()),
            ) else {
                continue;
            };
            if len > 0 {
                out.push(FdeEntry {
                    start: fde.initial_address(),
                    len,
                    offset,
                    cie,
                    which,
                });
            }
        }
    }
    let mut fdes = Vec::new();
    let mut eh_frame = EhFrame::new(eh, LittleEndian);
    eh_frame.set_address_size(8);
    collect(&eh_frame, bases, Which::EhFrame, &mut fdes);
    let mut debug_frame = DebugFrame::new(debug, LittleEndian);
    debug_frame.set_address_size(8);
    collect(&debug_frame, bases, Which::DebugFrame, &mut fdes);
    // `.eh_frame` wins where both cover an address: a lookup takes the last entry starting at
    // or before the address, so it sorts after `.debug_frame`'s.
    fdes.sort_by_key(|f| (f.start, f.which == Which::EhFrame));
    fdes.shrink_to_fit();
    fdes
}

fn convert<S: gimli::UnwindContextStorage<usize>>(
    row: &gimli::UnwindTableRow<usize, S>,
    which: Which,
    signal: bool,
    to_section: impl Fn(usize) -> usize,
) -> Row {
    let expr = |e: &gimli::UnwindExpression<usize>| ExprRef {
        which,
        offset: to_section(e.offset),
        length: e.length,
    };
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == RSP => Cfa::Sp(*offset),
        CfaRule::RegisterAndOffset { register, offset } if *register == RBP => Cfa::Bp(*offset),
        CfaRule::RegisterAndOffset { .. } => Cfa::Unsupported,
        CfaRule::Expression(e) => Cfa::Expr(expr(e)),
    };
    let rule = |r: Option<RegisterRule<usize>>, default: Rule| match r {
        None => default,
        Some(RegisterRule::Undefined) => Rule::Undefined,
        Some(RegisterRule::SameValue) => Rule::Same,
        Some(RegisterRule::Offset(n)) => Rule::At(n),
        Some(RegisterRule::ValOffset(n)) => Rule::ValAt(n),
        Some(RegisterRule::Expression(e)) => Rule::Expr(expr(&e)),
        Some(RegisterRule::ValExpression(e)) => Rule::ValExpr(expr(&e)),
        Some(_) => Rule::Unsupported,
    };
    Row {
        cfa,
        // No rule for the return address: it is undefined (the end of the stack).
        ra: rule(row.register(RA), Rule::Undefined),
        bp: rule(row.register(RBP), Rule::Same),
        // The caller's stack pointer is the CFA unless a rule says otherwise.
        sp: rule(row.register(RSP), Rule::ValAt(0)),
        signal,
    }
}

/// The registers known in a frame (rbp may be lost).
#[derive(Debug, Clone, Copy)]
struct FrameRegs {
    ip: u64,
    sp: u64,
    bp: Option<u64>,
}

/// Walks the stack of `regs` over `stack`, pushing the instruction pointer of each frame,
/// leaf first (return addresses as they are: the caller subtracts one to symbolize them), at
/// most `max_frames`. `lookup(address)` gives the unwind table of the object holding
/// `address` and the address's virtual address in it; `None` for an address outside every
/// known object, whose frame is walked with frame pointers.
pub fn unwind(
    regs: Registers,
    stack: &StackCopy<'_>,
    max_frames: usize,
    frames: &mut Vec<u64>,
    mut lookup: impl FnMut(u64) -> Option<(Arc<UnwindTable>, u64)>,
) -> StackEnd {
    let mut r = FrameRegs {
        ip: regs.ip,
        sp: regs.sp,
        bp: Some(regs.bp),
    };
    if r.ip == 0 {
        return StackEnd::Complete;
    }
    let start = frames.len();
    frames.push(r.ip);
    let mut exact_ip = true;
    // Whether the current frame was reached through a frame pointer.
    let mut after_fp = false;
    loop {
        // For a return address, the call instruction's row applies (the return address may
        // be the first byte of the next function after a call that does not return).
        let at = if exact_ip { r.ip } else { r.ip - 1 };
        let found = lookup(at).and_then(|(table, vaddr)| Some((table.row(vaddr)?, table)));
        let next = match found {
            Some((row, table)) => match step_cfi(&row, &table, &r, stack) {
                Ok(next) => {
                    exact_ip = row.signal;
                    after_fp = false;
                    next
                }
                Err(end) => return end,
            },
            None => {
                exact_ip = false;
                // A null frame pointer ends a chain of frame pointers; in a frame without CFI
                // whose caller was found otherwise, rbp may be anything, zero included.
                if r.bp == Some(0) && !after_fp {
                    return StackEnd::NoUnwindInfo;
                }
                after_fp = true;
                match step_fp(&r, stack) {
                    Ok(next) => next,
                    Err(end) => return end,
                }
            }
        };
        if next.ip == 0 {
            return StackEnd::Complete;
        }
        // The stack grows down: a caller's frame is above its callee's. Anything else is
        // corrupt information, and would loop.
        if next.sp <= r.sp {
            return StackEnd::BadUnwindInfo;
        }
        if frames.len() - start >= max_frames {
            return StackEnd::DepthLimit;
        }
        frames.push(next.ip);
        r = next;
    }
}

fn step_cfi(
    row: &Row,
    table: &UnwindTable,
    r: &FrameRegs,
    stack: &StackCopy<'_>,
) -> Result<FrameRegs, StackEnd> {
    let cfa = match row.cfa {
        Cfa::Sp(n) => r.sp.wrapping_add_signed(n),
        Cfa::Bp(n) => r.bp.ok_or(StackEnd::BadUnwindInfo)?.wrapping_add_signed(n),
        Cfa::Expr(e) => table
            .evaluate(e, r, stack, None)
            .ok_or(StackEnd::Unreadable)?,
        Cfa::Unsupported => return Err(StackEnd::BadUnwindInfo),
    };
    // Some(Some(v)): recovered; Some(None): lost; Err: the walk cannot go on.
    let recover = |rule: Rule, current: Option<u64>| -> Result<Option<u64>, StackEnd> {
        Ok(match rule {
            Rule::Same => current,
            Rule::Undefined => None,
            Rule::At(n) => Some(
                stack
                    .read_u64(cfa.wrapping_add_signed(n))
                    .ok_or(StackEnd::Unreadable)?,
            ),
            Rule::ValAt(n) => Some(cfa.wrapping_add_signed(n)),
            Rule::Expr(e) => {
                let addr = table
                    .evaluate(e, r, stack, Some(cfa))
                    .ok_or(StackEnd::Unreadable)?;
                Some(stack.read_u64(addr).ok_or(StackEnd::Unreadable)?)
            }
            Rule::ValExpr(e) => Some(
                table
                    .evaluate(e, r, stack, Some(cfa))
                    .ok_or(StackEnd::Unreadable)?,
            ),
            Rule::Unsupported => return Err(StackEnd::BadUnwindInfo),
        })
    };
    let ip = match row.ra {
        Rule::Undefined => return Err(StackEnd::Complete),
        rule => recover(rule, Some(r.ip))?.ok_or(StackEnd::Complete)?,
    };
    // A lost frame pointer only matters if a later frame needs it.
    let bp = recover(row.bp, r.bp).unwrap_or(None);
    let sp = recover(row.sp, Some(r.sp))?.ok_or(StackEnd::BadUnwindInfo)?;
    Ok(FrameRegs { ip, sp, bp })
}

/// One frame-pointer step: the caller's rbp at [rbp], its return address at [rbp + 8].
fn step_fp(r: &FrameRegs, stack: &StackCopy<'_>) -> Result<FrameRegs, StackEnd> {
    let bp = r.bp.ok_or(StackEnd::NoUnwindInfo)?;
    if bp == 0 {
        // The ABI's outermost frame has a null frame pointer.
        return Err(StackEnd::Complete);
    }
    if bp < r.sp || bp % 8 != 0 {
        return Err(StackEnd::NoUnwindInfo);
    }
    let ip = stack.read_u64(bp + 8).ok_or(StackEnd::Unreadable)?;
    let saved_bp = stack.read_u64(bp).ok_or(StackEnd::Unreadable)?;
    Ok(FrameRegs {
        ip,
        sp: bp + 16,
        bp: Some(saved_bp),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's unwind table and the (start, offset) of the mapping of `addr`.
    fn own_table(addr: u64) -> (Arc<UnwindTable>, u64, u64) {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let table = UnwindTable::read(&File::open(&exe).unwrap(), &exe).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (s, e) = f[0].split_once('-').unwrap();
            let (s, e) = (
                u64::from_str_radix(s, 16).unwrap(),
                u64::from_str_radix(e, 16).unwrap(),
            );
            if (s..e).contains(&addr) && f.len() >= 6 && Path::new(f[5]) == exe {
                return (Arc::new(table), s, u64::from_str_radix(f[2], 16).unwrap());
            }
        }
        panic!("no mapping");
    }

    #[inline(never)]
    fn capture(out: &mut (Registers, Vec<u8>)) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers and the address of a label; writes nothing else.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
            );
        }
        // Copy 32 KiB of our own stack, as the BPF program would.
        let mut bytes = vec![0u8; 32 << 10];
        // SAFETY: the stack above rsp is mapped (the main thread's stack or a test thread's,
        // both far larger than 32 KiB from here).
        unsafe {
            std::ptr::copy_nonoverlapping(sp as *const u8, bytes.as_mut_ptr(), bytes.len());
        }
        *out = (Registers { ip, sp, bp }, bytes);
    }

    #[inline(never)]
    fn level(n: u32, out: &mut (Registers, Vec<u8>)) -> u32 {
        if n == 0 {
            capture(out);
            return 0;
        }
        std::hint::black_box(level(n - 1, out)) + 1
    }

    #[test]
    fn walks_its_own_stack_with_eh_frame() {
        let mut out = (
            Registers {
                ip: 0,
                sp: 0,
                bp: 0,
            },
            Vec::new(),
        );
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                // Room above the captured frames, so the 32 KiB copy stays on this stack.
                let pad = std::hint::black_box([1u8; 64 << 10]);
                level(5, &mut out);
                std::hint::black_box(&pad);
                let (table, start, offset) = own_table(out.0.ip);
                let stack = StackCopy {
                    sp: out.0.sp,
                    bytes: &out.1,
                };
                let mut frames = Vec::new();
                let lookup = |addr: u64| {
                    let vaddr = table.vaddr_of_file_offset(addr.checked_sub(start)? + offset)?;
                    Some((table.clone(), vaddr))
                };
                let end = unwind(out.0, &stack, 127, &mut frames, lookup);
                // capture, then six frames of `level`.
                let level_addr = level as *const () as u64;
                let in_level = frames
                    .iter()
                    .filter(|&&f| f > level_addr && f < level_addr + 512)
                    .count();
                assert!(in_level >= 5, "{frames:x?} ended {end:?}");
                // Then the closure, whose 64 KiB frame reaches past the 32 KiB copied.
                assert!(frames.len() >= 8, "{frames:x?} ended {end:?}");
                assert_eq!(end, StackEnd::Unreadable);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn plt_stubs_through_their_cfa_expression() {
        use object::{Object, ObjectSection};
        let dir = tempfile::tempdir().unwrap();
        let Some(bin) = gcc(
            dir.path(),
            "plt",
            "#include <stdio.h>\nint main(int c, char **v) { puts(v[0]); return c; }\n",
            &["-O2", "-fplt", "-Wl,-z,lazy"],
        ) else {
            return;
        };
        let obj = std::fs::read(&bin).unwrap();
        let elf = object::File::parse(&*obj).unwrap();
        let plt = elf.section_by_name(".plt").expect("a lazy-binding .plt");
        // The second entry (the first is the resolver's): `jmp *got; push n; jmp .plt`.
        let entry = plt.address() + 16;
        let table = Arc::new(UnwindTable::read(&File::open(&bin).unwrap(), &bin).unwrap());
        // Addresses are the binary's own (no mapping): a return address outside the .plt has
        // no table, and with a null rbp the walk cannot go on (it does not claim to be complete).
        let in_plt = |addr: u64| {
            (addr >= plt.address() && addr < plt.address() + plt.size())
                .then(|| (table.clone(), addr))
        };
        let sp = 0x7000u64;
        // At the entry's first instruction, the return address is at rsp (CFA = rsp + 8).
        let mut bytes = vec![0u8; 32];
        bytes[0..8].copy_from_slice(&0x5555u64.to_le_bytes());
        let stack = StackCopy { sp, bytes: &bytes };
        let mut frames = Vec::new();
        let regs = Registers {
            ip: entry,
            sp,
            bp: 0,
        };
        assert_eq!(
            unwind(regs, &stack, 127, &mut frames, in_plt),
            StackEnd::NoUnwindInfo
        );
        assert_eq!(frames, [entry, 0x5555]);
        // After its `push` (offset 11), the return address is at rsp + 8 (CFA = rsp + 16).
        let mut bytes = vec![0u8; 32];
        bytes[8..16].copy_from_slice(&0x6666u64.to_le_bytes());
        let stack = StackCopy { sp, bytes: &bytes };
        frames.clear();
        let regs = Registers {
            ip: entry + 11,
            sp,
            bp: 0,
        };
        unwind(regs, &stack, 127, &mut frames, in_plt);
        assert_eq!(frames, [entry + 11, 0x6666]);
    }

    /// Builds C `source` with gcc and `flags` into `dir`; `None` (said on stderr) without gcc.
    fn gcc(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Option<std::path::PathBuf> {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, source).unwrap();
        let bin = dir.join(name);
        let built = std::process::Command::new("gcc")
            .args(flags)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
            .is_ok_and(|o| o.status.success());
        if !built {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("SKIP: gcc missing (apt-get install gcc)");
            }
            return None;
        }
        Some(bin)
    }

    /// The address and bytes of function `name` in `bin`.
    fn function(bin: &Path, name: &str) -> (u64, Vec<u8>) {
        use object::{Object, ObjectSection, ObjectSymbol};
        let data = std::fs::read(bin).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let sym = elf.symbols().find(|s| s.name() == Ok(name)).unwrap();
        let text = elf.section_by_name(".text").unwrap();
        let at = (sym.address() - text.address()) as usize;
        let bytes = text.data().unwrap()[at..at + sym.size() as usize].to_vec();
        (sym.address(), bytes)
    }

    const CALLER: &str = "__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }\n\
        __attribute__((noinline)) long work(long x) {\n\
          long s = 0; for (long i = 0; i < x; i++) s += leaf(i) ^ (s >> 3); return s; }\n\
        int main(int c, char **v) { (void)v; return (int)work(c * 1000); }\n";

    #[test]
    fn a_sample_in_a_prologue_or_an_epilogue_finds_its_caller() {
        let dir = tempfile::tempdir().unwrap();
        let Some(bin) = gcc(
            dir.path(),
            "fp",
            CALLER,
            &["-O2", "-fno-omit-frame-pointer"],
        ) else {
            return;
        };
        let table = Arc::new(UnwindTable::read(&File::open(&bin).unwrap(), &bin).unwrap());
        let (work, code) = function(&bin, "work");
        // Its `ret` after `pop rbp` (5d c3) or `leave` (c9 c3): the epilogue.
        let ret = work
            + code
                .windows(2)
                .position(|w| (w[0] == 0x5d || w[0] == 0xc9) && w[1] == 0xc3)
                .expect("an epilogue") as u64
            + 1;
        // An address of its body, where the frame is set up.
        let body = (work..work + code.len() as u64)
            .find(|&a| table.row(a).is_some_and(|r| r.cfa == Cfa::Bp(16)))
            .expect("a framed body");
        let lookup = |addr: u64| Some((table.clone(), addr));
        // Stack: the return address at sp (prologue's first instruction, epilogue's ret);
        // rbp is still (or again) the caller's frame pointer.
        let sp = 0x7000u64;
        let mut bytes = vec![0u8; 64];
        bytes[0..8].copy_from_slice(&0x5555u64.to_le_bytes());
        let stack = StackCopy { sp, bytes: &bytes };
        for ip in [work, ret] {
            let regs = Registers { ip, sp, bp: 0x7100 };
            let mut frames = Vec::new();
            unwind(regs, &stack, 127, &mut frames, lookup);
            assert_eq!(frames[..2], [ip, 0x5555], "at {ip:#x}");
            assert_eq!(
                frame_pointer_leaf(regs, &stack, lookup),
                Ok(LeafFrame::Frameless { caller: 0x5555 }),
                "at {ip:#x}"
            );
        }
        // In the body: rbp is the leaf's own frame pointer, [rbp + 8] its return address.
        let mut bytes = vec![0u8; 64];
        bytes[0x18..0x20].copy_from_slice(&0x6666u64.to_le_bytes());
        let stack = StackCopy { sp, bytes: &bytes };
        let regs = Registers {
            ip: body,
            sp,
            bp: sp + 0x10,
        };
        assert_eq!(
            frame_pointer_leaf(regs, &stack, lookup),
            Ok(LeafFrame::Framed)
        );
        let mut frames = Vec::new();
        unwind(regs, &stack, 127, &mut frames, lookup);
        assert_eq!(frames[..2], [body, 0x6666]);
        // A frame-pointer walk through `work` is trusted; through the same code built
        // without frame pointers it is not.
        assert_eq!(check_frame_pointer_walk(&[body + 1], lookup), None);
        let Some(nofp) = gcc(dir.path(), "nofp", CALLER, &["-O2", "-fomit-frame-pointer"]) else {
            return;
        };
        let table = Arc::new(UnwindTable::read(&File::open(&nofp).unwrap(), &nofp).unwrap());
        let (work, code) = function(&nofp, "work");
        let mid = work + code.len() as u64 / 2;
        let lookup = |addr: u64| Some((table.clone(), addr));
        assert_eq!(
            check_frame_pointer_walk(&[0x1234, mid + 1], lookup),
            Some(1)
        );
    }

    #[test]
    fn the_census_tells_code_with_frame_pointers_from_code_without() {
        let dir = tempfile::tempdir().unwrap();
        // Forty functions that call one another, as an object of real size has.
        let mut source = String::from(
            "volatile long sink;\n__attribute__((noinline)) long f0(long x) { return x * 7 + sink; }\n",
        );
        for i in 1..40 {
            source.push_str(&format!(
                "__attribute__((noinline)) long f{i}(long x) {{ long s = 0; for (long j = 0; j < x; j++) s += f{}(j) ^ (s >> {}); return s; }}\n",
                i - 1,
                i % 5 + 1
            ));
        }
        source.push_str("int main(int c, char **v) { (void)v; return (int)f39(c); }\n");
        let census = |name: &str, flags: &[&str]| {
            let bin = gcc(dir.path(), name, &source, flags)?;
            let table = UnwindTable::read(&File::open(&bin).unwrap(), &bin).unwrap();
            Some(table.frame_pointer_census())
        };
        let Some(fp) = census(
            "fp",
            &[
                "-O2",
                "-fno-omit-frame-pointer",
                "-mno-omit-leaf-frame-pointer",
            ],
        ) else {
            return;
        };
        assert!(fp.keeps_frame_pointers(), "{fp:?}");
        let nofp = census("nofp", &["-O2", "-fomit-frame-pointer"]).unwrap();
        assert!(!nofp.keeps_frame_pointers(), "{nofp:?}");
        assert!(!nofp.go && !fp.go);
    }

    #[test]
    fn frame_pointers_where_no_table_covers() {
        // Two frames by hand: rbp -> [saved rbp = 0, return address].
        let sp = 0x1000u64;
        let mut bytes = vec![0u8; 64];
        bytes[16..24].copy_from_slice(&0u64.to_le_bytes()); // saved rbp at 0x1010
        bytes[24..32].copy_from_slice(&0x4242u64.to_le_bytes()); // return address at 0x1018
        let stack = StackCopy { sp, bytes: &bytes };
        let regs = Registers {
            ip: 0x1111,
            sp,
            bp: 0x1010,
        };
        let mut frames = Vec::new();
        let end = unwind(regs, &stack, 127, &mut frames, |_| None);
        assert_eq!(frames, [0x1111, 0x4242]);
        assert_eq!(end, StackEnd::Complete);
        // A leaf without CFI and a null rbp is not the start of the stack: unknown.
        frames.clear();
        let leaf = Registers { bp: 0, ..regs };
        assert_eq!(
            unwind(leaf, &stack, 127, &mut frames, |_| None),
            StackEnd::NoUnwindInfo
        );
        // Outside the copy.
        let regs = Registers { bp: 0x2000, ..regs };
        frames.clear();
        assert_eq!(
            unwind(regs, &stack, 127, &mut frames, |_| None),
            StackEnd::Unreadable
        );
        // The depth limit.
        frames.clear();
        let regs = Registers { bp: 0x1010, ..regs };
        assert_eq!(
            unwind(regs, &stack, 1, &mut frames, |_| None),
            StackEnd::DepthLimit
        );
        assert_eq!(frames, [0x1111]);
    }
}
