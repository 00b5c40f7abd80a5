//! A profile's own `drop_frames` and `keep_frames`, applied as google/pprof applies them when
//! it reads a profile (`Profile.RemoveUninteresting` → `Prune`, profile/prune.go): allocator and
//! lock-profiler frames (`malloc`, `operator new`, `RecordLockProfileData`) give way to their
//! callers. Applied once, while a pprof is normalized, so every reader sees what pprof shows.

use regex::Regex;

/// Names google/pprof keeps whole when it cuts an unsimplified name at its first `(`.
const RESERVED_NAMES: [&str; 2] = ["(anonymous namespace)", "operator()"];

/// The compiled `drop_frames` and `keep_frames` of one profile.
#[derive(Debug)]
pub(crate) struct Pruner {
    drop: Regex,
    keep: Option<Regex>,
}

impl Pruner {
    /// The pruner of a profile with these fields (empty: none). Patterns are anchored as
    /// google/pprof anchors them (`^(…)$`); an empty `drop_frames` prunes nothing, whatever
    /// `keep_frames` says. A pattern that does not compile is an error naming it.
    pub(crate) fn new(drop_frames: &str, keep_frames: &str) -> Result<Option<Pruner>, String> {
        if drop_frames.is_empty() {
            return Ok(None);
        }
        let compile = |field: &str, pattern: &str| {
            Regex::new(&format!("^({pattern})$"))
                .map_err(|e| format!("`{field}` is not a regular expression: {e}"))
        };
        let drop = compile("drop_frames", drop_frames)?;
        let keep = if keep_frames.is_empty() {
            None
        } else {
            Some(compile("keep_frames", keep_frames)?)
        };
        Ok(Some(Pruner { drop, keep }))
    }

    fn drops(&self, function_name: &str) -> bool {
        let name = simplify(function_name);
        self.drop.is_match(name) && !self.keep.as_ref().is_some_and(|k| k.is_match(name))
    }

    /// For one location whose lines' function names are `names` (innermost first, as pprof
    /// orders inlined lines): `None` when nothing in it is dropped, else how many innermost
    /// lines go (all of them: the location itself is pruned).
    pub(crate) fn location(&self, names: &[&str]) -> Option<usize> {
        // From the outermost line inwards, the first that is dropped.
        (0..names.len())
            .rev()
            .find(|&i| !names[i].is_empty() && self.drops(names[i]))
            .map(|i| i + 1)
    }
}

/// What [`Pruner::location`] found for each location of a profile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum LocationPrune {
    /// Nothing dropped.
    #[default]
    Keep,
    /// Inner lines dropped, outer ones kept: the stack is cut below it.
    Beneath,
    /// Every line dropped: the stack is cut at it, the location gone too.
    Whole,
}

/// What pruning does to each location of one pprof.
#[derive(Debug)]
pub(crate) struct PrunePlan {
    /// Whether stacks are cut at the location.
    pub location: Vec<LocationPrune>,
    /// How many inner (inlined) lines the location loses.
    pub lines_dropped: Vec<usize>,
}

impl PrunePlan {
    /// The plan of `pruner` over every location of `pprof`.
    pub(crate) fn of(pprof: &parca_pprof::Pprof, pruner: &Pruner) -> PrunePlan {
        let n = pprof.locations().len();
        let mut plan = PrunePlan {
            location: vec![LocationPrune::Keep; n],
            lines_dropped: vec![0; n],
        };
        let mut names = Vec::new();
        for (i, loc) in pprof.locations().iter().enumerate() {
            let lines = pprof.lines(loc);
            names.clear();
            names.extend(
                lines
                    .iter()
                    .map(|l| pprof.string(pprof.functions()[l.function as usize].name)),
            );
            // A location pruned whole keeps its lines (it stays whole where a stack does not
            // reach past it); one pruned beneath loses its inner lines, as in google/pprof.
            match pruner.location(&names) {
                Some(n) if n == lines.len() => plan.location[i] = LocationPrune::Whole,
                Some(n) => {
                    plan.lines_dropped[i] = n;
                    plan.location[i] = LocationPrune::Beneath;
                }
                None => {}
            }
        }
        plan
    }
}

