//! Stack filters: keep or drop samples by the functions on their stack (the query language's
//! `|= "x"`, `!= "x"`, `|~ "re"`, `!~ "re"`).

use regex::Regex;

use crate::Error;
use crate::frame_test::{FrameTest, NumberField};
use crate::profile::Profile;
use crate::tables::{LocationId, StackId, Tables};

/// How a filter's pattern is tested against the function names of a stack.
#[derive(Debug, Clone)]
enum Pattern {
    Substring(String),
    Regex(Regex),
    /// A test of one part of a frame (Parca's filter criteria).
    Frame(FrameTest),
}

/// One stack filter. A sample passes when some frame matches (for `keep` filters) or no frame
/// matches (for `drop` filters); for a leaf filter ([`StackFilter::at_leaf`]), when the frame
/// that was running matches or not. Unsymbolized frames are tested by their display name,
/// `binary+0xoffset`.
#[derive(Debug, Clone)]
pub struct StackFilter {
    pattern: Pattern,
    keep: bool,
    /// Test only the innermost function of the stack (the query language's `leaf`).
    leaf: bool,
}

impl StackFilter {
    /// Keeps samples with a function whose name contains `s` (`|= "s"`).
    pub fn contains(s: &str) -> Self {
        StackFilter {
            pattern: Pattern::Substring(s.to_owned()),
            keep: true,
            leaf: false,
        }
    }

    /// Keeps samples with no function whose name contains `s` (`!= "s"`).
    pub fn not_contains(s: &str) -> Self {
        StackFilter {
            pattern: Pattern::Substring(s.to_owned()),
            keep: false,
            leaf: false,
        }
    }

    /// The same test, of the innermost function of each stack only (the query language's
    /// `|= leaf "s"`): the function that was running, not its callers. What such a filter keeps
    /// sums to the function's self value (pprof's flat), where the plain filter gives its
    /// inclusive value (cum). An inlined call's innermost function is the one tested.
    pub fn at_leaf(mut self) -> Self {
        self.leaf = true;
        self
    }

    /// Keeps samples with a function whose whole name matches `pattern` (`|~ "re"`); the regex is
    /// anchored at both ends, as in PromQL.
    pub fn matches(pattern: &str) -> Result<Self, Error> {
        Ok(StackFilter {
            pattern: Pattern::Regex(anchored(pattern)?),
            keep: true,
            leaf: false,
        })
    }

    /// Keeps samples with no function whose whole name matches `pattern` (`!~ "re"`).
    pub fn not_matches(pattern: &str) -> Result<Self, Error> {
        Ok(StackFilter {
            pattern: Pattern::Regex(anchored(pattern)?),
            keep: false,
            leaf: false,
        })
    }

    /// Keeps samples by a test of their frames, as Parca's stack filter criteria do: a test of
    /// a location's object file or address keeps samples with some location that passes it; a
    /// test of a function's name, system name or file, or of a line number, keeps samples with
    /// some line that passes it when positive, and samples whose every line passes it when
    /// negative (`not_contains "x"`: no function containing `x`). Unsymbolized frames have no
    /// lines to test.
    pub fn frames(test: FrameTest) -> Self {
        use crate::frame_test::FrameTest as T;
        if test.is_location_test() {
            return StackFilter {
                pattern: Pattern::Frame(test),
                keep: true,
                leaf: false,
            };
        }
        let (test, keep) = match test {
            T::Text { field, op, value } => (
                T::Text {
                    field,
                    op: op.positive(),
                    value,
                },
                !op.is_negative(),
            ),
            T::Number {
                field: NumberField::LineNumber,
                equal,
                value,
            } => (
                T::Number {
                    field: NumberField::LineNumber,
                    equal: true,
                    value,
                },
                equal,
            ),
            other => (other, true),
        };
        StackFilter {
            pattern: Pattern::Frame(test),
            keep,
            leaf: false,
        }
    }

    fn test(&self, name: &str) -> bool {
        match &self.pattern {
            Pattern::Substring(s) => name.contains(s.as_str()),
            Pattern::Regex(re) => re.is_match(name),
            Pattern::Frame(_) => false,
        }
    }

    /// Whether a location matches: some line's function name (or an unsymbolized frame's
    /// display name) for patterns, the frame test otherwise.
    fn location(&self, tables: &Tables, id: LocationId) -> bool {
        let lines = tables.lines(id);
        if let Pattern::Frame(test) = &self.pattern {
            return match test.on_location(tables, id) {
                Some(hit) => hit,
                None => lines.iter().any(|l| test.on_line(tables, l) == Some(true)),
            };
        }
        if lines.is_empty() {
            self.test(&tables.location_display_name(id))
        } else if self.leaf {
            // pprof's order: the first line is the innermost of the functions inlined here.
            self.test(tables.string(tables.function(lines[0].function).name))
        } else {
            lines
                .iter()
                .any(|l| self.test(tables.string(tables.function(l.function).name)))
        }
    }
}

