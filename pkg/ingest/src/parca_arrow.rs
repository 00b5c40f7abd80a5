//! Parca Agent's Arrow writes turned into series: `ProfileStoreService.WriteArrow` (schema
//! `v2`: one Arrow IPC stream per report, each row a sample with its stack inline) and the
//! two-phase `Write` stream (schema `v1`: a sample record naming stacks by id, then a record of
//! the stacks the server asked for).
//!
//! The columns are read by name and by what they hold, not by one exact Arrow type: Parca
//! Agent's releases spell the same column as `Utf8`, `Utf8View`, `Binary`, dictionaries of
//! those, or run-end encodings of any of these, and lists as `List` or `ListView`. A column
//! that is missing or of a type that cannot hold what it should is refused with its name;
//! nothing is silently dropped.
//!
//! Each group of rows with one profile type (producer, sample and period types and units,
//! period, delta or not) becomes one pprof whose samples carry the rows' labels; from there it
//! goes the way every pushed pprof goes ([`crate::to_series`]): the labels split it into
//! series. Its time is its earliest row's; its duration spans its rows (at least one row's
//! `duration`). Native frames keep their mapping and address (the agent does not symbolize
//! them); kernel and interpreted frames carry their function names.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;
use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int8Type, Int16Type, Int32Type, Int64Type, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, DictionaryArray, RecordBatch, RunArray, StructArray};
use arrow_schema::{DataType, TimeUnit};
use parca_pprof::{ProfileBuilder, proto};
use parca_tsdb::Labels;

use crate::{Error, Series, to_series};

/// The schema-metadata key that names a record's schema version (`v1`, `v2`).
pub const SCHEMA_VERSION_KEY: &str = "parca_write_schema_version";

/// The prefix of label columns (`labels.comm`).
const LABEL_PREFIX: &str = "labels.";

/// The record batches of an Arrow IPC stream (what Parca Agent sends) or IPC file.
pub fn read_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>, Error> {
    let fault = |e: arrow_schema::ArrowError| arrow_fault(format!("not an Arrow IPC stream: {e}"));
    if bytes.starts_with(b"ARROW1") {
        let reader =
            arrow_ipc::reader::FileReader::try_new(Cursor::new(bytes), None).map_err(fault)?;
        return reader.collect::<Result<_, _>>().map_err(fault);
    }
    let reader =
        arrow_ipc::reader::StreamReader::try_new(Cursor::new(bytes), None).map_err(fault)?;
    reader.collect::<Result<_, _>>().map_err(fault)
}

/// The series of a `WriteArrow` request's IPC buffer (schema `v2`). Nothing is returned
/// unless every row converts.
pub fn write_arrow_series(ipc: &[u8], now_ms: i64) -> Result<Vec<Series>, Error> {
    let mut out = Vec::new();
    for (b, batch) in read_ipc(ipc)?.iter().enumerate() {
        let place = |e: Error| match e {
            Error::Arrow { fault } => arrow_fault(format!("record {b}: {fault}")),
            e => e,
        };
        if schema_version(batch) == Some("v1") {
            return Err(arrow_fault(
                "a `v1` record (stacks named by `stacktrace_id`) is sent with the two-phase \
                 `Write` stream, not with `WriteArrow`"
                    .into(),
            ));
        }
        let columns = SampleColumns::of(batch).map_err(place)?;
        let stacks = columns.inline_stacks().map_err(place)?;
        out.extend(columns.series(&stacks, now_ms).map_err(place)?);
    }
    Ok(out)
}

/// The schema version a record names in its metadata.
pub fn schema_version(batch: &RecordBatch) -> Option<&str> {
    batch
        .schema_ref()
        .metadata()
        .get(SCHEMA_VERSION_KEY)
        .map(String::as_str)
}

/// A `v1` sample record of the `Write` stream, kept while the client sends the stacks it names.
pub struct V1Samples {
    batch: RecordBatch,
}

impl V1Samples {
    /// The sample record of the stream's first message.
    pub fn read(ipc: &[u8]) -> Result<V1Samples, Error> {
        let mut batches = read_ipc(ipc)?;
        if batches.len() != 1 {
            return Err(arrow_fault(format!(
                "the sample record of a `Write` stream is one record batch, not {}",
                batches.len()
            )));
        }
        let batch = batches.remove(0);
        SampleColumns::of(&batch)?.column("stacktrace_id")?;
        Ok(V1Samples { batch })
    }

