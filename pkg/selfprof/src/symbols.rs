//! Names for this process's own addresses.
//!
//! Each object (the executable, libc, …) is opened with its DWARF mapped, only when an address
//! in it has no name yet, and closed when the profile is named: reading DWARF costs memory only
//! while it happens. What was found is kept per (object, file offset) with its strings
//! interned, so a server whose profiles repeat the same code reads no DWARF at all.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use parca_pprof::{ProfileBuilder, proto};
use parca_symbolize::ElfObject;

/// Addresses whose names are kept; past this the cache starts over (a few megabytes at most).
const MAX_CACHED_ADDRESSES: usize = 1 << 16;

/// Fills in the lines (functions, files, line numbers, inlined frames innermost first) of the
/// locations of `profile` that have none, from the objects their mappings name, as files of
/// this process. Addresses are runtime addresses in mappings of their true range (pprof's
/// rule), or, in a mapping of all memory (start 0, limit `u64::MAX`, as jemalloc_pprof writes
/// them), the object's own virtual addresses. Locations that cannot be named keep their
/// address.
pub fn symbolize(mut profile: proto::Profile) -> proto::Profile {
    let mapping_index: HashMap<u64, usize> = profile
        .mapping
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id, i))
        .collect();
    let string = |i: i64| {
        profile
            .string_table
            .get(i as usize)
            .map_or("", String::as_str)
    };
    let mut wanted = Vec::new();
    for (index, location) in profile.location.iter().enumerate() {
        if !location.line.is_empty() {
            continue;
        }
        let Some(&m) = mapping_index.get(&location.mapping_id) else {
            continue;
        };
        let mapping = &profile.mapping[m];
        let at = if mapping.memory_start == 0 && mapping.memory_limit == u64::MAX {
            At::Vaddr(location.address)
        } else {
            match location
                .address
                .checked_sub(mapping.memory_start)
                .and_then(|a| a.checked_add(mapping.file_offset))
            {
                Some(offset) => At::FileOffset(offset),
                None => continue,
            }
        };
        let object = ObjectRef {
            path: string(mapping.filename).to_owned(),
            build_id: string(mapping.build_id).to_owned(),
        };
        if object.path.starts_with('/') {
            wanted.push((index, m, object, at));
        }
    }
    if wanted.is_empty() {
        return profile;
    }
    let resolved = {
        let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let cache = cache.get_or_insert_with(Cache::default);
        cache.resolve(wanted.iter().map(|(_, _, object, at)| (object, *at)))
    };
    let mut named = HashSet::new();
    let mut b = ProfileBuilder::from_profile(profile);
    for ((index, m, _, _), frames) in wanted.iter().zip(resolved) {
        let lines = frames
            .iter()
            .map(|f| proto::Line {
                function_id: b.function(&f.function, &f.system_name, &f.file, 0),
                line: i64::from(f.line),
                column: 0,
            })
            .collect::<Vec<_>>();
        if !lines.is_empty() {
            named.insert(*m);
        }
        b.location_mut(*index).line = lines;
    }
    profile = b.finish();
    for m in named {
        let mapping = &mut profile.mapping[m];
        mapping.has_functions = true;
        mapping.has_filenames = true;
        mapping.has_line_numbers = true;
        mapping.has_inline_frames = true;
    }
    profile
}

/// Where in its object an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum At {
    FileOffset(u64),
    Vaddr(u64),
}

/// An object as a profile's mapping names it.
struct ObjectRef {
    path: String,
    /// Hex; empty when unknown.
    build_id: String,
}

/// One frame of a named address.
struct OwnFrame {
    function: Arc<str>,
    system_name: Arc<str>,
    file: Arc<str>,
    line: u32,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

#[derive(Default)]
struct Cache {
    frames: HashMap<(Arc<str>, At), Arc<[OwnFrame]>>,
    strings: HashSet<Arc<str>>,
    /// Objects that could not be opened, said once each.
    failed: HashSet<String>,
}

impl Cache {
    /// The frames of each (object, place), in order; objects are opened only for
    /// addresses not seen before, and closed before this returns.
    fn resolve<'a>(
        &mut self,
        wanted: impl Iterator<Item = (&'a ObjectRef, At)>,
    ) -> Vec<Arc<[OwnFrame]>> {
        let mut objects: HashMap<String, Option<ElfObject>> = HashMap::new();
        let mut out = Vec::new();
        for (object, at) in wanted {
            let path = self.intern(&object.path);
            if let Some(frames) = self.frames.get(&(Arc::clone(&path), at)) {
                out.push(Arc::clone(frames));
                continue;
            }
            let elf = objects
                .entry(object.path.clone())
                .or_insert_with(|| self.open(object));
            let frames: Arc<[OwnFrame]> = match elf {
                Some(elf) => match at {
                    At::FileOffset(offset) => elf.vaddr_of_file_offset(offset),
                    At::Vaddr(vaddr) => Some(vaddr),
                }
                .map(|vaddr| elf.symbolize(vaddr))
                .unwrap_or_default()
                .into_iter()
                .map(|f| OwnFrame {
                    function: self.intern(&f.function),
                    system_name: self.intern(&f.system_name),
                    file: self.intern(f.file.as_deref().unwrap_or("")),
                    line: f.line,
                })
                .collect(),
                None => Arc::from([]),
            };
            if self.frames.len() >= MAX_CACHED_ADDRESSES {
                self.frames.clear();
                self.strings.clear();
            }
            self.frames.insert((path, at), Arc::clone(&frames));
            out.push(frames);
        }
        if !objects.is_empty() {
            drop(objects);
            // The DWARF read is gone: give its pages back now rather than on the allocator's
            // decay timer, so an idle server stays small.
            crate::jemalloc::return_free_memory();
        }
        out
    }