fn anchored(pattern: &str) -> Result<Regex, Error> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|source| Error::Regex {
        pattern: pattern.to_owned(),
        source: Box::new(source),
    })
}

/// Memo states of one filter over one table.
const UNKNOWN: u8 = 0;
const NO: u8 = 1;
const YES: u8 = 2;

/// Whether some frame of a stack matches, memoized per location and per stack so that each
/// function name is tested once and each stack walked once.
struct StackMatcher<'a> {
    filter: &'a StackFilter,
    tables: &'a Tables,
    locations: Vec<u8>,
    stacks: Vec<u8>,
}

impl StackMatcher<'_> {
    fn location(&mut self, id: LocationId) -> bool {
        if self.locations[id.idx()] == UNKNOWN {
            let hit = self.filter.location(self.tables, id);
            self.locations[id.idx()] = if hit { YES } else { NO };
        }
        self.locations[id.idx()] == YES
    }

    fn stack(&mut self, id: StackId) -> bool {
        if self.stacks[id.idx()] == UNKNOWN {
            let tables = self.tables;
            let frames = tables.stack(id);
            // pprof's order: the leaf first.
            let frames = if self.filter.leaf {
                &frames[..frames.len().min(1)]
            } else {
                frames
            };
            let hit = frames.iter().any(|&location| self.location(location));
            self.stacks[id.idx()] = if hit { YES } else { NO };
        }
        self.stacks[id.idx()] == YES
    }
}

/// Every filter's memo over one set of tables: which locations and stacks pass, each tested
/// once however many profiles sharing those tables are read.
pub struct StackFilters<'a> {
    tables: &'a Tables,
    matchers: Vec<StackMatcher<'a>>,
}

impl<'a> StackFilters<'a> {
    /// The filters `filters` over `tables`, nothing tested yet.
    pub fn new(tables: &'a Tables, filters: &'a [StackFilter]) -> Self {
        StackFilters {
            tables,
            matchers: filters
                .iter()
                .map(|filter| StackMatcher {
                    filter,
                    tables,
                    locations: vec![UNKNOWN; tables.n_locations()],
                    stacks: vec![UNKNOWN; tables.n_stacks()],
                })
                .collect(),
        }
    }

    /// Whether the tables are the ones this memo was made for (the same allocation).
    pub fn reads(&self, tables: &Tables) -> bool {
        std::ptr::eq(self.tables, tables)
    }

    /// Whether stack `id` passes every filter.
    pub fn passes(&mut self, id: StackId) -> bool {
        self.matchers
            .iter_mut()
            .all(|m| m.stack(id) == m.filter.keep)
    }

    /// The sum of the values of `profile`'s samples that pass every filter: what
    /// `filter_stacks(profile, filters).total()` gives, without building that profile.
    /// `profile` must use this memo's tables ([`StackFilters::reads`]).
    pub fn total(&mut self, profile: &Profile) -> i64 {
        debug_assert!(self.reads(&profile.tables), "a memo of other tables");
        let samples = &profile.samples;
        let mut total = 0i64;
        for (stack, value) in samples.stacks.iter().zip(&samples.values) {
            if self.passes(*stack) {
                total = total.wrapping_add(*value);
            }
        }
        total
    }
}

/// The samples of `profile` that pass every filter; the tables stay shared.
pub fn filter_stacks(profile: &Profile, filters: &[StackFilter]) -> Profile {
    if filters.is_empty() {
        return profile.clone();
    }
    let mut memo = StackFilters::new(&profile.tables, filters);
    let stacks = &profile.samples.stacks;
    profile.retain_samples(|i| memo.passes(stacks[i]))
}

