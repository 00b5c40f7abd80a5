//! Parca's Arrow reports, which its web UI draws: `FLAMEGRAPH_ARROW` (the icicle graph, one row
//! per node in breadth-first order) and `TABLE_ARROW` (the table, one row per function, with its
//! callers and callees), as Arrow IPC streams with the columns Parca's server writes
//! (`pkg/query/flamegraph_arrow.go` and `table.go` in Parca). Uncompressed: Parca's UI reads
//! uncompressed and LZ4 streams alike.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::builder::{
    BinaryDictionaryBuilder, BooleanBuilder, Int32Builder, Int64Builder, ListBuilder,
    UInt32Builder, UInt64Builder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::ArrowError;
use parca_profile::{FlameGraph, FlameGrouping, FlameNode, Profile, TopTable};

/// One node's identity as Parca's UI shows it: object file, build id, address, function.
struct Frame<'a> {
    mapping_file: Option<&'a str>,
    build_id: Option<&'a str>,
    address: Option<u64>,
    name: Option<String>,
    system_name: Option<&'a str>,
    file: Option<&'a str>,
    start_line: Option<u64>,
}

fn frame<'a>(node: &FlameNode<'a>) -> Frame<'a> {
    let t = node.tables;
    // A function node carries its location when grouped by address or object file.
    let mapping = node.location.and_then(|l| l.mapping).map(|m| t.mapping(m));
    let (mapping_file, build_id) = (
        mapping.map(|m| t.string(m.file)),
        mapping.map(|m| t.string(m.build_id)),
    );
    let address = node.location.map(|l| l.address);
    match node.function {
        Some(f) => Frame {
            mapping_file,
            build_id,
            address,
            name: Some(t.string(f.name).to_owned()),
            system_name: Some(t.string(f.system_name)),
            file: Some(t.string(f.filename)),
            start_line: u64::try_from(f.start_line).ok(),
        },
        None => Frame {
            mapping_file,
            build_id,
            address,
            name: None,
            system_name: None,
            file: None,
            start_line: None,
        },
    }
}

fn append_text(b: &mut BinaryDictionaryBuilder<Int32Type>, text: Option<&str>) {
    match text {
        Some(t) => {
            b.append_value(t.as_bytes());
        }
        None => b.append_null(),
    }
}

/// One group of a flame graph: the values of the labels it is grouped by (none when not
/// grouped), and its profile.
pub(crate) struct FlameGroup<'a> {
    pub(crate) labels: Vec<Option<String>>,
    pub(crate) profile: &'a Profile,
}

/// A row of the breadth-first flame graph: the root, a group's label row, or a node of a
/// group's graph.
#[derive(Clone, Copy)]
enum Item {
    Root,
    Labels(usize),
    Node(usize, u32),
}