    /// The distinct stack ids the samples name, in first-seen order: the server keeps no
    /// stacks between requests, so it asks for all of them.
    pub fn stacktrace_ids(&self) -> Result<Vec<Vec<u8>>, Error> {
        let columns = SampleColumns::of(&self.batch)?;
        let ids = columns.column("stacktrace_id")?;
        let mut seen = HashMap::new();
        let mut out = Vec::new();
        for row in 0..self.batch.num_rows() {
            let id = bytes_at(ids, row)
                .map_err(|f| in_column("stacktrace_id", f))?
                .ok_or_else(|| arrow_fault(format!("`stacktrace_id` is null in row {row}")))?;
            if seen.insert(id.clone().into_owned(), ()).is_none() {
                out.push(id.into_owned());
            }
        }
        Ok(out)
    }

    /// The record asking for `ids`: one column `stacktrace_id` of `Binary`, as Parca's server
    /// sends it, in an IPC stream.
    pub fn request_record(ids: &[Vec<u8>]) -> Result<Vec<u8>, Error> {
        use std::sync::Arc;
        let array = arrow_array::BinaryArray::from_iter_values(ids.iter());
        let schema = arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "stacktrace_id",
            DataType::Binary,
            false,
        )]);
        let batch = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(array)])
            .map_err(|e| arrow_fault(e.to_string()))?;
        let mut out = Vec::new();
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())
            .map_err(|e| arrow_fault(e.to_string()))?;
        writer
            .write(&batch)
            .and_then(|()| writer.finish())
            .map_err(|e| arrow_fault(e.to_string()))?;
        drop(writer);
        Ok(out)
    }

    /// The series of the samples, their stacks from the `locations` record (columns
    /// `stacktrace_id` and `locations`, a list of location structs per stack).
    pub fn series(&self, locations_ipc: &[u8], now_ms: i64) -> Result<Vec<Series>, Error> {
        let mut stacks_by_id: HashMap<Vec<u8>, (usize, usize)> = HashMap::new();
        let batches = read_ipc(locations_ipc)?;
        let columns = SampleColumns::of(&self.batch)?;
        for (b, batch) in batches.iter().enumerate() {
            let ids = batch.column_by_name("stacktrace_id").ok_or_else(|| {
                arrow_fault(format!(
                    "locations record {b} has no `stacktrace_id` column"
                ))
            })?;
            for row in 0..batch.num_rows() {
                let id = bytes_at(ids.as_ref(), row)
                    .map_err(|f| in_column("stacktrace_id", f))?
                    .ok_or_else(|| {
                        arrow_fault(format!(
                            "locations record {b}: `stacktrace_id` is null in row {row}"
                        ))
                    })?;
                stacks_by_id.insert(id.into_owned(), (b, row));
            }
        }
        let sample_ids = columns.column("stacktrace_id")?;
        let mut rows = Vec::with_capacity(self.batch.num_rows());
        for row in 0..self.batch.num_rows() {
            let id = bytes_at(sample_ids, row)
                .map_err(|f| in_column("stacktrace_id", f))?
                .unwrap_or_default();
            let &(b, r) = stacks_by_id.get(id.as_ref()).ok_or_else(|| {
                arrow_fault(format!(
                    "row {row} names stack {} that the locations record does not hold",
                    hex(&id)
                ))
            })?;
            let locations = batches[b].column_by_name("locations").ok_or_else(|| {
                arrow_fault(format!("locations record {b} has no `locations` column"))
            })?;
            rows.push(list_at(locations.as_ref(), r).map_err(|f| in_column("locations", f))?);
        }
        columns.series(&Stacks(rows), now_ms)
    }
}

/// A list row: the array of the list's values and the row's range in it.
type ListEntry<'a> = (&'a dyn Array, Range<usize>);

/// A dictionary row: the dictionary's values and the row's key, if not null.
type DictionaryEntry<'a> = (&'a dyn Array, Option<usize>);

/// Each row's stack: its locations, or none.
struct Stacks<'a>(Vec<Option<ListEntry<'a>>>);

/// The columns of a sample record, by role.
struct SampleColumns<'a> {
    batch: &'a RecordBatch,
    labels: Vec<(String, &'a dyn Array)>,
}