/// `profile` with every stack turned around: the leaf becomes the root, as a bottom-up (inverted)
/// call tree shows callers under the functions that ran. Inlined frames keep their order within
/// their location.
pub fn invert_stacks(profile: &Profile) -> Profile {
    let mut tables = (*profile.tables).clone();
    let mut inverted = rustc_hash::FxHashMap::default();
    let mut frames = Vec::new();
    let stacks = profile
        .samples
        .stacks
        .iter()
        .map(|&stack| {
            *inverted.entry(stack).or_insert_with(|| {
                frames.clear();
                frames.extend(profile.tables.stack(stack).iter().rev());
                tables.intern_stack(&frames)
            })
        })
        .collect();
    Profile {
        tables: std::sync::Arc::new(tables),
        meta: profile.meta.clone(),
        samples: crate::Samples {
            stacks,
            ..profile.samples.clone()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{folded, profile};

    fn sample() -> Profile {
        profile(&[
            ("main;net/http.serve;runtime.mallocgc", 5),
            ("main;compute", 3),
            ("main;net/http.read", 2),
        ])
    }

    #[test]
    fn a_memo_sums_what_the_filtered_profile_holds() {
        let p = sample();
        for filters in [
            vec![StackFilter::contains("http")],
            vec![
                StackFilter::contains("main"),
                StackFilter::not_contains("malloc"),
            ],
            vec![StackFilter::contains("compute").at_leaf()],
            vec![StackFilter::matches("main").unwrap().at_leaf()],
        ] {
            let mut memo = StackFilters::new(&p.tables, &filters);
            assert!(memo.reads(&p.tables));
            // Twice: the second read answers from the memo.
            for _ in 0..2 {
                assert_eq!(
                    memo.total(&p),
                    filter_stacks(&p, &filters).total(),
                    "{filters:?}"
                );
            }
        }
        assert!(!StackFilters::new(&sample().tables, &[]).reads(&p.tables));
    }

    #[test]
    fn inverted_stacks_start_at_the_leaf() {
        let p = invert_stacks(&sample());
        let text = folded(&p);
        assert!(
            text.contains("runtime.mallocgc;net/http.serve;main 5\n"),
            "{text}"
        );
        assert!(text.contains("compute;main 3\n"), "{text}");
        assert_eq!(p.total(), sample().total());
    }

    #[test]
    fn frame_tests_keep_stacks_as_parcas_criteria_do() {
        use crate::frame_test::{FrameTest, TextField, TextOp};
        let keep = |op, value| {
            let filter = StackFilter::frames(FrameTest::text(TextField::FunctionName, op, value));
            folded(&filter_stacks(&sample(), &[filter]))
        };
        // Positive: some function passes; negative: every function passes.
        assert_eq!(
            keep(TextOp::StartsWith, "NET/"),
            "main;net/http.read 2\nmain;net/http.serve;runtime.mallocgc 5\n"
        );
        assert_eq!(keep(TextOp::NotContains, "HTTP"), "main;compute 3\n");
        assert_eq!(keep(TextOp::Equal, "compute"), "main;compute 3\n");
        assert_eq!(
            keep(TextOp::NotEqual, "compute"),
            "main;net/http.read 2\nmain;net/http.serve;runtime.mallocgc 5\n"
        );
    }

    #[test]
    fn contains_keeps_stacks_with_the_function() {
        let p = filter_stacks(&sample(), &[StackFilter::contains("mallocgc")]);
        assert_eq!(folded(&p), "main;net/http.serve;runtime.mallocgc 5\n");
    }

    #[test]
    fn regex_is_anchored_and_negation_drops() {
        let p = filter_stacks(
            &sample(),
            &[StackFilter::not_matches(r"net/http\..*").expect("valid")],
        );
        assert_eq!(folded(&p), "main;compute 3\n");
        let none = filter_stacks(&sample(), &[StackFilter::matches("http").expect("valid")]);
        assert!(
            none.samples.is_empty(),
            "anchored: `http` alone matches no full name"
        );
    }

    #[test]
    fn leaf_filters_test_the_running_function_only() {
        let leaf = filter_stacks(&sample(), &[StackFilter::contains("net/http").at_leaf()]);
        assert_eq!(folded(&leaf), "main;net/http.read 2\n");
        let not_leaf = filter_stacks(&sample(), &[StackFilter::not_contains("main").at_leaf()]);
        assert_eq!(not_leaf.total(), sample().total());
        let re = StackFilter::matches("runtime\\..*")
            .expect("valid")
            .at_leaf();
        assert_eq!(filter_stacks(&sample(), &[re]).total(), 5);
    }

    #[test]
    fn filters_combine_with_and() {
        let filters = [
            StackFilter::contains("net/http"),
            StackFilter::not_contains("malloc"),
        ];
        assert_eq!(
            folded(&filter_stacks(&sample(), &filters)),
            "main;net/http.read 2\n"
        );
    }

    #[test]
    fn bad_regex_names_the_pattern() {
        let err = StackFilter::matches("(unclosed").expect_err("invalid");
        assert_eq!(err.to_string(), "invalid stack filter regex `(unclosed`");
    }
}