/// `FLAMEGRAPH_ARROW`: the record, the height (deepest row + 1) and the value of the rows
/// trimmed away (smaller than `trim` of the total). Grouped by labels (`label_names`, one
/// value per name in each group), each group is a `labels_only` row under the root with its
/// stacks below it, and every row carries its group's values in `labels.<name>` columns, as
/// Parca writes them.
#[expect(
    clippy::too_many_lines,
    reason = "builds Parca's Arrow record column by column as its schema lists them"
)]
pub(crate) fn flamegraph(
    groups: &[FlameGroup<'_>],
    label_names: &[String],
    grouping: FlameGrouping,
    trim: f64,
) -> Result<(Vec<u8>, i32, i64), ArrowError> {
    let graphs: Vec<FlameGraph<'_>> = groups
        .iter()
        .map(|g| FlameGraph::build_grouped(g.profile, grouping))
        .collect();
    let is_diff = groups.iter().any(|g| g.profile.is_diff());
    let grand_total: i64 = graphs.iter().map(FlameGraph::total).sum();
    let threshold = (grand_total.unsigned_abs() as f64 * trim) as u64;
    let labelled = !label_names.is_empty();
    let children_of = |item: Item| -> Vec<Item> {
        match item {
            Item::Root if labelled => (0..graphs.len()).map(Item::Labels).collect(),
            Item::Root => graphs.first().map_or_else(Vec::new, |g| {
                g.node(0)
                    .children
                    .iter()
                    .map(|&c| Item::Node(0, c))
                    .collect()
            }),
            Item::Labels(g) => graphs[g]
                .node(0)
                .children
                .iter()
                .map(|&c| Item::Node(g, c))
                .collect(),
            Item::Node(g, n) => graphs[g]
                .node(n)
                .children
                .iter()
                .map(|&c| Item::Node(g, c))
                .collect(),
        }
    };
    // (total, self, base total) of an item.
    let values = |item: Item| -> (i64, i64, i64) {
        match item {
            Item::Root => (
                grand_total,
                0,
                graphs.iter().map(|g| g.node(0).base_total).sum(),
            ),
            Item::Labels(g) => {
                let root = graphs[g].node(0);
                (root.total, root.self_value, root.base_total)
            }
            Item::Node(g, n) => {
                let node = graphs[g].node(n);
                (node.total, node.self_value, node.base_total)
            }
        }
    };
    // Breadth-first: (item, parent row, depth, value offset).
    let mut rows: Vec<(Item, i32, u32, i64)> = vec![(Item::Root, -1, 0, 0)];
    let mut children: Vec<Vec<u32>> = vec![Vec::new()];
    let mut trimmed = 0i64;
    let mut i = 0;
    while i < rows.len() {
        let (item, _, depth, offset) = rows[i];
        let mut next_offset = offset;
        for child in children_of(item) {
            let value = values(child).0;
            if value.unsigned_abs() < threshold {
                trimmed += value;
                continue;
            }
            children[i].push(rows.len() as u32);
            rows.push((child, i as i32, depth + 1, next_offset));
            children.push(Vec::new());
            next_offset += value;
        }
        i += 1;
    }
    let height = rows.iter().map(|r| r.2).max().unwrap_or(0) as i32 + 1;

    let mut labels_only = BooleanBuilder::new();
    let mut address = UInt64Builder::new();
    let mut mapping_file = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut build_id = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut line = UInt64Builder::new();
    let mut inlined = BooleanBuilder::new();
    let mut start_line = UInt64Builder::new();
    let mut name = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut system_name = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut file = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut child_rows = ListBuilder::new(UInt32Builder::new());
    let mut parent = Int32Builder::new();
    let mut cumulative = Int64Builder::new();
    let mut flat = Int64Builder::new();
    let mut diff = Int64Builder::new();
    let mut timestamp = Int64Builder::new();
    let mut depth_column = UInt32Builder::new();
    let mut value_offset = Int64Builder::new();
    let mut label_columns: Vec<BinaryDictionaryBuilder<Int32Type>> = label_names
        .iter()
        .map(|_| BinaryDictionaryBuilder::new())
        .collect();
    for (row, &(item, parent_row, depth, offset)) in rows.iter().enumerate() {
        let group = match item {
            Item::Root => None,
            Item::Labels(g) | Item::Node(g, _) => Some(g),
        };
        for (k, column) in label_columns.iter_mut().enumerate() {
            let value = group.and_then(|g| groups[g].labels.get(k).cloned().flatten());
            append_text(column, value.as_deref());
        }
        match item {
            Item::Node(g, n) => {
                let node = graphs[g].node(n);
                let f = frame(&node);
                labels_only.append_value(false);
                address.append_option(f.address);
                append_text(&mut mapping_file, f.mapping_file);
                append_text(&mut build_id, f.build_id);
                line.append_option(u64::try_from(node.line).ok().filter(|&l| l > 0));
                inlined.append_value(false);
                start_line.append_option(f.start_line);
                append_text(&mut name, f.name.as_deref());
                append_text(&mut system_name, f.system_name);
                append_text(&mut file, f.file);
            }
            Item::Root | Item::Labels(_) => {
                if matches!(item, Item::Root) {
                    labels_only.append_null();
                } else {
                    labels_only.append_value(true);
                }
                address.append_null();
                for b in [
                    &mut mapping_file,
                    &mut build_id,
                    &mut name,
                    &mut system_name,
                    &mut file,
                ] {
                    b.append_null();
                }
                line.append_null();
                inlined.append_null();
                start_line.append_null();
            }
        }
        if children[row].is_empty() {
            child_rows.append_null();
        } else {
            child_rows.values().append_slice(&children[row]);
            child_rows.append(true);
        }
        let (total, self_value, base_total) = values(item);
        parent.append_value(parent_row);
        cumulative.append_value(total);
        flat.append_value(self_value);
        diff.append_value(if is_diff { total - base_total } else { 0 });
        timestamp.append_value(0);
        depth_column.append_value(depth);
        value_offset.append_value(offset);
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("labels_only", Arc::new(labels_only.finish())),
        ("location_address", Arc::new(address.finish())),
        ("mapping_file", Arc::new(mapping_file.finish())),
        ("mapping_build_id", Arc::new(build_id.finish())),
        ("location_line", Arc::new(line.finish())),
        ("inlined", Arc::new(inlined.finish())),
        ("function_startline", Arc::new(start_line.finish())),
        ("function_name", Arc::new(name.finish())),
        ("function_system_name", Arc::new(system_name.finish())),
        ("function_file_name", Arc::new(file.finish())),
        ("children", Arc::new(child_rows.finish())),
        ("parent", Arc::new(parent.finish())),
        ("cumulative", Arc::new(cumulative.finish())),
        ("flat", Arc::new(flat.finish())),
        ("diff", Arc::new(diff.finish())),
        ("timestamp", Arc::new(timestamp.finish())),
        ("depth", Arc::new(depth_column.finish())),
        ("value_offset", Arc::new(value_offset.finish())),
    ];
    let label_fields: Vec<String> = label_names.iter().map(|n| format!("labels.{n}")).collect();
    let mut columns = columns;
    for (field, mut column) in label_fields.iter().zip(label_columns) {
        columns.push((field.as_str(), Arc::new(column.finish())));
    }
    Ok((ipc_stream(columns)?, height, trimmed))
}

/// `TABLE_ARROW`: one row per function (our top table's rows, largest flat first), with the
/// rows of the functions that call it and that it calls.
#[expect(
    clippy::too_many_lines,
    reason = "builds Parca's Arrow table column by column as its schema lists them"
)]
pub(crate) fn table(profile: &Profile) -> Result<Vec<u8>, ArrowError> {
    let top = TopTable::build(profile);
    let row_of: HashMap<&str, usize> = top
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    // Callers and callees from the call tree: a node's parent calls it.
    let graph = FlameGraph::build(profile);
    let mut callers: Vec<BTreeSet<i64>> = vec![BTreeSet::new(); top.rows.len()];
    let mut callees: Vec<BTreeSet<i64>> = vec![BTreeSet::new(); top.rows.len()];
    let mut details: Vec<Option<Frame<'_>>> = (0..top.rows.len()).map(|_| None).collect();
    let mut stack = vec![(0u32, None::<usize>)];
    while let Some((index, parent_row)) = stack.pop() {
        let node = graph.node(index);
        let row = if index == 0 {
            None
        } else {
            let f = frame(&node);
            let display = graph.name(index);
            let row = row_of.get(display.as_ref()).copied();
            if let Some(row) = row {
                details[row].get_or_insert(f);
                if let Some(p) = parent_row {
                    callers[row].insert(p as i64);
                    callees[p].insert(row as i64);
                }
            }
            row
        };
        for &child in node.children {
            stack.push((child, row.or(parent_row)));
        }
    }
    let mut mapping_file = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut build_id = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut address = UInt64Builder::new();
    let mut line = Int64Builder::new();
    let mut start_line = Int64Builder::new();
    let mut name = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut system_name = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut file = BinaryDictionaryBuilder::<Int32Type>::new();
    let mut cumulative = Int64Builder::new();
    let mut cumulative_diff = Int64Builder::new();
    let mut flat = Int64Builder::new();
    let mut flat_diff = Int64Builder::new();
    let mut caller_rows = ListBuilder::new(Int64Builder::new());
    let mut callee_rows = ListBuilder::new(Int64Builder::new());
    for (i, row) in top.rows.iter().enumerate() {
        let f = details[i].as_ref();
        append_text(&mut mapping_file, f.and_then(|f| f.mapping_file));
        append_text(&mut build_id, f.and_then(|f| f.build_id));
        address.append_value(f.and_then(|f| f.address).unwrap_or(0));
        line.append_null();
        start_line.append_value(
            f.and_then(|f| f.start_line)
                .map_or(0, |l| i64::try_from(l).unwrap_or(0)),
        );
        append_text(&mut name, Some(&row.name));
        append_text(&mut system_name, f.and_then(|f| f.system_name));
        append_text(&mut file, f.and_then(|f| f.file));
        cumulative.append_value(row.cum);
        cumulative_diff.append_option(row.base_cum.map(|b| row.cum - b));
        flat.append_value(row.flat);
        flat_diff.append_value(row.base_flat.map_or(0, |b| row.flat - b));
        caller_rows
            .values()
            .append_slice(&callers[i].iter().copied().collect::<Vec<_>>());
        caller_rows.append(true);
        callee_rows
            .values()
            .append_slice(&callees[i].iter().copied().collect::<Vec<_>>());
        callee_rows.append(true);
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("mapping_file", Arc::new(mapping_file.finish())),
        ("mapping_build_id", Arc::new(build_id.finish())),
        ("location_address", Arc::new(address.finish())),
        ("location_line", Arc::new(line.finish())),
        ("function_startline", Arc::new(start_line.finish())),
        ("function_name", Arc::new(name.finish())),
        ("function_system_name", Arc::new(system_name.finish())),
        ("function_file_name", Arc::new(file.finish())),
        ("cumulative", Arc::new(cumulative.finish())),
        ("cumulative_diff", Arc::new(cumulative_diff.finish())),
        ("flat", Arc::new(flat.finish())),
        ("flat_diff", Arc::new(flat_diff.finish())),
        ("callers", Arc::new(caller_rows.finish())),
        ("callees", Arc::new(callee_rows.finish())),
    ];
    ipc_stream(columns)
}