impl<'a> SampleColumns<'a> {
    fn of(batch: &'a RecordBatch) -> Result<SampleColumns<'a>, Error> {
        let schema = batch.schema_ref();
        let mut labels = Vec::new();
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            if let Some(name) = field.name().strip_prefix(LABEL_PREFIX) {
                labels.push((name.to_owned(), column.as_ref()));
            } else if field.name() == "labels" {
                // Labels as one struct column, a child per label name.
                let Some(s) = column.as_struct_opt() else {
                    return Err(arrow_fault(format!(
                        "column `labels` is {}, not a struct of label columns",
                        field.data_type()
                    )));
                };
                for (child, name) in s.columns().iter().zip(s.column_names()) {
                    labels.push((name.to_owned(), child.as_ref()));
                }
            }
        }
        Ok(SampleColumns { batch, labels })
    }

    fn column(&self, name: &str) -> Result<&'a dyn Array, Error> {
        self.batch
            .column_by_name(name)
            .map(AsRef::as_ref)
            .ok_or_else(|| arrow_fault(format!("the record has no `{name}` column")))
    }

    /// The rows' stacks from the `stacktrace` column (a list of locations per row).
    fn inline_stacks(&self) -> Result<Stacks<'a>, Error> {
        let column = self.column("stacktrace")?;
        (0..self.batch.num_rows())
            .map(|row| list_at(column, row))
            .collect::<Result<_, _>>()
            .map(Stacks)
            .map_err(|f| in_column("stacktrace", f))
    }

    /// One pprof per profile type, its samples labelled, then series.
    #[expect(
        clippy::too_many_lines,
        reason = "reads Parca's Arrow record column by column as its schema lists them"
    )]
    fn series(&self, stacks: &Stacks<'_>, now_ms: i64) -> Result<Vec<Series>, Error> {
        let value = self.column("value")?;
        let type_columns = [
            "producer",
            "sample_type",
            "sample_unit",
            "period_type",
            "period_unit",
        ]
        .map(|name| self.column(name));
        let [producer, sample_type, sample_unit, period_type, period_unit] = type_columns;
        let (producer, sample_type, sample_unit, period_type, period_unit) = (
            producer?,
            sample_type?,
            sample_unit?,
            period_type?,
            period_unit?,
        );
        let period = self.column("period")?;
        let duration = self.column("duration")?;
        let timestamp = self.column("timestamp")?;
        let mut groups: BTreeMap<GroupKey, Group> = BTreeMap::new();
        for row in 0..self.batch.num_rows() {
            let text = |a: &'a dyn Array, name: &str| -> Result<String, Error> {
                Ok(str_at(a, row)
                    .map_err(|f| in_column(name, f))?
                    .map(Cow::into_owned)
                    .unwrap_or_default())
            };
            let number = |a: &'a dyn Array, name: &str| -> Result<i64, Error> {
                Ok(int_at(a, row).map_err(|f| in_column(name, f))?.unwrap_or(0) as i64)
            };
            let key = GroupKey {
                producer: text(producer, "producer")?,
                sample_type: text(sample_type, "sample_type")?,
                sample_unit: text(sample_unit, "sample_unit")?,
                period_type: text(period_type, "period_type")?,
                period_unit: text(period_unit, "period_unit")?,
                period: number(period, "period")?,
                delta: number(duration, "duration")? != 0,
            };
            if key.producer.is_empty() || key.sample_type.is_empty() {
                return Err(arrow_fault(format!(
                    "row {row} has no `producer` or no `sample_type`: its profile type is unknown"
                )));
            }
            let time_ns = timestamp_ns_at(timestamp, row).map_err(|f| in_column("timestamp", f))?;
            let group = groups.entry(key).or_insert_with(Group::new);
            group.first_ns = group.first_ns.min(time_ns);
            group.last_ns = group.last_ns.max(time_ns);
            group.duration_ns = group.duration_ns.max(number(duration, "duration")?);
            let locations = match &stacks.0[row] {
                Some((values, range)) => group.locations(*values, range.clone())?,
                None => Vec::new(),
            };
            let mut labels = Vec::new();
            for (name, column) in &self.labels {
                let Some(v) = str_at(*column, row).map_err(|f| in_column(name, f))? else {
                    continue;
                };
                if !v.is_empty() {
                    let (key, str) = (group.builder.string(name), group.builder.string(&v));
                    labels.push(proto::Label {
                        key,
                        str,
                        ..Default::default()
                    });
                }
            }
            let v = int_at(value, row)
                .map_err(|f| in_column("value", f))?
                .unwrap_or(0) as i64;
            group.builder.sample(locations, vec![v], labels);
        }
        let mut out = Vec::new();
        for (key, group) in groups {
            let profile = group.finish(&key);
            let pprof = parca_pprof::Pprof::from_proto(&profile)
                .map_err(|e| arrow_fault(format!("not a valid profile: {e}")))?;
            let profiles = parca_profile::from_pprof(&pprof)?;
            out.extend(to_series(
                &key.producer,
                &Labels::default(),
                profiles,
                now_ms,
            )?);
        }
        Ok(out)
    }
}

