//! The top table: flat and cumulative value per function, as `pprof -top` computes them.

use rustc_hash::FxHashMap;

use crate::frames::Namer;
use crate::profile::Profile;
use crate::tables::StackId;

/// One function's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopRow {
    /// Function name; `[binary]` for frames without a function name, `<unknown>` without a binary
    /// either (google/pprof's names at function granularity).
    pub name: String,
    /// Value of samples whose leaf frame is this function.
    pub flat: i64,
    /// Value of samples with this function anywhere on the stack (counted once per sample).
    pub cum: i64,
    /// For a diff: the base side's flat value.
    pub base_flat: Option<i64>,
    /// For a diff: the base side's cumulative value.
    pub base_cum: Option<i64>,
}

/// The top table of a profile, rows sorted by flat value (largest magnitude first), then
/// cumulative, then name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopTable {
    /// What the values measure, e.g. `cpu`.
    pub sample_type: String,
    /// Their unit, e.g. `nanoseconds`.
    pub unit: String,
    /// Sum of all sample values.
    pub total: i64,
    /// For a diff: sum of the base side's values.
    pub base_total: Option<i64>,
    /// One row per function.
    pub rows: Vec<TopRow>,
}

impl TopTable {
    /// Computes the table. Zero-valued samples are skipped, as pprof does.
    pub fn build(profile: &Profile) -> TopTable {
        let tables = &*profile.tables;
        let samples = &profile.samples;
        // Sum per stack first: the walk below is per distinct stack, not per sample.
        let mut per_stack: FxHashMap<StackId, (i64, i64)> = FxHashMap::default();
        for i in 0..samples.len() {
            let base = samples.diff_base.as_ref().map_or(0, |b| b[i]);
            let e = per_stack.entry(samples.stacks[i]).or_default();
            e.0 = e.0.wrapping_add(samples.values[i]);
            e.1 = e.1.wrapping_add(base);
        }
        let mut namer = Namer::new(tables);
        // Per name: flat, cum, base flat, base cum.
        let mut sums: Vec<[i64; 4]> = Vec::new();
        let mut last_seen: Vec<u32> = Vec::new();
        let mut frames = Vec::new();
        let mut order: Vec<(StackId, (i64, i64))> = per_stack.into_iter().collect();
        order.sort_unstable_by_key(|&(s, _)| s);
        for (visit, &(stack, (value, base))) in order.iter().enumerate() {
            if value == 0 && base == 0 {
                continue;
            }
            frames.clear();
            for &location in tables.stack(stack) {
                namer.location(location, &mut frames);
            }
            if sums.len() < namer.len() {
                sums.resize(namer.len(), [0; 4]);
                last_seen.resize(namer.len(), u32::MAX);
            }
            if let Some(&leaf) = frames.first() {
                let s = &mut sums[leaf as usize];
                s[0] = s[0].wrapping_add(value);
                s[2] = s[2].wrapping_add(base);
            }
            for &f in &frames {
                if last_seen[f as usize] != visit as u32 {
                    last_seen[f as usize] = visit as u32;
                    let s = &mut sums[f as usize];
                    s[1] = s[1].wrapping_add(value);
                    s[3] = s[3].wrapping_add(base);
                }
            }
        }
        let is_diff = profile.is_diff();
        let mut rows: Vec<TopRow> = namer
            .into_names()
            .into_iter()
            .zip(sums)
            .map(|(name, [flat, cum, base_flat, base_cum])| TopRow {
                name,
                flat,
                cum,
                base_flat: is_diff.then_some(base_flat),
                base_cum: is_diff.then_some(base_cum),
            })
            .collect();
        rows.sort_by(|a, b| {
            b.flat
                .unsigned_abs()
                .cmp(&a.flat.unsigned_abs())
                .then(b.cum.cmp(&a.cum))
                .then(a.name.cmp(&b.name))
        });
        TopTable {
            sample_type: profile.meta.sample_type.kind.clone(),
            unit: profile.meta.sample_type.unit.clone(),
            total: profile.total(),
            base_total: profile.base_total(),
            rows,
        }
    }

    /// The table as text, one row per line: `flat flat% cum cum% name`, like `pprof -top`.
    pub fn to_text(&self, style: crate::units::ValueStyle) -> String {
        use std::fmt::Write;
        let pct = |v: i64| {
            if self.total == 0 {
                0.0
            } else {
                100.0 * v as f64 / self.total as f64
            }
        };
        let value = |v: i64| style.format(v, &self.unit);
        let width = match style {
            crate::units::ValueStyle::Human => 10,
            crate::units::ValueStyle::Raw => 16,
        };
        let mut out = format!(
            "Type: {} ({})\nTotal: {}\n",
            self.sample_type,
            self.unit,
            value(self.total)
        );
        let _ = writeln!(
            out,
            "{:>width$} {:>7} {:>width$} {:>7}  name",
            "flat", "flat%", "cum", "cum%"
        );
        for row in &self.rows {
            let _ = writeln!(
                out,
                "{:>width$} {:>6.2}% {:>width$} {:>6.2}%  {}",
                value(row.flat),
                pct(row.flat),
                value(row.cum),
                pct(row.cum),
                row.name
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::profile;

    #[test]
    fn flat_is_the_leaf_and_cum_counts_recursion_once() {
        let p = profile(&[("main;f;f;g", 3), ("main;f", 2)]);
        let top = TopTable::build(&p);
        let row = |name: &str| {
            top.rows
                .iter()
                .find(|r| r.name == name)
                .map(|r| (r.flat, r.cum))
        };
        assert_eq!(row("g"), Some((3, 3)));
        assert_eq!(row("f"), Some((2, 5)));
        assert_eq!(row("main"), Some((0, 5)));
        assert_eq!(top.rows[0].name, "g");
    }
}