/// The columns as one record batch in an Arrow IPC stream.
fn ipc_stream(columns: Vec<(&str, ArrayRef)>) -> Result<Vec<u8>, ArrowError> {
    let batch = RecordBatch::try_from_iter(columns)?;
    let mut out = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())?;
    writer.write(&batch)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/testdata/pprof/go/go-cpu.pb.gz"
        ))
        .expect("go-cpu.pb.gz");
        let mut profiles = parca_profile::decode(&bytes, &Default::default()).expect("decodes");
        profiles.remove(profiles.len() - 1)
    }

    fn one(p: &Profile) -> Vec<FlameGroup<'_>> {
        vec![FlameGroup {
            labels: Vec::new(),
            profile: p,
        }]
    }

    fn record(bytes: &[u8]) -> RecordBatch {
        let reader = arrow_ipc::reader::StreamReader::try_new(bytes, None).unwrap();
        let mut batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        batches.remove(0)
    }

    #[test]
    fn groups_by_labels_are_label_rows_under_the_root() {
        use arrow_array::cast::AsArray;
        let p = profile();
        let groups = vec![
            FlameGroup {
                labels: vec![Some("api".into())],
                profile: &p,
            },
            FlameGroup {
                labels: vec![None],
                profile: &p,
            },
        ];
        let (bytes, _, _) =
            flamegraph(&groups, &["job".into()], FlameGrouping::default(), 0.0).unwrap();
        let batch = record(&bytes);
        let cumulative = batch
            .column_by_name("cumulative")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>();
        assert_eq!(cumulative.value(0), 2 * p.total());
        let labels_only = batch.column_by_name("labels_only").unwrap().as_boolean();
        let parent = batch
            .column_by_name("parent")
            .unwrap()
            .as_primitive::<Int32Type>();
        // Rows 1 and 2: the two groups' label rows, each with its group's total.
        for row in [1, 2] {
            assert!(labels_only.value(row), "row {row}");
            assert_eq!(parent.value(row), 0);
            assert_eq!(cumulative.value(row), p.total());
        }
        assert!(!labels_only.value(3));
        let job = batch.column_by_name("labels.job").unwrap();
        let job = job.as_dictionary::<Int32Type>();
        let values = job.values().as_binary::<i32>();
        let value = |row: usize| job.key(row).map(|k| values.value(k));
        assert_eq!(value(0), None);
        assert_eq!(value(1), Some(&b"api"[..]));
        assert_eq!(value(2), None);
        // A node row carries its group's labels.
        let first_node_of_api = (3..batch.num_rows())
            .find(|&r| parent.value(r) == 1)
            .unwrap();
        assert_eq!(value(first_node_of_api), Some(&b"api"[..]));
    }

    #[test]
    fn grouping_by_address_keeps_a_functions_call_sites_apart() {
        let p = profile();
        let rows = |grouping| {
            let (bytes, _, _) = flamegraph(&one(&p), &[], grouping, 0.0).unwrap();
            record(&bytes).num_rows()
        };
        let by_function = rows(FlameGrouping::default());
        let by_address = rows(FlameGrouping {
            by_address: true,
            by_binary: false,
        });
        assert!(by_address > by_function, "{by_address} vs {by_function}");
        let by_binary = rows(FlameGrouping {
            by_address: false,
            by_binary: true,
        });
        assert!(by_binary >= by_function);
    }

    #[test]
    fn flame_graph_rows_are_breadth_first_with_their_children() {
        let p = profile();
        let (bytes, height, trimmed) =
            flamegraph(&one(&p), &[], FlameGrouping::default(), 0.0).unwrap();
        assert_eq!(trimmed, 0);
        assert!(height > 10);
        let reader = arrow_ipc::reader::StreamReader::try_new(&bytes[..], None).unwrap();
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        let batch = &batches[0];
        let cumulative = batch
            .column_by_name("cumulative")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        assert_eq!(cumulative.value(0), p.total());
        let parent = batch
            .column_by_name("parent")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int32Array>()
            .unwrap();
        assert_eq!(parent.value(0), -1);
        // Breadth-first: every row's parent comes before it.
        assert!((1..batch.num_rows()).all(|r| (parent.value(r) as usize) < r));
        // A trimmed graph keeps fewer rows and says how much it left out.
        let (_, _, trimmed) = flamegraph(&one(&p), &[], FlameGrouping::default(), 0.05).unwrap();
        assert!(trimmed > 0);
    }

    #[test]
    fn table_rows_are_the_top_tables() {
        let p = profile();
        let bytes = table(&p).unwrap();
        let reader = arrow_ipc::reader::StreamReader::try_new(&bytes[..], None).unwrap();
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(batches[0].num_rows(), TopTable::build(&p).rows.len());
    }
}
