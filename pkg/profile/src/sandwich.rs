//! The sandwich view of one function: who calls it and what it calls, each merged across every
//! place it runs, as two profiles whose flame graphs are the two halves.
//!
//! The callers half is upside down: its root is the function, its children the function's
//! callers, theirs their callers, up to the outermost frames. The callees half is the
//! function's call tree: its root the function, below it what it called. Each sample through
//! the function counts once in each half: a function that recurs on a stack is cut at its
//! outermost frame for the callers and at its innermost for the callees, so both roots hold
//! the function's cumulative value and the callees root's own value is its flat value. The
//! first level of each half is `pprof -peek`'s callers and callees of the function (pprof
//! counts every call of a function that recurs through others, where the tree counts only
//! the ones at those two frames).

use rustc_hash::FxHashMap;

use crate::frames::Namer;
use crate::profile::Profile;
use crate::tables::{Line, LocationId, Tables};

/// The two halves of a function's sandwich.
#[derive(Debug, Clone)]
pub struct Sandwich {
    /// The function's callers, the function at the root (a flame graph of it is upside down).
    pub callers: Profile,
    /// The function's callees, the function at the root.
    pub callees: Profile,
}

/// One frame of a stack: a location, and which of its lines (`None`: unsymbolized).
type Frame = (LocationId, Option<usize>);

/// The sandwich of the frames named `function` (as the top table names them), or `None` when
/// no sample's stack has such a frame.
pub fn sandwich(profile: &Profile, function: &str) -> Option<Sandwich> {
    let tables = &*profile.tables;
    let mut namer = Namer::new(tables);
    // Per stack: its frames root first, and where the function is outermost and innermost.
    let mut cut: FxHashMap<crate::tables::StackId, (Vec<Frame>, usize, usize)> =
        FxHashMap::default();
    let mut names = Vec::new();
    for &stack in &profile.samples.stacks {
        if cut.contains_key(&stack) {
            continue;
        }
        let mut frames = Vec::new();
        let (mut outer, mut inner) = (None, 0);
        for &location in tables.stack(stack).iter().rev() {
            names.clear();
            namer.location(location, &mut names);
            let symbolized = !tables.lines(location).is_empty();
            for (i, &node) in names.iter().enumerate().rev() {
                if namer.name(node) == function {
                    outer.get_or_insert(frames.len());
                    inner = frames.len();
                }
                frames.push((location, symbolized.then_some(i)));
            }
        }
        if let Some(outer) = outer {
            cut.insert(stack, (frames, outer, inner));
        }
    }
    if cut.is_empty() {
        return None;
    }
    let half = |callers: bool| {
        let mut split: FxHashMap<Frame, LocationId> = FxHashMap::default();
        let mut one = |tables: &mut Tables, frame: Frame| -> LocationId {
            let (location, Some(line)) = frame else {
                return frame.0;
            };
            *split.entry(frame).or_insert_with(|| {
                let l: Line = tables.lines(location)[line];
                let address = tables.location_address(location);
                tables.intern_location(address.mapping, address.address, Box::new([l]))
            })
        };
        profile.with_stacks(tables.clone(), |tables, stack, out| {
            let Some((frames, outer, inner)) = cut.get(&stack) else {
                return false;
            };
            if callers {
                // Leaf first, the function last: the outermost frames are the leaves.
                out.extend(frames[..=*outer].iter().map(|&f| one(tables, f)));
            } else {
                out.extend(frames[*inner..].iter().rev().map(|&f| one(tables, f)));
            }
            true
        })
    };
    Some(Sandwich {
        callers: half(true),
        callees: half(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{folded, profile};

    #[test]
    fn callers_and_callees_merge_every_place_the_function_runs() {
        let p = profile(&[
            ("main;a;f;x", 3),
            ("main;b;f;x", 2),
            ("main;b;f", 1),
            ("main;g", 4),
        ]);
        let s = sandwich(&p, "f").expect("f is in the profile");
        assert_eq!(folded(&s.callees), "f 1\nf;x 5\n");
        assert_eq!(folded(&s.callers), "f;a;main 3\nf;b;main 3\n");
        assert_eq!(s.callers.total(), 6);
        assert!(sandwich(&p, "nowhere").is_none());
    }

    #[test]
    fn a_recursive_function_counts_once_per_sample() {
        let p = profile(&[("main;f;g;f;h", 2), ("main;f;f", 1)]);
        let s = sandwich(&p, "f").expect("f");
        assert_eq!(folded(&s.callees), "f 1\nf;h 2\n");
        assert_eq!(folded(&s.callers), "f;main 3\n");
    }
}
