//! A pprof string table being written: the one string interner of everything that writes
//! pprof (the [`crate::ProfileBuilder`], the legacy formats' converter, the store's export).

use std::borrow::Cow;

use rustc_hash::FxHashMap;

/// Each string once, entry 0 `""` as pprof requires, ids in the order of first use. A string
/// is borrowed when the caller can lend it for the table's life ([`StringTable::id_borrowed`],
/// what an export of stored tables does), copied otherwise ([`StringTable::id`]).
///
/// ```
/// use parca_pprof::StringTable;
///
/// let mut strings = StringTable::new();
/// assert_eq!(strings.id("main"), 1);
/// assert_eq!(strings.id_borrowed("main"), 1);
/// assert_eq!(strings.into_strings(), ["", "main"]);
/// ```
#[derive(Debug, Clone)]
pub struct StringTable<'a> {
    strings: Vec<Cow<'a, str>>,
    ids: FxHashMap<Cow<'a, str>, i64>,
}

impl Default for StringTable<'_> {
    fn default() -> Self {
        StringTable::new()
    }
}

impl<'a> StringTable<'a> {
    /// A table holding only `""`.
    pub fn new() -> Self {
        let mut table = StringTable {
            strings: Vec::new(),
            ids: FxHashMap::default(),
        };
        table.id_borrowed("");
        table
    }

    /// The table of a decoded profile, kept as it is (ids unchanged, a string listed twice
    /// found at its first place), for adding to it; `""` first if it is empty.
    pub fn from_strings(strings: Vec<String>) -> Self {
        if strings.is_empty() {
            return StringTable::new();
        }
        let mut ids = FxHashMap::default();
        for (id, s) in strings.iter().enumerate() {
            ids.entry(Cow::Owned(s.clone())).or_insert(id as i64);
        }
        StringTable {
            strings: strings.into_iter().map(Cow::Owned).collect(),
            ids,
        }
    }

    /// The id of `s`, copied into the table on first use.
    pub fn id(&mut self, s: &str) -> i64 {
        match self.ids.get(s) {
            Some(&id) => id,
            None => self.push(Cow::Owned(s.to_owned())),
        }
    }

    /// The id of `s`, borrowed by the table on first use.
    pub fn id_borrowed(&mut self, s: &'a str) -> i64 {
        // A borrowed key costs nothing to make: one lookup finds or places it (the export's
        // path, once per string of every answer).
        let strings = &mut self.strings;
        *self.ids.entry(Cow::Borrowed(s)).or_insert_with(|| {
            strings.push(Cow::Borrowed(s));
            strings.len() as i64 - 1
        })
    }

    fn push(&mut self, s: Cow<'a, str>) -> i64 {
        let id = self.strings.len() as i64;
        self.ids.insert(s.clone(), id);
        self.strings.push(s);
        id
    }

    /// Strings in the table, `""` included.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether the table is empty (never, once made: it holds `""`).
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    /// The table as a profile's `string_table`.
    pub fn into_strings(self) -> Vec<String> {
        self.strings.into_iter().map(Cow::into_owned).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::StringTable;

    #[test]
    fn a_decoded_table_keeps_its_ids_and_grows_after_them() {
        let decoded = ["", "a", "b", "a"].map(String::from).to_vec();
        let mut strings = StringTable::from_strings(decoded);
        assert_eq!(strings.id("a"), 1, "the first of a string listed twice");
        assert_eq!(strings.id("c"), 4);
        assert_eq!(strings.into_strings(), ["", "a", "b", "a", "c"]);
        assert_eq!(StringTable::from_strings(Vec::new()).into_strings(), [""]);
    }
}
