//! Postings: for every label name=value, the bitmap of series that have it (roaring bitmaps),
//! and series selection by matchers as set operations over them.

use std::collections::BTreeMap;

use roaring::RoaringBitmap;

use crate::labels::{Labels, MatchOp, Matcher};

/// The postings of a set of series, kept in memory (the head's index; blocks serialize theirs).
#[derive(Debug, Clone, Default)]
pub struct MemPostings {
    /// name → value → series. Sorted, so names and values come out in order for the API.
    by_label: BTreeMap<String, BTreeMap<String, RoaringBitmap>>,
    all: RoaringBitmap,
}

impl MemPostings {
    /// Empty postings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Indexes series `series` under each of its labels.
    pub fn add(&mut self, series: u32, labels: &Labels) {
        self.all.insert(series);
        for label in labels.iter() {
            self.by_label
                .entry(label.name.clone())
                .or_default()
                .entry(label.value.clone())
                .or_default()
                .insert(series);
        }
    }

    /// Every series.
    pub fn all(&self) -> &RoaringBitmap {
        &self.all
    }

    /// The series with `name="value"`.
    pub fn get(&self, name: &str, value: &str) -> Option<&RoaringBitmap> {
        self.by_label.get(name)?.get(value)
    }

    /// The series that one matcher selects. As in Prometheus, a series without the label counts
    /// as having the empty value: a matcher that accepts `""` also selects series without it.
    pub fn for_matcher(&self, matcher: &Matcher) -> RoaringBitmap {
        for_matcher(self, matcher)
    }

    /// The series that all matchers select (every series for no matchers).
    pub fn select(&self, matchers: &[Matcher]) -> RoaringBitmap {
        select(self, matchers)
    }

    /// Label names that at least one series in `within` has, sorted.
    pub fn label_names(&self, within: &RoaringBitmap) -> Vec<String> {
        self.by_label
            .iter()
            .filter(|(_, values)| values.values().any(|series| !series.is_disjoint(within)))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Values of label `name` among the series in `within`, sorted.
    pub fn label_values(&self, name: &str, within: &RoaringBitmap) -> Vec<String> {
        self.by_label
            .get(name)
            .map(|values| {
                values
                    .iter()
                    .filter(|(_, series)| !series.is_disjoint(within))
                    .map(|(v, _)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl PostingsIndex for MemPostings {
    fn all_series(&self) -> RoaringBitmap {
        self.all.clone()
    }

    fn postings(&self, name: &str, value: &str) -> RoaringBitmap {
        self.get(name, value).cloned().unwrap_or_default()
    }

    fn values_of(&self, name: &str, keep: &dyn Fn(&str) -> bool) -> Option<Vec<RoaringBitmap>> {
        let values = self.by_label.get(name)?;
        Some(
            values
                .iter()
                .filter(|(v, _)| keep(v))
                .map(|(_, series)| series.clone())
                .collect(),
        )
    }
}

/// What selection needs from an index of series (the head's [`MemPostings`], a block's index):
/// series numbered densely within the index.
pub(crate) trait PostingsIndex {
    /// Every series.
    fn all_series(&self) -> RoaringBitmap;
    /// The series with `name="value"` (empty if none).
    fn postings(&self, name: &str, value: &str) -> RoaringBitmap;
    /// The postings of each value of label `name` that `keep` accepts; `None` if no series has
    /// the label.
    fn values_of(&self, name: &str, keep: &dyn Fn(&str) -> bool) -> Option<Vec<RoaringBitmap>>;
}

/// The series that one matcher selects, Prometheus' rules: a series without the label counts
/// as having the empty value.
pub(crate) fn for_matcher(index: &impl PostingsIndex, matcher: &Matcher) -> RoaringBitmap {
    if matcher.op == MatchOp::Equal && !matcher.value.is_empty() {
        return index.postings(&matcher.name, &matcher.value);
    }
    if matcher.matches("") {
        // Everything except the series whose value is rejected.
        let mut out = index.all_series();
        for series in index
            .values_of(&matcher.name, &|v| !matcher.matches(v))
            .unwrap_or_default()
        {
            out -= series;
        }
        out
    } else {
        let mut out = RoaringBitmap::new();
        for series in index
            .values_of(&matcher.name, &|v| matcher.matches(v))
            .unwrap_or_default()
        {
            out |= series;
        }
        out
    }
}

/// The series that all matchers select (every series for no matchers).
pub(crate) fn select(index: &impl PostingsIndex, matchers: &[Matcher]) -> RoaringBitmap {
    // Exact equalities first: they are cheap and usually the most selective.
    let mut ordered: Vec<&Matcher> = matchers.iter().collect();
    ordered.sort_by_key(|m| m.op != MatchOp::Equal || m.value.is_empty());
    let mut out: Option<RoaringBitmap> = None;
    for m in ordered {
        let set = for_matcher(index, m);
        out = Some(match out {
            None => set,
            Some(acc) => acc & set,
        });
        if out.as_ref().is_some_and(RoaringBitmap::is_empty) {
            break;
        }
    }
    out.unwrap_or_else(|| index.all_series())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn postings() -> MemPostings {
        let mut p = MemPostings::new();
        p.add(
            0,
            &Labels::new([("job", "api"), ("instance", "a"), ("env", "prod")]).expect("valid"),
        );
        p.add(
            1,
            &Labels::new([("job", "api"), ("instance", "b")]).expect("valid"),
        );
        p.add(
            2,
            &Labels::new([("job", "db"), ("instance", "a")]).expect("valid"),
        );
        p
    }

    fn select(p: &MemPostings, matchers: &[(MatchOp, &str, &str)]) -> Vec<u32> {
        let ms: Vec<Matcher> = matchers
            .iter()
            .map(|&(op, n, v)| Matcher::new(op, n, v).expect("valid"))
            .collect();
        p.select(&ms).iter().collect()
    }

    #[test]
    fn selects_like_prometheus() {
        let p = postings();
        assert_eq!(select(&p, &[(MatchOp::Equal, "job", "api")]), vec![0, 1]);
        assert_eq!(
            select(
                &p,
                &[
                    (MatchOp::Equal, "job", "api"),
                    (MatchOp::Equal, "instance", "a")
                ]
            ),
            vec![0]
        );
        assert_eq!(select(&p, &[(MatchOp::NotEqual, "job", "api")]), vec![2]);
        assert_eq!(
            select(
                &p,
                &[
                    (MatchOp::Re, "instance", "a|b"),
                    (MatchOp::NotRe, "job", "d.*")
                ]
            ),
            vec![0, 1]
        );
        // Missing labels count as empty.
        assert_eq!(select(&p, &[(MatchOp::Equal, "env", "")]), vec![1, 2]);
        assert_eq!(select(&p, &[(MatchOp::NotEqual, "env", "")]), vec![0]);
        assert_eq!(
            select(&p, &[(MatchOp::Equal, "nope", "x")]),
            Vec::<u32>::new()
        );
        assert_eq!(select(&p, &[]), vec![0, 1, 2]);
    }

    #[test]
    fn names_and_values_are_limited_to_the_selection() {
        let p = postings();
        let api = p.get("job", "api").expect("present").clone();
        assert_eq!(p.label_names(&api), vec!["env", "instance", "job"]);
        assert_eq!(p.label_values("instance", &api), vec!["a", "b"]);
        let db = p.get("job", "db").expect("present").clone();
        assert_eq!(p.label_names(&db), vec!["instance", "job"]);
    }
}
