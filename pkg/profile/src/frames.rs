//! Frames as pprof's graph nodes: one per distinct name (`NodeInfo` at function granularity,
//! where file and address are aggregated away), shared by the top table, the call graph and the
//! sandwich view so that the three agree on what a node is.

use indexmap::IndexSet;
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::tables::{FunctionId, LocationId, StringId, Tables, basename};

/// Names frames the way `pprof -top` does, memoized per function and location: a function's
/// name, or for a frame without one `[binary]` (`<unknown>` without a binary either). Each
/// distinct name is a node, numbered densely in the order first seen.
pub(crate) struct Namer<'a> {
    tables: &'a Tables,
    names: IndexSet<String, FxBuildHasher>,
    /// Per node: the source file of the first function seen with its name.
    files: Vec<StringId>,
    of_function: FxHashMap<FunctionId, u32>,
    of_location: FxHashMap<LocationId, u32>,
}

impl<'a> Namer<'a> {
    /// A namer over `tables`, with no nodes yet.
    pub(crate) fn new(tables: &'a Tables) -> Self {
        Namer {
            tables,
            names: IndexSet::default(),
            files: Vec::new(),
            of_function: FxHashMap::default(),
            of_location: FxHashMap::default(),
        }
    }

    fn intern(&mut self, name: String, file: StringId) -> u32 {
        let (id, new) = self.names.insert_full(name);
        if new {
            self.files.push(file);
        }
        id as u32
    }

    fn unsymbolized(&mut self, location: LocationId) -> u32 {
        if let Some(&id) = self.of_location.get(&location) {
            return id;
        }
        let binary = match self.tables.location_address(location).mapping {
            Some(m) => basename(self.tables.string(self.tables.mapping(m).file)),
            None => "",
        };
        let name = if binary.is_empty() {
            "<unknown>".to_owned()
        } else {
            format!("[{binary}]")
        };
        let id = self.intern(name, StringId::EMPTY);
        self.of_location.insert(location, id);
        id
    }

    /// Node ids of a location's frames, innermost inlined frame first.
    pub(crate) fn location(&mut self, location: LocationId, out: &mut Vec<u32>) {
        let lines = self.tables.lines(location);
        if lines.is_empty() {
            out.push(self.unsymbolized(location));
            return;
        }
        for line in lines {
            let id = match self.of_function.get(&line.function) {
                Some(&id) => id,
                None => {
                    let function = self.tables.function(line.function);
                    let name = self.tables.string(function.name);
                    let id = if name.is_empty() {
                        self.unsymbolized(location)
                    } else {
                        self.intern(name.to_owned(), function.filename)
                    };
                    self.of_function.insert(line.function, id);
                    id
                }
            };
            out.push(id);
        }
    }

    /// Number of nodes named so far.
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    /// The name of node `id`.
    pub(crate) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// The source file of node `id` (empty when unknown).
    pub(crate) fn file(&self, id: u32) -> &'a str {
        self.tables.string(self.files[id as usize])
    }

    /// The nodes' names, by id.
    pub(crate) fn into_names(self) -> IndexSet<String, FxBuildHasher> {
        self.names
    }
}
