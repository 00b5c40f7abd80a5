//! Span and trace ids as per-sample attributes: which span (request, trace) each sample was
//! taken in, kept beside the samples instead of as series labels, so that a service doing a
//! thousand requests a second does not make a thousand series.
//!
//! A profile's spans are a small dictionary (the attribute names once, then each distinct
//! span's values) and, per sample, an index into it. Operations that combine samples (merge,
//! diff, filters) drop the column: a merged profile is no longer one span's. The store keeps it
//! and selects samples by it before merging.

/// The span attributes of a profile's samples.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SampleSpans {
    /// The attribute names, e.g. `span_id`, `trace_id`: distinct, at most 255.
    pub names: Vec<String>,
    /// The distinct spans: per span, its value of each name (in `names`' order; empty: the
    /// sample has none of it).
    pub spans: Vec<Vec<String>>,
    /// Per sample (row of [`crate::Samples`]): 0 when the sample belongs to no span, else the
    /// index into `spans` plus one.
    pub rows: Vec<u32>,
}

impl SampleSpans {
    /// The span of sample `row`, if it has one.
    pub fn span_of(&self, row: usize) -> Option<&[String]> {
        match self.rows.get(row).copied() {
            Some(0) | None => None,
            Some(k) => self.spans.get(k as usize - 1).map(Vec::as_slice),
        }
    }

    /// The value of attribute `name` of span `span` (an index into `spans`); empty when the
    /// span has none (as a missing series label equals the empty value).
    pub fn value(&self, span: usize, name: &str) -> &str {
        self.names
            .iter()
            .position(|n| n == name)
            .and_then(|i| self.spans.get(span).and_then(|s| s.get(i)))
            .map_or("", String::as_str)
    }
}

/// Builds a [`SampleSpans`] row by row, interning each distinct span once.
#[derive(Debug, Default)]
pub struct SpansBuilder {
    out: SampleSpans,
    index: rustc_hash::FxHashMap<Vec<String>, u32>,
}

impl SpansBuilder {
    /// A builder over the attribute `names` (distinct).
    pub fn new(names: Vec<String>) -> Self {
        SpansBuilder {
            out: SampleSpans {
                names,
                ..SampleSpans::default()
            },
            index: Default::default(),
        }
    }

    /// Adds the next row: `values` per name (all empty: no span).
    pub fn push(&mut self, values: &[String]) {
        if values.iter().all(String::is_empty) {
            self.out.rows.push(0);
            return;
        }
        let spans = &mut self.out.spans;
        let k = *self.index.entry(values.to_vec()).or_insert_with(|| {
            spans.push(values.to_vec());
            spans.len() as u32
        });
        self.out.rows.push(k);
    }

    /// Adds `n` rows of the span with `values`.
    pub fn push_n(&mut self, values: &[String], n: usize) {
        for _ in 0..n {
            self.push(values);
        }
    }

    /// The column, or `None` when no row has a span.
    pub fn finish(self) -> Option<SampleSpans> {
        (!self.out.spans.is_empty()).then_some(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_interns_spans_and_marks_rows_without_one() {
        let mut b = SpansBuilder::new(vec!["span_id".into(), "trace_id".into()]);
        let a = ["00000000000000aa".to_owned(), "t1".to_owned()];
        let none = [String::new(), String::new()];
        b.push(&a);
        b.push(&none);
        b.push_n(&a, 2);
        let s = b.finish().unwrap();
        assert_eq!(s.rows, [1, 0, 1, 1]);
        assert_eq!(s.spans.len(), 1);
        assert_eq!(s.span_of(1), None);
        assert_eq!(s.value(0, "trace_id"), "t1");
        assert_eq!(s.value(0, "profile_id"), "");
        let mut b = SpansBuilder::new(vec!["span_id".into()]);
        b.push(&[String::new()]);
        assert!(b.finish().is_none());
    }
}