/// What makes rows one profile.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    producer: String,
    sample_type: String,
    sample_unit: String,
    period_type: String,
    period_unit: String,
    period: i64,
    delta: bool,
}

/// The pprof of one profile type being built.
struct Group {
    builder: ProfileBuilder,
    /// Location ids by (array, index in it): a dictionary's value is converted once.
    location_ids: HashMap<(usize, usize), u64>,
    mapping_ids: HashMap<(String, String), u64>,
    first_ns: i64,
    last_ns: i64,
    duration_ns: i64,
}

impl Group {
    fn new() -> Group {
        Group {
            builder: ProfileBuilder::new(),
            location_ids: HashMap::new(),
            mapping_ids: HashMap::new(),
            first_ns: i64::MAX,
            last_ns: i64::MIN,
            duration_ns: 0,
        }
    }

    /// The pprof location ids of `range` of the location list `values` (leaf first).
    fn locations(&mut self, values: &dyn Array, range: Range<usize>) -> Result<Vec<u64>, Error> {
        let mut out = Vec::with_capacity(range.len());
        for i in range {
            // Locations are dictionary-encoded (v2) or inline structs (v1).
            let (structs, index) =
                match dictionary_at(values, i).map_err(|f| in_column("stacktrace", f))? {
                    Some((structs, Some(k))) => (structs, k),
                    Some((_, None)) => {
                        return Err(arrow_fault("a stack holds a null location".into()));
                    }
                    None => (values, i),
                };
            let cache_key = (std::ptr::from_ref(structs).cast::<()>() as usize, index);
            if let Some(&id) = self.location_ids.get(&cache_key) {
                out.push(id);
                continue;
            }
            let Some(location) = structs.as_struct_opt() else {
                return Err(arrow_fault(format!(
                    "a stack's locations are {}, not structs",
                    structs.data_type()
                )));
            };
            let id = self.location(location, index)?;
            self.location_ids.insert(cache_key, id);
            out.push(id);
        }
        Ok(out)
    }

    fn location(&mut self, location: &StructArray, i: usize) -> Result<u64, Error> {
        let field = |name: &str| location.column_by_name(name).map(AsRef::as_ref);
        let text = |name: &str| -> Result<String, Error> {
            match field(name) {
                None => Ok(String::new()),
                Some(a) => Ok(str_at(a, i)
                    .map_err(|f| in_column(&format!("location.{name}"), f))?
                    .map(Cow::into_owned)
                    .unwrap_or_default()),
            }
        };
        let address = match field("address") {
            Some(a) => int_at(a, i)
                .map_err(|f| in_column("location.address", f))?
                .unwrap_or(0) as u64,
            None => return Err(arrow_fault("locations have no `address`".into())),
        };
        let frame_type = text("frame_type")?;
        let mut file = text("mapping_file")?;
        let build_id = text("mapping_build_id")?;
        if file.is_empty() && frame_type == "kernel" {
            file = "[kernel.kallsyms]".into();
        }
        let mapping_id = if file.is_empty() {
            0
        } else {
            match self.mapping_ids.get(&(file.clone(), build_id.clone())) {
                Some(&id) => id,
                None => {
                    let mapping = proto::Mapping {
                        filename: self.builder.string(&file),
                        build_id: self.builder.string(&build_id),
                        ..Default::default()
                    };
                    let id = self.builder.add_mapping(mapping);
                    self.mapping_ids.insert((file, build_id), id);
                    id
                }
            }
        };
        let mut lines = Vec::new();
        if let Some(list) = field("lines")
            && let Some((values, range)) =
                list_at(list, i).map_err(|f| in_column("location.lines", f))?
        {
            let Some(structs) = values.as_struct_opt() else {
                return Err(arrow_fault(format!(
                    "`lines` holds {}, not line structs",
                    values.data_type()
                )));
            };
            for j in range {
                lines.push(self.line(structs, j)?);
            }
        }
        let id = self.builder.location(mapping_id, address, &lines);
        if mapping_id != 0 && !lines.is_empty() {
            self.builder.mapping_mut(mapping_id).has_functions = true;
        }
        Ok(id)
    }

