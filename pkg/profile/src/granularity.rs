//! Granularity: what one frame of a view stands for (a function, a source line or an address),
//! as pprof's `-functions`, `-lines` and `-addresses` choose it.
//!
//! The views (top table, flame graph, call graph, sandwich) merge frames by function. A profile
//! at a finer granularity is rewritten so that each frame of that granularity is a function of
//! its own, named as pprof names the node (`name file:line`, `0000000000401234 name file:line`):
//! every view then splits by line or address without knowing granularity, and their numbers are
//! pprof's at that granularity. [`aggregate`] is the other half, for exports: pprof's own
//! `Profile.Aggregate`, which keeps names and drops what is finer than asked.

use std::fmt::Write;

use rustc_hash::FxHashMap;

use crate::profile::Profile;
use crate::tables::{Function, FunctionId, Line, LocationId, StringId, Tables};

/// What one frame of a view stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Granularity {
    /// A function, at any line (pprof's default, `-functions`).
    #[default]
    Function,
    /// A function at one source line (`-lines`): `name file:line`.
    Line,
    /// One location: its address (file-relative) and lines (`-addresses`).
    Address,
}

impl Granularity {
    /// Parses `function`, `line` or `address`, also in pprof's plural spelling (`lines`).
    pub fn parse(text: &str) -> Option<Granularity> {
        match text {
            "function" | "functions" => Some(Granularity::Function),
            "line" | "lines" => Some(Granularity::Line),
            "address" | "addresses" => Some(Granularity::Address),
            _ => None,
        }
    }

    /// The name in the HTTP API: `function`, `line` or `address`.
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Function => "function",
            Granularity::Line => "line",
            Granularity::Address => "address",
        }
    }
}

/// `profile` with every frame of granularity `granularity` a function of its own, named as pprof
/// names its node at that granularity: `name file:line` for a line (`name file` without a
/// line number), `%016x name file:line` for an address (the file-relative address; an
/// unsymbolized frame is `%016x [binary]`). At [`Granularity::Function`] the profile is returned
/// as it is (tables shared). Inlined frames keep their own lines.
pub fn with_granularity(profile: &Profile, granularity: Granularity) -> Profile {
    if granularity == Granularity::Function {
        return profile.clone();
    }
    let mut tables = (*profile.tables).clone();
    let mut renamed: FxHashMap<(FunctionId, i64), FunctionId> = FxHashMap::default();
    let mut name = String::new();
    let mut mapped: Vec<LocationId> = Vec::with_capacity(tables.n_locations());
    for idx in 0..tables.n_locations() {
        let id = LocationId(idx as u32);
        let address = tables.location_address(id);
        let lines: Vec<Line> = tables.lines(id).to_vec();
        let new_lines: Box<[Line]> = if lines.is_empty() {
            if granularity != Granularity::Address {
                mapped.push(id);
                continue;
            }
            name.clear();
            let _ = write!(name, "{:016x} ", address.address);
            match tables.location_binary(id) {
                "" => name.push_str("<unknown>"),
                binary => {
                    let _ = write!(name, "[{binary}]");
                }
            }
            let function = synthetic(&mut tables, &name, StringId::EMPTY, 0);
            Box::new([Line { function, line: 0 }])
        } else {
            lines
                .iter()
                .map(|line| {
                    let function = match granularity {
                        Granularity::Line => *renamed
                            .entry((line.function, line.line))
                            .or_insert_with(|| {
                                name.clear();
                                node_name(&tables, line, &mut name);
                                let f = *tables.function(line.function);
                                synthetic(&mut tables, &name, f.filename, f.start_line)
                            }),
                        _ => {
                            name.clear();
                            let _ = write!(name, "{:016x} ", address.address);
                            node_name(&tables, line, &mut name);
                            let f = *tables.function(line.function);
                            synthetic(&mut tables, &name, f.filename, f.start_line)
                        }
                    };
                    Line {
                        function,
                        line: line.line,
                    }
                })
                .collect()
        };
        mapped.push(tables.intern_location(address.mapping, address.address, new_lines));
    }
    profile.with_stacks(tables, |tables, stack, frames| {
        frames.extend(tables.stack(stack).iter().map(|l| mapped[l.idx()]));
        true
    })
}

/// `profile` as google/pprof's `Profile.Aggregate` leaves it at `granularity`, for exports:
/// at [`Granularity::Function`] line numbers are dropped (locations that differ only by line
/// become one); finer granularities keep the profile as it is (our locations are already one
/// per distinct list of lines, or per address when unsymbolized).
pub fn aggregate(profile: &Profile, granularity: Granularity) -> Profile {
    if granularity != Granularity::Function {
        return profile.clone();
    }
    let mut tables = (*profile.tables).clone();
    let mut mapped: Vec<LocationId> = Vec::with_capacity(tables.n_locations());
    for idx in 0..tables.n_locations() {
        let id = LocationId(idx as u32);
        let lines = tables.lines(id);
        if lines.iter().all(|l| l.line == 0) {
            mapped.push(id);
            continue;
        }
        let lines: Box<[Line]> = lines.iter().map(|l| Line { line: 0, ..*l }).collect();
        let address = tables.location_address(id);
        mapped.push(tables.intern_location(address.mapping, address.address, lines));
    }
    profile.with_stacks(tables, |tables, stack, frames| {
        frames.extend(tables.stack(stack).iter().map(|l| mapped[l.idx()]));
        true
    })
}

