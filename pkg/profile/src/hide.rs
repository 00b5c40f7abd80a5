//! Hiding frames: the profile without the frames of some functions or object files, as the web
//! UI's "hide frames" shows it, so that what is exported (pprof, folded, …) is what was seen.

use regex::Regex;

use crate::Error;
use crate::frame_test::FrameTest;
use crate::profile::Profile;
use crate::tables::{Line, LocationId};

/// Which frames to hide: by name (function name, or `binary+0xoffset` for an unsymbolized frame)
/// and by object file (base name, unsymbolized frames only). Patterns are regular expressions,
/// case-insensitive and unanchored, as the web UI's.
#[derive(Debug, Clone, Default)]
pub struct FrameHider {
    name: Option<Regex>,
    binary: Option<Regex>,
    /// When set: every frame whose object file (base name) is not one of these is hidden.
    only_binaries: Option<Vec<String>>,
    /// Every frame that fails one of these is hidden (Parca's frame filter criteria).
    keep_frames: Vec<FrameTest>,
}

impl FrameHider {
    /// A hider for frames whose name matches `name` or whose object file matches `binary`
    /// (`None` or empty: none). An invalid pattern is [`Error::Regex`].
    pub fn new(name: Option<&str>, binary: Option<&str>) -> Result<Self, Error> {
        let compile = |p: Option<&str>| -> Result<Option<Regex>, Error> {
            match p.filter(|p| !p.is_empty()) {
                None => Ok(None),
                Some(p) => {
                    Regex::new(&format!("(?i){p}"))
                        .map(Some)
                        .map_err(|source| Error::Regex {
                            pattern: p.to_owned(),
                            source: Box::new(source),
                        })
                }
            }
        };
        Ok(FrameHider {
            name: compile(name)?,
            binary: compile(binary)?,
            only_binaries: None,
            keep_frames: Vec::new(),
        })
    }

    /// Also hides every frame, symbolized or not, whose object file's base name is not one of
    /// `binaries` (Parca's binary frame filter).
    pub fn keeping_only_binaries(mut self, binaries: Vec<String>) -> Self {
        self.only_binaries = Some(binaries);
        self
    }

    /// Also hides every frame that fails one of `tests`, as Parca's frame filter criteria keep
    /// only the frames that pass all of theirs: a line is kept when it passes them all; a
    /// location without lines (unsymbolized) is tested by its object file and address only.
    pub fn keeping_frames(mut self, tests: Vec<FrameTest>) -> Self {
        self.keep_frames.extend(tests);
        self
    }