    /// A line: its number and its function (a nested, maybe dictionary-encoded `function`
    /// struct in v2; flat `function_*` columns in v1).
    fn line(&mut self, line: &StructArray, j: usize) -> Result<(u64, i64), Error> {
        let number = match line.column_by_name("line") {
            Some(a) => int_at(a.as_ref(), j)
                .map_err(|f| in_column("line.line", f))?
                .unwrap_or(0) as i64,
            None => 0,
        };
        let (functions, k, prefix) = match line.column_by_name("function") {
            Some(f) => match dictionary_at(f.as_ref(), j)
                .map_err(|e| in_column("line.function", e))?
            {
                Some((values, Some(k))) => (values, k, ""),
                Some((_, None)) => return Err(arrow_fault("a line has a null function".into())),
                None => (f.as_ref(), j, ""),
            },
            None => (line as &dyn Array, j, "function_"),
        };
        let Some(function) = functions.as_struct_opt() else {
            return Err(arrow_fault(format!(
                "`function` is {}, not a struct",
                functions.data_type()
            )));
        };
        let text = |name: &str| -> Result<String, Error> {
            match function.column_by_name(&format!("{prefix}{name}")) {
                None => Ok(String::new()),
                Some(a) => Ok(str_at(a.as_ref(), k)
                    .map_err(|f| in_column(&format!("function.{name}"), f))?
                    .map(Cow::into_owned)
                    .unwrap_or_default()),
            }
        };
        let system_name = text("system_name")?;
        let name = match text("name")? {
            n if n.is_empty() => system_name.clone(),
            n => n,
        };
        let filename = text("filename")?;
        let start_line = match function.column_by_name(&format!("{prefix}start_line")) {
            Some(a) => int_at(a.as_ref(), k)
                .map_err(|f| in_column("function.start_line", f))?
                .unwrap_or(0) as i64,
            None => 0,
        };
        let id = self
            .builder
            .function(&name, &system_name, &filename, start_line);
        Ok((id, number))
    }

    fn finish(mut self, key: &GroupKey) -> proto::Profile {
        let sample_type = self.builder.value_type(&key.sample_type, &key.sample_unit);
        let period_type = self.builder.value_type(&key.period_type, &key.period_unit);
        let mut profile = self.builder.finish();
        profile.sample_type = vec![sample_type];
        profile.period_type = Some(period_type);
        profile.period = key.period;
        profile.time_nanos = self.first_ns;
        profile.duration_nanos = if key.delta {
            (self.last_ns - self.first_ns).max(self.duration_ns).max(1)
        } else {
            0
        };
        profile
    }
}

/// What is wrong with a value of a column, before the column is named.
type Fault = String;

fn arrow_fault(fault: String) -> Error {
    Error::Arrow { fault }
}