    /// Opens the object a mapping names; when the file at that path is no longer the one
    /// mapped (a rebuilt or upgraded executable), the running executable itself.
    fn open(&mut self, object: &ObjectRef) -> Option<ElfObject> {
        let path = object
            .path
            .strip_suffix(" (deleted)")
            .unwrap_or(&object.path);
        let matches = |elf: &ElfObject| {
            object.build_id.is_empty()
                || elf
                    .build_id()
                    .is_some_and(|id| id.to_string() == object.build_id)
        };
        let opened = ElfObject::open_mapped(Path::new(path));
        match opened {
            Ok(elf) if matches(&elf) => return Some(elf),
            Ok(_) => {
                if let Ok(elf) = ElfObject::open_mapped(Path::new("/proc/self/exe"))
                    && matches(&elf)
                {
                    return Some(elf);
                }
                if self.failed.insert(object.path.clone()) {
                    tracing::warn!(
                        path,
                        "own profiles: the file is no longer the object this process mapped (its build id differs); its frames stay unnamed"
                    );
                }
            }
            Err(error) => {
                if self.failed.insert(object.path.clone()) {
                    tracing::warn!(%error, "own profiles: cannot read an object of this process; its frames stay unnamed");
                }
            }
        }
        None
    }

    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(s) = self.strings.get(s) {
            return Arc::clone(s);
        }
        let s: Arc<str> = Arc::from(s);
        self.strings.insert(Arc::clone(&s));
        s
    }
}

/// This process's executable file mappings, from `/proc/self/maps`.
pub(crate) struct Mappings {
    entries: Vec<MapEntry>,
    build_ids: HashMap<String, String>,
}

struct MapEntry {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

impl Mappings {
    /// Reads `/proc/self/maps` (empty if it cannot be read): executable mappings of files.
    pub(crate) fn of_this_process() -> Mappings {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let entries = maps.lines().filter_map(parse_maps_line).collect();
        Mappings {
            entries,
            build_ids: HashMap::new(),
        }
    }

    /// The index of the mapping holding `address`.
    pub(crate) fn find(&self, address: u64) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.start <= address && address < e.end)
    }

    /// Mapping `index` as pprof has it (the builder's strings; id left for the builder).
    pub(crate) fn pprof_mapping(&mut self, index: usize, b: &mut ProfileBuilder) -> proto::Mapping {
        let entry = &self.entries[index];
        let build_id = self.build_ids.entry(entry.path.clone()).or_insert_with(|| {
            let path = Path::new(&entry.path);
            std::fs::File::open(path)
                .ok()
                .and_then(|f| parca_symbolize::read_build_id(&f, path).ok().flatten())
                .map(|id| id.to_string())
                .unwrap_or_default()
        });
        proto::Mapping {
            memory_start: entry.start,
            memory_limit: entry.end,
            file_offset: entry.offset,
            filename: b.string(&entry.path),
            build_id: b.string(build_id),
            ..Default::default()
        }
    }
}

/// One line of `/proc/PID/maps` if it maps a file executable:
/// `start-end perms offset dev inode path`.
fn parse_maps_line(line: &str) -> Option<MapEntry> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let path = fields.nth(2)?.trim_start();
    if !perms.contains('x') || !path.starts_with('/') {
        return None;
    }
    Some(MapEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_to_find() -> usize {
        std::hint::black_box(7)
    }

    /// A profile as jemalloc_pprof writes it: mappings from 0 to the end of memory, addresses
    /// as the object's virtual addresses; another with the true ranges and runtime addresses.
    #[test]
    fn file_offsets_and_runtime_addresses_both_resolve() {
        let address = a_function_to_find as *const () as u64 + 1;
        let maps = Mappings::of_this_process();
        let entry = &maps.entries[maps.find(address).unwrap()];
        let elf = ElfObject::open_mapped(Path::new(&entry.path)).unwrap();
        let vaddr = elf
            .vaddr_of_file_offset(address - entry.start + entry.offset)
            .unwrap();
        for (start, limit, file_offset, at) in [
            (0, u64::MAX, 0, vaddr),
            (entry.start, entry.end, entry.offset, address),
        ] {
            let mut b = ProfileBuilder::new();
            let mapping = proto::Mapping {
                memory_start: start,
                memory_limit: limit,
                file_offset,
                filename: b.string(&entry.path),
                ..Default::default()
            };
            let mapping = b.add_mapping(mapping);
            let location = b.location(mapping, at, &[]);
            b.sample(vec![location], vec![1], Vec::new());
            let profile = symbolize(b.finish());
            let strings = &profile.string_table;
            let line = &profile.location[0].line[0];
            let function = &profile.function[line.function_id as usize - 1];
            assert_eq!(
                strings[function.name as usize],
                "parca_selfprof::symbols::tests::a_function_to_find"
            );
            assert!(strings[function.system_name as usize].starts_with("_"));
            assert!(strings[function.filename as usize].ends_with("symbols.rs"));
        }
    }

    #[test]
    fn maps_lines_of_executable_files_are_kept() {
        let e = parse_maps_line(
            "55d0c0a00000-55d0c1200000 r-xp 00a00000 fe:01 1234   /usr/bin/parca (deleted)",
        )
        .unwrap();
        assert_eq!(
            (e.start, e.end, e.offset),
            (0x55d0c0a00000, 0x55d0c1200000, 0xa00000)
        );
        assert_eq!(e.path, "/usr/bin/parca (deleted)");
        assert!(parse_maps_line("7ffd1000-7ffd3000 r-xp 00000000 00:00 0  [vdso]").is_none());
        assert!(parse_maps_line("7f00-7f10 rw-p 00000000 fe:01 99 /usr/lib/libc.so.6").is_none());
    }
}