    /// Whether it hides nothing.
    pub fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.binary.is_none()
            && self.only_binaries.is_none()
            && self.keep_frames.is_empty()
    }

    /// Whether the criteria keep location `id`'s own parts (object file, address).
    fn keeps_location(&self, tables: &crate::Tables, id: LocationId) -> bool {
        self.keep_frames
            .iter()
            .all(|t| t.on_location(tables, id) != Some(false))
    }

    /// Whether the criteria keep `line`.
    fn keeps_line(&self, tables: &crate::Tables, line: &Line) -> bool {
        self.keep_frames
            .iter()
            .all(|t| t.on_line(tables, line) != Some(false))
    }

    /// `profile` without the hidden frames: each stack keeps its other frames in order (a
    /// location whose inlined lines are hidden in part keeps the rest), samples whose stacks
    /// become equal are added up, and the total does not change. Tables are copied once.
    pub fn apply(&self, profile: &Profile) -> Profile {
        if self.is_empty() {
            return profile.clone();
        }
        let mut tables = (*profile.tables).clone();
        // Per location: itself, another location with fewer lines, or none (all hidden).
        let mut kept: Vec<Option<LocationId>> = Vec::with_capacity(tables.n_locations());
        for idx in 0..tables.n_locations() {
            let id = LocationId(idx as u32);
            let lines = tables.lines(id);
            let outside = self.only_binaries.as_ref().is_some_and(|keep| {
                let binary = tables.location_binary(id);
                !keep.iter().any(|b| b == binary)
            }) || !self.keeps_location(&tables, id);
            let out = if outside {
                None
            } else if lines.is_empty() {
                let hidden = self
                    .name
                    .as_ref()
                    .is_some_and(|re| re.is_match(&tables.location_display_name(id)))
                    || self.binary.as_ref().is_some_and(|re| {
                        let binary = tables.location_binary(id);
                        !binary.is_empty() && re.is_match(binary)
                    });
                (!hidden).then_some(id)
            } else {
                let shown: Vec<Line> = lines
                    .iter()
                    .copied()
                    .filter(|l| {
                        !self.name.as_ref().is_some_and(|re| {
                            re.is_match(tables.string(tables.function(l.function).name))
                        }) && self.keeps_line(&tables, l)
                    })
                    .collect();
                if shown.is_empty() {
                    None
                } else if shown.len() == lines.len() {
                    Some(id)
                } else {
                    let address = tables.location_address(id);
                    Some(tables.intern_location(address.mapping, address.address, shown.into()))
                }
            };
            kept.push(out);
        }
        profile.with_stacks(tables, |tables, stack, frames| {
            frames.extend(tables.stack(stack).iter().filter_map(|l| kept[l.idx()]));
            true
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tables::{Mapping, StringId};
    use crate::test_support::{folded, profile};

    #[test]
    fn hidden_frames_leave_their_callees_to_their_callers() {
        let p = profile(&[
            ("main;runtime.mcall;work", 3),
            ("main;work", 2),
            ("main;RUNTIME.gc", 1),
        ]);
        let hider = FrameHider::new(Some(r"^runtime\."), None).expect("valid");
        let hidden = hider.apply(&p);
        // Case-insensitive; the two `main;work` stacks became one sample.
        assert_eq!(folded(&hidden), "main 1\nmain;work 5\n");
        assert_eq!(hidden.samples.len(), 2);
        assert_eq!(hidden.total(), p.total());
        assert_eq!(folded(&FrameHider::default().apply(&p)), folded(&p));
    }

    #[test]
    fn frame_criteria_keep_only_the_frames_that_pass_them_all() {
        use crate::frame_test::{FrameTest, TextField, TextOp};
        let p = profile(&[
            ("main;runtime.mcall;work", 3),
            ("main;work", 2),
            ("main;RUNTIME.gc", 1),
        ]);
        let hider = FrameHider::default().keeping_frames(vec![
            FrameTest::text(TextField::FunctionName, TextOp::NotStartsWith, "runtime."),
            FrameTest::text(TextField::FunctionName, TextOp::NotEqual, "MAIN"),
        ]);
        let kept = hider.apply(&p);
        // The sample left with no frame keeps its value (folded text has no line for it).
        assert_eq!(folded(&kept), "work 5\n");
        assert_eq!(kept.total(), p.total());
    }

    #[test]
    fn inlined_lines_are_hidden_one_by_one_and_binaries_by_name() {
        let mut p = profile(&[("main", 1)]);
        let tables = Arc::get_mut(&mut p.tables).expect("fresh tables");
        let main = tables.lines(tables.stack(p.samples.stacks[0])[0])[0];
        let helper = tables.intern_string("helper");
        let helper = tables.intern_function(crate::tables::Function {
            name: helper,
            system_name: helper,
            filename: StringId::EMPTY,
            start_line: 0,
        });
        // One location: `helper` inlined into `main`, called from an unsymbolized libc frame.
        let inlined = tables.intern_location(
            None,
            0x10,
            vec![
                Line {
                    function: helper,
                    line: 4,
                },
                main,
            ]
            .into(),
        );
        let file = tables.intern_string("/lib/libc.so.6");
        let libc = tables.intern_mapping(Mapping {
            memory_start: 0,
            memory_limit: 0x1000,
            file_offset: 0,
            file,
            build_id: StringId::EMPTY,
            has_functions: false,
            has_filenames: false,
            has_line_numbers: false,
            has_inline_frames: false,
        });
        let raw = tables.intern_location(Some(libc), 0x20, Box::new([]));
        p.samples.stacks[0] = tables.intern_stack(&[inlined, raw]);
        assert_eq!(folded(&p), "libc.so.6+0x20;main;helper 1\n");
        let no_helper = FrameHider::new(Some("^helper$"), None).expect("valid");
        assert_eq!(folded(&no_helper.apply(&p)), "libc.so.6+0x20;main 1\n");
        let no_libc = FrameHider::new(None, Some("LIBC")).expect("valid");
        assert_eq!(folded(&no_libc.apply(&p)), "main;helper 1\n");
        // Only libc's frames: the frame without an object file goes.
        let only_libc = FrameHider::default().keeping_only_binaries(vec!["libc.so.6".into()]);
        assert_eq!(folded(&only_libc.apply(&p)), "libc.so.6+0x20 1\n");
    }

    #[test]
    fn a_bad_pattern_is_an_error() {
        let err = FrameHider::new(None, Some("(")).expect_err("invalid");
        assert!(matches!(err, Error::Regex { pattern, .. } if pattern == "("));
    }
}
