//! Builds small profiles from folded stacks for unit tests.

use std::sync::Arc;

use crate::profile::{Meta, Profile, Samples, ValueType};
use crate::tables::{Function, LabelSetId, Line, StackId, StringId, Tables};

/// A CPU profile from `("main;work;leaf", value)` pairs (root first), all in fresh tables.
pub fn profile(stacks: &[(&str, i64)]) -> Profile {
    let mut tables = Tables::new();
    let mut samples = Samples::default();
    for &(folded, value) in stacks {
        samples.stacks.push(intern_folded(&mut tables, folded));
        samples.labels.push(LabelSetId::EMPTY);
        samples.values.push(value);
    }
    let cpu = ValueType {
        kind: "cpu".into(),
        unit: "nanoseconds".into(),
    };
    Profile {
        tables: Arc::new(tables),
        meta: Meta {
            sample_type: cpu.clone(),
            period_type: cpu,
            period: 10,
            ..Meta::default()
        },
        samples,
    }
}

/// Interns the stack `"main;work;leaf"` (root first) into `tables`, each frame a function of
/// that name at line 1.
pub fn intern_folded(tables: &mut Tables, folded: &str) -> StackId {
    let mut frames = Vec::new();
    for name in folded.split(';').rev() {
        let name = tables.intern_string(name);
        let function = tables.intern_function(Function {
            name,
            system_name: name,
            filename: StringId::EMPTY,
            start_line: 0,
        });
        frames.push(tables.intern_location(None, 0, vec![Line { function, line: 1 }].into()));
    }
    tables.intern_stack(&frames)
}

/// The folded text of a profile, for compact assertions.
pub fn folded(profile: &Profile) -> String {
    let mut out = Vec::new();
    crate::FlameGraph::build(profile)
        .write_folded(&mut out)
        .expect("write to vec");
    String::from_utf8(out).expect("utf-8")
}