fn in_column(name: &str, fault: Fault) -> Error {
    arrow_fault(format!("column `{name}`: {fault}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn out_of_range(a: &dyn Array, i: usize) -> Fault {
    format!("row {i} is past the end ({} values)", a.len())
}

/// The values and key of row `i` of a dictionary array; `None` when `a` is not one.
fn dictionary_at(a: &dyn Array, i: usize) -> Result<Option<DictionaryEntry<'_>>, Fault> {
    macro_rules! keyed {
        ($($t:ty),*) => {$(
            if let Some(d) = a.as_any().downcast_ref::<DictionaryArray<$t>>() {
                if i >= d.len() {
                    return Err(out_of_range(a, i));
                }
                let key = d.key(i);
                if let Some(k) = key && k >= d.values().len() {
                    return Err(format!("row {i}: dictionary key {k} is past the dictionary's {} values", d.values().len()));
                }
                return Ok(Some((d.values().as_ref(), key)));
            }
        )*};
    }
    keyed!(
        UInt32Type, Int32Type, UInt8Type, Int8Type, UInt16Type, Int16Type, UInt64Type, Int64Type
    );
    Ok(None)
}

/// The values and physical index of row `i` of a run-end encoded array; `None` when `a` is
/// not one.
fn run_at(a: &dyn Array, i: usize) -> Result<Option<(&dyn Array, usize)>, Fault> {
    macro_rules! runs {
        ($($t:ty),*) => {$(
            if let Some(r) = a.as_any().downcast_ref::<RunArray<$t>>() {
                if i >= r.len() {
                    return Err(out_of_range(a, i));
                }
                return Ok(Some((r.values().as_ref(), r.get_physical_index(i))));
            }
        )*};
    }
    runs!(Int32Type, Int16Type, Int64Type);
    Ok(None)
}

/// Row `i` as bytes: any string or binary type, dictionary-encoded or run-end encoded.
fn bytes_at(a: &dyn Array, i: usize) -> Result<Option<Cow<'_, [u8]>>, Fault> {
    if let Some((values, key)) = dictionary_at(a, i)? {
        return key.map_or(Ok(None), |k| bytes_at(values, k));
    }
    if let Some((values, p)) = run_at(a, i)? {
        return bytes_at(values, p);
    }
    if i >= a.len() {
        return Err(out_of_range(a, i));
    }
    if a.is_null(i) {
        return Ok(None);
    }
    let bytes: &[u8] = match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(i).as_bytes(),
        DataType::LargeUtf8 => a.as_string::<i64>().value(i).as_bytes(),
        DataType::Utf8View => a.as_string_view().value(i).as_bytes(),
        DataType::Binary => a.as_binary::<i32>().value(i),
        DataType::LargeBinary => a.as_binary::<i64>().value(i),
        DataType::BinaryView => a.as_binary_view().value(i),
        DataType::FixedSizeBinary(_) => a.as_fixed_size_binary().value(i),
        other => return Err(format!("{other} does not hold strings")),
    };
    Ok(Some(Cow::Borrowed(bytes)))
}

/// Row `i` as text (bytes read as UTF-8, a bad sequence replaced).
fn str_at(a: &dyn Array, i: usize) -> Result<Option<Cow<'_, str>>, Fault> {
    Ok(bytes_at(a, i)?.map(|b| match b {
        Cow::Borrowed(b) => String::from_utf8_lossy(b),
        Cow::Owned(b) => Cow::Owned(String::from_utf8_lossy(&b).into_owned()),
    }))
}

/// Row `i` as an integer: any integer type, a timestamp's raw value, dictionary-encoded or
/// run-end encoded.
fn int_at(a: &dyn Array, i: usize) -> Result<Option<i128>, Fault> {
    if let Some((values, key)) = dictionary_at(a, i)? {
        return key.map_or(Ok(None), |k| int_at(values, k));
    }
    if let Some((values, p)) = run_at(a, i)? {
        return int_at(values, p);
    }
    if i >= a.len() {
        return Err(out_of_range(a, i));
    }
    if a.is_null(i) {
        return Ok(None);
    }
    let v = match a.data_type() {
        DataType::Int8 => a.as_primitive::<Int8Type>().value(i).into(),
        DataType::Int16 => a.as_primitive::<Int16Type>().value(i).into(),
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i).into(),
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i).into(),
        DataType::UInt8 => a.as_primitive::<UInt8Type>().value(i).into(),
        DataType::UInt16 => a.as_primitive::<UInt16Type>().value(i).into(),
        DataType::UInt32 => a.as_primitive::<UInt32Type>().value(i).into(),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i).into(),
        DataType::Timestamp(TimeUnit::Second, _) => {
            a.as_primitive::<TimestampSecondType>().value(i).into()
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            a.as_primitive::<TimestampMillisecondType>().value(i).into()
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            a.as_primitive::<TimestampMicrosecondType>().value(i).into()
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            a.as_primitive::<TimestampNanosecondType>().value(i).into()
        }
        other => return Err(format!("{other} does not hold integers")),
    };
    Ok(Some(v))
}

/// Row `i` of a timestamp column in nanoseconds: an Arrow timestamp of any unit, or an integer
/// (taken as milliseconds, as Parca's `v1` schema sends them).
fn timestamp_ns_at(a: &dyn Array, i: usize) -> Result<i64, Fault> {
    let mut inner = a;
    let mut index = i;
    if let Some((values, p)) = run_at(a, i)? {
        (inner, index) = (values, p);
    }
    let raw = int_at(inner, index)?.ok_or_else(|| format!("row {i} has no timestamp"))? as i64;
    Ok(match inner.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => raw.saturating_mul(1_000_000_000),
        DataType::Timestamp(TimeUnit::Millisecond, _) => raw.saturating_mul(1_000_000),
        DataType::Timestamp(TimeUnit::Microsecond, _) => raw.saturating_mul(1_000),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => raw,
        _ => raw.saturating_mul(1_000_000),
    })
}