/// The frames of a stack (leaf first) that stay: scanning from the root, the first pruned
/// location after a frame that is not pruned cuts the stack there (google/pprof's rule: never
/// before the first user frame, so a stack is never emptied).
pub(crate) fn kept_frames<T>(frames: &[T], prune_of: impl Fn(&T) -> LocationPrune) -> &[T] {
    let mut found_user = false;
    for i in (0..frames.len()).rev() {
        match prune_of(&frames[i]) {
            LocationPrune::Keep => found_user = true,
            _ if !found_user => {}
            LocationPrune::Whole => return &frames[i + 1..],
            LocationPrune::Beneath => return &frames[i..],
        }
    }
    frames
}

/// google/pprof's `simplifyFunc`: a leading `.` (PPC ELF v1) removed, and an unsimplified C++
/// name cut at its argument list, `(anonymous namespace)` and `operator()` excepted.
fn simplify(name: &str) -> &str {
    let name = name.strip_prefix('.').unwrap_or(name);
    let bytes = name.as_bytes();
    let mut i = 0;
    // Leftmost first, as Go's regex alternation `(anonymous namespace)|operator\(\)|\(` finds.
    while i < bytes.len() {
        if let Some(reserved) = RESERVED_NAMES
            .iter()
            .find(|r| bytes[i..].starts_with(r.as_bytes()))
        {
            i += reserved.len();
        } else if bytes[i] == b'(' {
            return &name[..i];
        } else {
            i += 1;
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simplifies_as_google_pprof() {
        assert_eq!(simplify("foo(int, char)"), "foo");
        assert_eq!(simplify(".foo"), "foo");
        assert_eq!(
            simplify("(anonymous namespace)::Bar::baz(int)"),
            "(anonymous namespace)::Bar::baz"
        );
        assert_eq!(simplify("Functor::operator()(int)"), "Functor::operator()");
        assert_eq!(simplify("plain"), "plain");
        assert_eq!(simplify("ünïcode(x)"), "ünïcode");
    }

    #[test]
    fn drops_and_keeps() {
        let p = Pruner::new("malloc|operator new.*", "operator new\\(keep\\)")
            .unwrap()
            .unwrap();
        assert!(p.drops("malloc"));
        assert!(p.drops("operator new(unsigned long)"));
        assert!(!p.drops("mallocx"));
        assert!(Pruner::new("", "x").unwrap().is_none());
        assert!(Pruner::new("(", "").unwrap_err().contains("drop_frames"));
        // Lines innermost first: the outermost dropped line decides.
        assert_eq!(p.location(&["inner", "malloc", "outer"]), Some(2));
        assert_eq!(p.location(&["malloc"]), Some(1));
        assert_eq!(p.location(&["work"]), None);
    }

    #[test]
    fn cuts_stacks_after_the_first_user_frame() {
        use LocationPrune::*;
        // Leaf first: [malloc, alloc_helper(beneath), work, main].
        let frames = [Whole, Beneath, Keep, Keep];
        assert_eq!(kept_frames(&frames, |p| *p), &[Beneath, Keep, Keep]);
        let frames = [Whole, Keep, Keep];
        assert_eq!(kept_frames(&frames, |p| *p), &[Keep, Keep]);
        // Pruned frames at the root are not cut: nothing user-like came before them.
        let frames = [Keep, Whole];
        assert_eq!(kept_frames(&frames, |p| *p), &[Keep, Whole]);
        // A pruned frame in the middle cuts everything beneath it.
        let frames = [Keep, Keep, Whole, Keep];
        assert_eq!(kept_frames(&frames, |p| *p), &[Keep]);
    }
}