fn synthetic(tables: &mut Tables, name: &str, filename: StringId, start_line: i64) -> FunctionId {
    let name = tables.intern_string(name);
    tables.intern_function(Function {
        name,
        system_name: name,
        filename,
        start_line,
    })
}

/// Appends pprof's name of a line's node (`NodeInfo.NameComponents` joined): the function's
/// name, then `file:line`, or the file alone without a line number.
fn node_name(tables: &Tables, line: &Line, out: &mut String) {
    let function = tables.function(line.function);
    let name = tables.string(function.name);
    let file = clean_path(tables.string(function.filename));
    out.push_str(name);
    let sep = if name.is_empty() { "" } else { " " };
    if line.line != 0 {
        let _ = write!(out, "{sep}{file}:{}", line.line);
    } else if !file.is_empty() {
        let _ = write!(out, "{sep}{file}");
    } else if name.is_empty() {
        out.push_str("<unknown>");
    }
}

/// A source path as pprof shows it: lexically cleaned (Go's `filepath.Clean`), and without
/// the `/proc/self/cwd/` prefix of Bazel builds.
pub fn clean_path(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    let cleaned = match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    };
    // pprof trims `/proc/self/cwd/./` and `/proc/self/cwd/` from the original path; cleaning
    // first makes the two one prefix.
    match cleaned.strip_prefix("/proc/self/cwd/") {
        Some(rest) if path.starts_with("/proc/self/cwd/") => rest.to_owned(),
        _ => cleaned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TopTable;
    use crate::test_support::profile;

    fn with_lines(stacks: &[(&str, i64)]) -> Profile {
        // `profile` gives every frame line 1 in no file; give `work` two lines in a file.
        let mut p = profile(stacks);
        let tables = std::sync::Arc::get_mut(&mut p.tables).expect("fresh tables");
        let file = tables.intern_string("/src/./app/work.go");
        let name = tables.intern_string("work");
        let work = tables.intern_function(Function {
            name,
            system_name: name,
            filename: file,
            start_line: 10,
        });
        let main = tables.lines(tables.stack(p.samples.stacks[0]).last().copied().unwrap())[0];
        let at = |tables: &mut Tables, line| {
            tables.intern_location(
                None,
                0x40 + line as u64,
                vec![Line {
                    function: work,
                    line,
                }]
                .into(),
            )
        };
        let main_loc = tables.intern_location(None, 0, vec![main].into());
        let (l12, l14) = (at(tables, 12), at(tables, 14));
        p.samples.stacks[0] = tables.intern_stack(&[l12, main_loc]);
        p.samples.stacks[1] = tables.intern_stack(&[l14, main_loc]);
        p
    }

    #[test]
    fn lines_split_a_function_and_name_file_and_line_as_pprof() {
        let p = with_lines(&[("main;work", 3), ("main;work", 2)]);
        let top = TopTable::build(&with_granularity(&p, Granularity::Line));
        let rows: Vec<_> = top
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.flat, r.cum))
            .collect();
        assert_eq!(
            rows,
            [
                ("work /src/app/work.go:12", 3, 3),
                ("work /src/app/work.go:14", 2, 2),
                ("main :1", 0, 5),
            ]
        );
        // Function granularity merges them again.
        let top = TopTable::build(&with_granularity(&p, Granularity::Function));
        assert_eq!(top.rows[0].name, "work");
        assert_eq!(top.rows[0].flat, 5);
    }

    #[test]
    fn addresses_name_each_location() {
        let p = with_lines(&[("main;work", 3), ("main;work", 2)]);
        let top = TopTable::build(&with_granularity(&p, Granularity::Address));
        assert_eq!(
            top.rows[0].name,
            "000000000000004c work /src/app/work.go:12"
        );
        assert_eq!(top.rows.len(), 3);
    }

    #[test]
    fn aggregating_to_functions_drops_line_numbers() {
        let p = with_lines(&[("main;work", 3), ("main;work", 2)]);
        let agg = aggregate(&p, Granularity::Function);
        assert_eq!(agg.samples.len(), 1);
        assert_eq!(agg.total(), 5);
    }

    #[test]
    fn paths_are_cleaned_as_go_cleans_them() {
        for (path, clean) in [
            ("/a/./b//c/../d.go", "/a/b/d.go"),
            ("a/../../b.go", "../b.go"),
            ("/proc/self/cwd/./pkg/x.go", "pkg/x.go"),
            ("/../x.go", "/x.go"),
            ("", ""),
        ] {
            assert_eq!(clean_path(path), clean, "{path}");
        }
    }

    #[test]
    fn names_are_parsed_in_both_spellings() {
        assert_eq!(Granularity::parse("lines"), Some(Granularity::Line));
        assert_eq!(Granularity::parse("address"), Some(Granularity::Address));
        assert_eq!(Granularity::parse("file"), None);
    }
}