/// The values and range of row `i` of a list column (`List`, `LargeList`, `ListView`,
/// `LargeListView`); `None` for a null row.
fn list_at(a: &dyn Array, i: usize) -> Result<Option<ListEntry<'_>>, Fault> {
    if i >= a.len() {
        return Err(out_of_range(a, i));
    }
    if a.is_null(i) {
        return Ok(None);
    }
    let (values, start, len): (&dyn Array, usize, usize) = match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let o = l.value_offsets();
            (
                l.values().as_ref(),
                o[i] as usize,
                (o[i + 1] - o[i]) as usize,
            )
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            let o = l.value_offsets();
            (
                l.values().as_ref(),
                o[i] as usize,
                (o[i + 1] - o[i]) as usize,
            )
        }
        DataType::ListView(_) => {
            let l = a.as_list_view::<i32>();
            (
                l.values().as_ref(),
                l.value_offsets()[i] as usize,
                l.value_sizes()[i] as usize,
            )
        }
        DataType::LargeListView(_) => {
            let l = a.as_list_view::<i64>();
            (
                l.values().as_ref(),
                l.value_offsets()[i] as usize,
                l.value_sizes()[i] as usize,
            )
        }
        other => return Err(format!("{other} is not a list")),
    };
    if start + len > values.len() {
        return Err(format!(
            "row {i}: the list's range {start}..{} is past its {} values",
            start + len,
            values.len()
        ));
    }
    Ok(Some((values, start..start + len)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn ipc(batch: &RecordBatch) -> Vec<u8> {
        let mut out = Vec::new();
        let mut writer =
            arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).expect("writer");
        writer.write(batch).expect("write");
        writer.finish().expect("finish");
        drop(writer);
        out
    }

    fn record(version: &str) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("labels.comm", DataType::Utf8, true),
            Field::new("value", DataType::Int64, false),
        ])
        .with_metadata([(SCHEMA_VERSION_KEY.to_owned(), version.to_owned())].into());
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(vec!["gzip"])),
                Arc::new(Int64Array::from(vec![1])),
            ],
        )
        .expect("record")
    }

    #[test]
    fn faults_name_what_is_wrong() {
        let error = write_arrow_series(b"not arrow", 0).unwrap_err().to_string();
        assert!(error.contains("not an Arrow IPC stream"), "{error}");
        let error = write_arrow_series(&ipc(&record("v2")), 0)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "invalid Arrow write: record 0: the record has no `stacktrace` column"
        );
        let error = write_arrow_series(&ipc(&record("v1")), 0)
            .unwrap_err()
            .to_string();
        assert!(error.contains("two-phase `Write` stream"), "{error}");
    }

    #[test]
    fn values_are_read_through_dictionaries_and_runs() {
        let strings = StringArray::from(vec![Some("a"), None, Some("b")]);
        assert_eq!(str_at(&strings, 0).unwrap().as_deref(), Some("a"));
        assert_eq!(str_at(&strings, 1).unwrap(), None);
        let dictionary: DictionaryArray<UInt32Type> = vec![Some("x"), Some("y"), None, Some("x")]
            .into_iter()
            .collect();
        assert_eq!(str_at(&dictionary, 3).unwrap().as_deref(), Some("x"));
        assert_eq!(str_at(&dictionary, 2).unwrap(), None);
        let runs: RunArray<Int32Type> = vec!["p", "p", "q"].into_iter().collect();
        assert_eq!(str_at(&runs, 1).unwrap().as_deref(), Some("p"));
        assert_eq!(str_at(&runs, 2).unwrap().as_deref(), Some("q"));
        assert!(str_at(&runs, 3).unwrap_err().contains("past the end"));
        let ints = Int64Array::from(vec![7]);
        assert_eq!(int_at(&ints, 0).unwrap(), Some(7));
        assert!(
            int_at(&strings, 0)
                .unwrap_err()
                .contains("does not hold integers")
        );
    }
}
