//! Parca's own API (`parca.query.v1alpha1.QueryService`,
//! `parca.profilestore.v1alpha1.ProfileStoreService`), answered from the same queries and the
//! same write path as our HTTP API, so a number means the same thing in both. The transports
//! (gRPC, gRPC-web, Connect) are in `grpc.rs`; this module maps messages.
//!
//! What Parca's server does and this one does not yet: `SOURCE` and `FLAMECHART` (with its
//! grouping by time). Each is refused as `UNIMPLEMENTED` with a message naming it, never
//! answered with something else.

// Deprecated fields are filled and read on purpose: older clients of Parca still use them.
#![allow(deprecated)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parca_grpc_proto::metastore as pm;
use parca_grpc_proto::profilestore as ps;
use parca_grpc_proto::query as pq;
use parca_grpc_proto::query::query_request::{Mode, Options, ReportType};
use parca_ingest::parca_arrow::V1Samples;
use parca_profile::{DiffMode, FlameGraph, Profile, StackFilter};
use parca_query::InstantQuery;
use parca_tsdb::{Labels, MatchOp, Matcher, NAME_LABEL};
use tonic::{Request, Response, Status};

use crate::Api;
use crate::handlers::ingest;
use crate::handlers::query::{self, Metadata};
use crate::response::ApiError;

/// Our error as a gRPC status: the code from the one mapping, the message as it is.
pub(crate) fn status_of(error: &ApiError) -> Status {
    Status::new(
        tonic::Code::from_i32(error.kind.grpc_code() as i32),
        error.message.clone(),
    )
}

fn from_api(error: ApiError) -> Status {
    status_of(&error)
}

/// Milliseconds since the epoch of a protobuf timestamp.
fn ms_of(t: &prost_types::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(t.nanos) / 1_000_000)
}

fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// `[start, end]` in milliseconds, everything when either is unset (as Parca reads them).
fn window(
    start: &Option<prost_types::Timestamp>,
    end: &Option<prost_types::Timestamp>,
) -> (i64, i64) {
    match (start, end) {
        (Some(s), Some(e)) if ms_of(s) != 0 || ms_of(e) != 0 => (ms_of(s), ms_of(e)),
        _ => (i64::MIN, i64::MAX),
    }
}

fn required<'a>(
    t: &'a Option<prost_types::Timestamp>,
    name: &str,
) -> Result<&'a prost_types::Timestamp, Status> {
    t.as_ref()
        .ok_or_else(|| Status::invalid_argument(format!("`{name}` is required")))
}

/// The selectors of `match` (all series when empty), each narrowed to `profile_type` when given.
fn selectors(match_: &[String], profile_type: Option<&str>) -> Result<Vec<Vec<Matcher>>, Status> {
    let mut selectors = query::selectors_matchers(match_, "match").map_err(from_api)?;
    if selectors.is_empty() {
        selectors.push(Vec::new());
    }
    if let Some(profile_type) = profile_type.filter(|t| !t.is_empty()) {
        let by_type = Matcher::new(MatchOp::Equal, NAME_LABEL, profile_type)
            .map_err(|e| Status::invalid_argument(format!("invalid `profile_type`: {e}")))?;
        for selector in &mut selectors {
            selector.push(by_type.clone());
        }
    }
    Ok(selectors)
}

fn strings_of(value: serde_json::Value) -> Vec<String> {
    serde_json::from_value(value).unwrap_or_default()
}

/// Parca's `LabelSet` of a series: its labels without the profile type (`__name__`).
fn label_set(labels: &Labels) -> ps::LabelSet {
    ps::LabelSet {
        labels: labels
            .iter()
            .filter(|l| l.name != NAME_LABEL)
            .map(|l| ps::Label {
                name: l.name.clone(),
                value: l.value.clone(),
            })
            .collect(),
    }
}

/// `QueryService`, over the store of `api`.
pub(crate) struct ParcaQueries {
    pub(crate) api: Arc<Api>,
}

#[allow(
    clippy::too_many_lines,
    reason = "async_trait reports its methods at the impl: QueryRange reads its parameters, evaluates and answers as its message lists them"
)]
#[tonic::async_trait]
impl pq::query_service_server::QueryService for ParcaQueries {
    async fn query_range(
        &self,
        request: Request<pq::QueryRangeRequest>,
    ) -> Result<Response<pq::QueryRangeResponse>, Status> {
        let r = request.into_inner();
        let start = ms_of(required(&r.start, "start")?);
        let end = ms_of(required(&r.end, "end")?);
        if r.query.is_empty() {
            return Err(Status::invalid_argument("`query` is required"));
        }
        let step_ms = match &r.step {
            Some(d) => d.seconds * 1000 + i64::from(d.nanos) / 1_000_000,
            None => ((end - start) / 300).max(1000),
        };
        // Parca sums a delta type's series into one, or one per `sum_by` group; other types
        // keep one series per label set.
        let is_delta = parca_querylang::ProfileTypeName::parse(selector_name(&r.query))
            .is_ok_and(|t| t.is_delta());
        let text = match (is_delta, r.sum_by.is_empty()) {
            (false, _) => r.query.clone(),
            (true, true) => format!("sum({})", r.query),
            (true, false) => format!("sum by ({}) ({})", r.sum_by.join(", "), r.query),
        };
        let series = query::range_series_of(&self.api, &text, start, end, step_ms)
            .await
            .map_err(from_api)?;
        if series.is_empty() {
            return Err(Status::not_found(
                "No data found for the query, try a different query or time range or no data has been written to be queried yet.",
            ));
        }
        let limit = if r.limit == 0 {
            usize::MAX
        } else {
            r.limit as usize
        };
        let type_name = parca_querylang::ProfileTypeName::parse(selector_name(&r.query)).ok();
        let step_seconds = step_ms as f64 / 1000.0;
        let series = series
            .iter()
            .take(limit)
            .map(|s| {
                let samples = s
                    .points
                    .iter()
                    .map(|p| {
                        let value = p.period_value.unwrap_or(p.value);
                        pq::MetricsSample {
                            timestamp: Some(timestamp(p.timestamp_ms)),
                            value: value.round() as i64,
                            value_per_second: value / step_seconds,
                            duration: step_ms.saturating_mul(1_000_000),
                            count: 0,
                        }
                    })
                    .collect();
                let value_type = |kind: &str, unit: &str| pq::ValueType {
                    r#type: kind.to_owned(),
                    unit: unit.to_owned(),
                };
                let (sample_type, period_type) = match &type_name {
                    // CPU sample counts are shown in the period's unit, as Parca does.
                    Some(t) if s.period_unit.is_some() => (
                        value_type(t.period_type(), t.period_unit()),
                        value_type(t.period_type(), t.period_unit()),
                    ),
                    Some(t) => (
                        value_type(t.sample_type(), t.sample_unit()),
                        value_type(t.period_type(), t.period_unit()),
                    ),
                    None => Default::default(),
                };
                pq::MetricsSeries {
                    labelset: Some(label_set(&s.labels)),
                    samples,
                    period_type: Some(period_type),
                    sample_type: Some(sample_type),
                }
            })
            .collect();
        Ok(Response::new(pq::QueryRangeResponse { series }))
    }

    async fn query(
        &self,
        request: Request<pq::QueryRequest>,
    ) -> Result<Response<pq::QueryResponse>, Status> {
        let r = request.into_inner();
        let report = ReportType::try_from(r.report_type).map_err(|_| {
            Status::invalid_argument(format!("unknown report type {}", r.report_type))
        })?;
        let group_by = GroupBy::of(&r)?;
        if report == ReportType::ProfileMetadata {
            return self.profile_metadata(&r).await.map(Response::new);
        }
        // Grouping by labels is a flame-graph matter (as in Parca): a node per label set under
        // the root, for a merge.
        let groups = match (&r.options, report) {
            (Some(Options::Merge(m)), ReportType::FlamegraphArrow)
                if !group_by.labels.is_empty() && r.mode == Mode::Merge as i32 =>
            {
                self.label_groups(m, &group_by.labels).await?
            }
            _ => vec![(Vec::new(), self.selected_profile(&r).await?)],
        };
        let mut before = 0i64;
        let mut shaped = Vec::with_capacity(groups.len());
        for (labels, profile) in groups {
            before += profile.total();
            shaped.push((labels, shape(&r, profile)?));
        }
        let total: i64 = shaped.iter().map(|(_, p)| p.total()).sum();
        let filtered = before - total;
        // One group unless grouped by labels (then only the Arrow flame graph reads them all).
        let profile: &Profile = &shaped[0].1;
        let trim = f64::from(r.node_trim_threshold.unwrap_or(0.0)).max(0.0) / 100.0;
        let (report, total) = match report {
            ReportType::Pprof => {
                let bytes = parca_pprof::encode(&parca_profile::to_pprof(profile), true);
                (pq::query_response::Report::Pprof(bytes), 0)
            }
            ReportType::Top => (pq::query_response::Report::Top(top(profile)), total),
            ReportType::FlamegraphTable | ReportType::FlamegraphUnspecified => (
                pq::query_response::Report::Flamegraph(flamegraph_table(profile, trim)),
                total,
            ),
            ReportType::FlamegraphArrow => {
                let groups: Vec<crate::protocols::parca_arrow::FlameGroup<'_>> = shaped
                    .iter()
                    .map(
                        |(labels, profile)| crate::protocols::parca_arrow::FlameGroup {
                            labels: labels.clone(),
                            profile,
                        },
                    )
                    .collect();
                let (record, height, trimmed) = crate::protocols::parca_arrow::flamegraph(
                    &groups,
                    &group_by.labels,
                    group_by.frames,
                    trim,
                )
                .map_err(|e| Status::internal(format!("cannot write the Arrow record: {e}")))?;
                let report = pq::FlamegraphArrow {
                    record,
                    unit: profile.meta.sample_type.unit.clone(),
                    height,
                    trimmed,
                };
                (pq::query_response::Report::FlamegraphArrow(report), total)
            }
            ReportType::Callgraph => (
                pq::query_response::Report::Callgraph(callgraph(profile)),
                total,
            ),
            ReportType::TableArrow => {
                let record = crate::protocols::parca_arrow::table(profile)
                    .map_err(|e| Status::internal(format!("cannot write the Arrow record: {e}")))?;
                let report = pq::TableArrow {
                    record,
                    unit: profile.meta.sample_type.unit.clone(),
                };
                (pq::query_response::Report::TableArrow(report), total)
            }
            other => {
                return Err(Status::unimplemented(format!(
                    "report type {} is not served by this server yet; it serves \
                     REPORT_TYPE_PPROF, REPORT_TYPE_TOP, REPORT_TYPE_FLAMEGRAPH_TABLE, \
                     REPORT_TYPE_FLAMEGRAPH_ARROW, REPORT_TYPE_TABLE_ARROW, \
                     REPORT_TYPE_CALLGRAPH and REPORT_TYPE_PROFILE_METADATA",
                    other.as_str_name()
                )));
            }
        };
        Ok(Response::new(pq::QueryResponse {
            report: Some(report),
            total,
            filtered,
        }))
    }

    async fn series(
        &self,
        _request: Request<pq::SeriesRequest>,
    ) -> Result<Response<pq::SeriesResponse>, Status> {
        Err(Status::unimplemented(
            "Series is unimplemented in Parca's API too; ask /api/v1/series",
        ))
    }

    async fn profile_types(
        &self,
        request: Request<pq::ProfileTypesRequest>,
    ) -> Result<Response<pq::ProfileTypesResponse>, Status> {
        let r = request.into_inner();
        let (start, end) = window(&r.start, &r.end);
        let types = query::profile_types_between(&self.api, start, end)
            .await
            .map_err(from_api)?
            .into_iter()
            .map(|t| pq::ProfileType {
                name: t.name,
                sample_type: t.sample_type,
                sample_unit: t.sample_unit,
                period_type: t.period_type,
                period_unit: t.period_unit,
                delta: t.delta,
            })
            .collect();
        Ok(Response::new(pq::ProfileTypesResponse { types }))
    }

    async fn labels(
        &self,
        request: Request<pq::LabelsRequest>,
    ) -> Result<Response<pq::LabelsResponse>, Status> {
        let r = request.into_inner();
        let (start, end) = window(&r.start, &r.end);
        let selectors = selectors(&r.r#match, r.profile_type.as_deref())?;
        let names = query::metadata_between(&self.api, start, end, selectors, Metadata::Names)
            .await
            .map_err(from_api)?;
        let label_names = strings_of(names)
            .into_iter()
            .filter(|n| n != NAME_LABEL)
            .collect();
        Ok(Response::new(pq::LabelsResponse {
            label_names,
            warnings: Vec::new(),
        }))
    }

    async fn values(
        &self,
        request: Request<pq::ValuesRequest>,
    ) -> Result<Response<pq::ValuesResponse>, Status> {
        let r = request.into_inner();
        let (start, end) = window(&r.start, &r.end);
        let selectors = selectors(&r.r#match, r.profile_type.as_deref())?;
        let values = query::metadata_between(
            &self.api,
            start,
            end,
            selectors,
            Metadata::Values(r.label_name),
        )
        .await
        .map_err(from_api)?;
        Ok(Response::new(pq::ValuesResponse {
            label_values: strings_of(values),
            warnings: Vec::new(),
        }))
    }

    async fn share_profile(
        &self,
        _request: Request<pq::ShareProfileRequest>,
    ) -> Result<Response<pq::ShareProfileResponse>, Status> {
        Err(Status::unimplemented(
            "sharing profiles to pprof.me is not offered by this server",
        ))
    }

    async fn has_profile_data(
        &self,
        _request: Request<pq::HasProfileDataRequest>,
    ) -> Result<Response<pq::HasProfileDataResponse>, Status> {
        let types = query::profile_types_between(&self.api, i64::MIN, i64::MAX)
            .await
            .map_err(from_api)?;
        Ok(Response::new(pq::HasProfileDataResponse {
            has_data: !types.is_empty(),
        }))
    }
}

impl ParcaQueries {
    /// The profile a query selects: one instant, a merge over a window, or the diff of two
    /// such selections (B against A, scaled to the same total unless `absolute`).
    async fn selected_profile(&self, r: &pq::QueryRequest) -> Result<Profile, Status> {
        let mode = Mode::try_from(r.mode)
            .map_err(|_| Status::invalid_argument(format!("unknown mode {}", r.mode)))?;
        match (mode, &r.options) {
            (Mode::SingleUnspecified, Some(Options::Single(s))) => self.single(s).await,
            (Mode::Merge, Some(Options::Merge(m))) => self.merge(m).await,
            (Mode::Diff, Some(Options::Diff(d))) => {
                let side = |s: &Option<pq::ProfileDiffSelection>, name: &str| {
                    s.clone().ok_or_else(|| {
                        Status::invalid_argument(format!("the diff's `{name}` is required"))
                    })
                };
                let a = self.diff_side(&side(&d.a, "a")?).await?;
                let b = self.diff_side(&side(&d.b, "b")?).await?;
                let diff = parca_profile::diff(&a, &b)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                let mode = if d.absolute.unwrap_or(false) {
                    DiffMode::Absolute
                } else {
                    DiffMode::Relative
                };
                Ok(parca_profile::apply_diff_mode(diff, mode))
            }
            (mode, _) => Err(Status::invalid_argument(format!(
                "mode {} needs its options (`single`, `merge` or `diff`) set to match",
                mode.as_str_name()
            ))),
        }
    }

    async fn single(&self, s: &pq::SingleProfile) -> Result<Profile, Status> {
        let time = ms_of(required(&s.time, "single.time")?);
        query::one_profile(&self.api, &s.query, InstantQuery::at(time))
            .await
            .map_err(from_api)
    }

    async fn merge(&self, m: &pq::MergeProfile) -> Result<Profile, Status> {
        let start = ms_of(required(&m.start, "merge.start")?);
        let end = ms_of(required(&m.end, "merge.end")?);
        if end <= start {
            return Err(Status::invalid_argument(
                "`merge.end` must be after `merge.start`",
            ));
        }
        query::one_profile(&self.api, &m.query, InstantQuery::over(start, end))
            .await
            .map_err(from_api)
    }

    /// The merge of `m` split by the values of `labels`: each group's values (in the order of
    /// `labels`, `None` where a group has no such label) and profile.
    async fn label_groups(
        &self,
        m: &pq::MergeProfile,
        labels: &[String],
    ) -> Result<Vec<(Vec<Option<String>>, Profile)>, Status> {
        let start = ms_of(required(&m.start, "merge.start")?);
        let end = ms_of(required(&m.end, "merge.end")?);
        let text = format!("merge by ({}) ({})", labels.join(", "), m.query);
        let groups = query::profile_groups(&self.api, &text, InstantQuery::over(start, end))
            .await
            .map_err(from_api)?;
        if groups.is_empty() {
            return Err(Status::not_found(
                "no profiles match the query in this time range",
            ));
        }
        Ok(groups
            .into_iter()
            .map(|g| {
                let values = labels
                    .iter()
                    .map(|l| g.labels.get(l).map(str::to_owned))
                    .collect();
                (values, g.profile)
            })
            .collect())
    }

    async fn diff_side(&self, side: &pq::ProfileDiffSelection) -> Result<Profile, Status> {
        use pq::profile_diff_selection::{Mode as SideMode, Options as SideOptions};
        match (SideMode::try_from(side.mode), &side.options) {
            (Ok(SideMode::SingleUnspecified), Some(SideOptions::Single(s))) => self.single(s).await,
            (Ok(SideMode::Merge), Some(SideOptions::Merge(m))) => self.merge(m).await,
            _ => Err(Status::invalid_argument(
                "each side of a diff needs its mode and the matching `single` or `merge`",
            )),
        }
    }

    /// `PROFILE_METADATA`: the object files of the profile and the label names of its series.
    async fn profile_metadata(&self, r: &pq::QueryRequest) -> Result<pq::QueryResponse, Status> {
        let merge = match (&r.options, Mode::try_from(r.mode)) {
            (Some(Options::Merge(m)), Ok(Mode::Merge)) => m.clone(),
            (Some(Options::Diff(d)), Ok(Mode::Diff)) => {
                match d.b.as_ref().and_then(|b| b.options.clone()) {
                    Some(pq::profile_diff_selection::Options::Merge(m)) => m,
                    _ => {
                        return Err(Status::invalid_argument(
                            "PROFILE_METADATA of a diff needs a merge as its `b`",
                        ));
                    }
                }
            }
            _ => {
                return Err(Status::invalid_argument(
                    "PROFILE_METADATA needs MODE_MERGE (or a diff whose `b` is a merge)",
                ));
            }
        };
        let profile = self.merge(&merge).await?;
        let tables = &profile.tables;
        let mapping_files: BTreeSet<String> = (0..tables.n_mappings())
            .map(|i| {
                let file = tables
                    .mapping(parca_profile::tables::MappingId(i as u32))
                    .file;
                tables.string(file).to_owned()
            })
            .filter(|f| !f.is_empty())
            .collect();
        let (start, end) = (
            ms_of(required(&merge.start, "merge.start")?),
            ms_of(required(&merge.end, "merge.end")?),
        );
        let selector = selectors(std::slice::from_ref(&merge.query), None)?;
        let names = query::metadata_between(&self.api, start, end, selector, Metadata::Names)
            .await
            .map_err(from_api)?;
        Ok(pq::QueryResponse {
            report: Some(pq::query_response::Report::ProfileMetadata(
                pq::ProfileMetadata {
                    mapping_files: mapping_files.into_iter().collect(),
                    labels: strings_of(names)
                        .into_iter()
                        .filter(|n| n != NAME_LABEL)
                        .collect(),
                },
            )),
            total: 0,
            filtered: 0,
        })
    }
}

/// The profile-type name of a selector text (`process_cpu:…:delta{job="a"}` → the part before
/// `{`).
fn selector_name(query: &str) -> &str {
    query.split('{').next().unwrap_or("").trim()
}

/// The frames a request's frame filters keep, as a hider of the others: Parca's binary filter
/// (`include_binaries`: those object files' frames) and its criteria (a frame is kept when it
/// passes every condition of every frame filter).
fn frame_hider(r: &pq::QueryRequest) -> Result<Option<parca_profile::FrameHider>, Status> {
    use pq::frame_filter::Filter as Ff;
    let mut binaries: Option<Vec<String>> = None;
    let mut tests = Vec::new();
    for filter in &r.filter {
        let Some(pq::filter::Filter::FrameFilter(frame)) = &filter.filter else {
            continue;
        };
        match &frame.filter {
            Some(Ff::BinaryFrameFilter(b)) => {
                // Several filters: a frame passes each of them.
                let names = b.include_binaries.clone();
                binaries = Some(match binaries {
                    None => names,
                    Some(kept) => kept.into_iter().filter(|b| names.contains(b)).collect(),
                });
            }
            Some(Ff::Criteria(c)) => tests.extend(criteria_tests(c)),
            None => {
                return Err(Status::invalid_argument(
                    "a frame filter without its criteria",
                ));
            }
        }
    }
    if binaries.is_none() && tests.is_empty() {
        return Ok(None);
    }
    let mut hider = parca_profile::FrameHider::default().keeping_frames(tests);
    if let Some(binaries) = binaries {
        hider = hider.keeping_only_binaries(binaries);
    }
    Ok(Some(hider))
}

/// The conditions of Parca's filter criteria as frame tests (text compared without regard to
/// case, as Parca compares).
fn criteria_tests(c: &pq::FilterCriteria) -> Vec<parca_profile::FrameTest> {
    use parca_profile::{FrameTest, NumberField, TextField, TextOp};
    use pq::number_condition::Condition as N;
    use pq::string_condition::Condition as C;
    let text = |field, condition: &Option<pq::StringCondition>| {
        let (op, value) = match condition.as_ref()?.condition.as_ref()? {
            C::Equal(v) => (TextOp::Equal, v),
            C::NotEqual(v) => (TextOp::NotEqual, v),
            C::Contains(v) => (TextOp::Contains, v),
            C::NotContains(v) => (TextOp::NotContains, v),
            C::StartsWith(v) => (TextOp::StartsWith, v),
            C::NotStartsWith(v) => (TextOp::NotStartsWith, v),
        };
        Some(FrameTest::text(field, op, value))
    };
    let number = |field, condition: &Option<pq::NumberCondition>| {
        let (equal, value) = match condition.as_ref()?.condition.as_ref()? {
            N::Equal(v) => (true, *v),
            N::NotEqual(v) => (false, *v),
        };
        Some(FrameTest::Number {
            field,
            equal,
            value,
        })
    };
    [
        text(TextField::FunctionName, &c.function_name),
        text(TextField::SystemName, &c.system_name),
        text(TextField::Binary, &c.binary),
        text(TextField::Filename, &c.filename),
        number(NumberField::Address, &c.address),
        number(NumberField::LineNumber, &c.line_number),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A request's `group_by`, as Parca reads it: label names (`labels.<name>`) and what keeps
/// function frames apart besides their function (`location_address`, `mapping_file`).
/// `function_name` is the default and `function_file_name` is always applied (a function here
/// is its name and file). A field Parca does not know is refused, as Parca refuses it.
struct GroupBy {
    labels: Vec<String>,
    frames: parca_profile::FlameGrouping,
}

impl GroupBy {
    fn of(r: &pq::QueryRequest) -> Result<GroupBy, Status> {
        let mut out = GroupBy {
            labels: Vec::new(),
            frames: parca_profile::FlameGrouping::default(),
        };
        for field in r.group_by.iter().flat_map(|g| &g.fields) {
            match field.as_str() {
                "function_name" | "function_file_name" => {}
                "location_address" => out.frames.by_address = true,
                "mapping_file" => out.frames.by_binary = true,
                "timestamp" | "time_nanos" | "duration" => {
                    return Err(Status::unimplemented(format!(
                        "grouping by `{field}` (the flame chart's) is not served yet"
                    )));
                }
                other => match other.strip_prefix("labels.") {
                    Some(name) if !name.is_empty() => out.labels.push(name.to_owned()),
                    _ => {
                        return Err(Status::invalid_argument(format!(
                            "invalid group by field: {other} (function_name, \
                             function_file_name, location_address, mapping_file or \
                             labels.<name>)"
                        )));
                    }
                },
            }
        }
        Ok(out)
    }
}

/// A profile as the request shapes it: its stack and frame filters applied, its stacks
/// inverted when asked.
fn shape(r: &pq::QueryRequest, profile: Profile) -> Result<Profile, Status> {
    let filters = stack_filters(r)?;
    let profile = if filters.is_empty() {
        profile
    } else {
        parca_profile::filter_stacks(&profile, &filters)
    };
    let profile = match frame_hider(r)? {
        Some(hider) => hider.apply(&profile),
        None => profile,
    };
    Ok(if r.invert_call_stack == Some(true) {
        parca_profile::invert_stacks(&profile)
    } else {
        profile
    })
}

/// The stack filters of a request (`filter`, `sandwich_by_function` and the deprecated
/// `filter_query`), as ours: each condition of a criteria is a filter of its own (all must
/// pass), compared without regard to ASCII case as Parca compares.
fn stack_filters(r: &pq::QueryRequest) -> Result<Vec<StackFilter>, Status> {
    use pq::filter::Filter as F;
    use pq::stack_filter::Filter as Sf;
    let mut out = Vec::new();
    if let Some(text) = r.filter_query.as_deref().filter(|t| !t.is_empty()) {
        out.push(insensitive(&format!(".*{}.*", regex_escape(text)), true)?);
    }
    // The sandwich view: the stacks through one function, as Parca selects them.
    if let Some(function) = r.sandwich_by_function.as_deref().filter(|f| !f.is_empty()) {
        out.push(insensitive(
            &format!(".*{}.*", regex_escape(function)),
            true,
        )?);
    }
    for filter in &r.filter {
        let criteria = match &filter.filter {
            Some(F::StackFilter(pq::StackFilter {
                filter: Some(Sf::Criteria(c)),
            })) => c,
            Some(F::StackFilter(pq::StackFilter {
                filter: Some(Sf::FunctionNameStackFilter(f)),
            })) => {
                let pattern = format!(".*{}.*", regex_escape(&f.function_to_filter));
                out.push(insensitive(&pattern, !f.exclude)?);
                continue;
            }
            Some(F::FrameFilter(_)) => continue,
            _ => return Err(Status::invalid_argument("a filter without its criteria")),
        };
        out.extend(
            criteria_tests(criteria)
                .into_iter()
                .map(StackFilter::frames),
        );
    }
    Ok(out)
}

fn insensitive(pattern: &str, keep: bool) -> Result<StackFilter, Status> {
    let pattern = format!("(?i:{pattern})");
    if keep {
        StackFilter::matches(&pattern)
    } else {
        StackFilter::not_matches(&pattern)
    }
    .map_err(|e| Status::invalid_argument(e.to_string()))
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `TOP`: one row per function, largest flat first (our top table).
fn top(profile: &Profile) -> pq::Top {
    let table = parca_profile::TopTable::build(profile);
    let list: Vec<pq::TopNode> = table
        .rows
        .iter()
        .map(|row| pq::TopNode {
            meta: Some(pq::TopNodeMeta {
                function: Some(pm::Function {
                    name: row.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            cumulative: row.cum,
            flat: row.flat,
            diff: row.base_cum.map_or(0, |base| row.cum - base),
        })
        .collect();
    pq::Top {
        reported: list.len() as i32,
        list,
        total: i32::try_from(profile.total()).unwrap_or(i32::MAX),
        unit: profile.meta.sample_type.unit.clone(),
    }
}

/// `CALLGRAPH`: our call graph (`parca_profile::CallGraph`, the one `format=callgraph`
/// serves): one node per function with its flat and cumulative values, one edge per caller and
/// callee with the value of the samples making that call, counted once per sample as pprof
/// counts it (recursion included).
fn callgraph(profile: &Profile) -> pq::Callgraph {
    let graph = parca_profile::CallGraph::build(profile);
    let nodes = graph
        .nodes
        .iter()
        .map(|node| pq::CallgraphNode {
            id: node.name.clone(),
            meta: Some(pq::CallgraphNodeMeta {
                function: Some(pm::Function {
                    name: node.name.clone(),
                    filename: node.file.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            cumulative: node.cum,
            flat: node.flat,
        })
        .collect();
    let edges = graph
        .edges
        .iter()
        .map(|edge| {
            let source = graph.nodes[edge.from as usize].name.clone();
            let target = graph.nodes[edge.to as usize].name.clone();
            pq::CallgraphEdge {
                id: format!("{source} -> {target}"),
                source,
                target,
                cumulative: edge.value,
                is_collapsed: edge.residual,
            }
        })
        .collect();
    pq::Callgraph {
        nodes,
        edges,
        cumulative: graph.total,
    }
}

/// `FLAMEGRAPH_TABLE`: the call tree with its functions, mappings and locations in tables
/// (1-based indexes, strings in `string_table`), nodes smaller than `trim` of the total left
/// out and their value counted in `trimmed`.
fn flamegraph_table(profile: &Profile, trim: f64) -> pq::Flamegraph {
    let graph = FlameGraph::build(profile);
    let total = graph.total();
    let is_diff = profile.is_diff();
    let threshold = (total.unsigned_abs() as f64 * trim) as u64;
    let mut tables = FlameTables::default();
    // Nodes in breadth-first order, each with its depth; built from the leaves up, so deep
    // trees need no recursion.
    let mut order = vec![(0u32, 0usize)];
    let mut trimmed = 0i64;
    let mut i = 0;
    while i < order.len() {
        let (node, depth) = order[i];
        for &child in graph.node(node).children {
            if graph.node(child).total.unsigned_abs() < threshold {
                trimmed += graph.node(child).total;
            } else {
                order.push((child, depth + 1));
            }
        }
        i += 1;
    }
    let height = order.iter().map(|&(_, d)| d).max().unwrap_or(0) as i32 + 1;
    let mut built: HashMap<u32, pq::FlamegraphNode> = HashMap::new();
    for &(index, _) in order.iter().skip(1).rev() {
        let node = graph.node(index);
        let children = node
            .children
            .iter()
            .filter_map(|c| built.remove(c))
            .collect();
        let meta = pq::FlamegraphNodeMeta {
            location_index: tables.location(&node),
            line_index: 0,
            ..Default::default()
        };
        built.insert(
            index,
            pq::FlamegraphNode {
                meta: Some(meta),
                cumulative: node.total,
                diff: if is_diff {
                    node.total - node.base_total
                } else {
                    0
                },
                children,
            },
        );
    }
    let root = graph.node(0);
    let root = pq::FlamegraphRootNode {
        cumulative: root.total,
        diff: if is_diff {
            root.total - root.base_total
        } else {
            0
        },
        children: root
            .children
            .iter()
            .filter_map(|c| built.remove(c))
            .collect(),
    };
    pq::Flamegraph {
        root: Some(root),
        total,
        unit: profile.meta.sample_type.unit.clone(),
        height,
        string_table: tables.strings,
        locations: tables.locations,
        mapping: tables.mappings,
        function: tables.functions,
        untrimmed_total: total,
        trimmed,
    }
}

/// The deduplicated tables of a flame-graph table; indexes into them are 1-based (0: none).
#[derive(Default)]
struct FlameTables {
    strings: Vec<String>,
    string_index: HashMap<String, u32>,
    functions: Vec<pm::Function>,
    function_index: HashMap<(u32, u32, u32), u32>,
    mappings: Vec<pm::Mapping>,
    mapping_index: HashMap<(u32, u32), u32>,
    locations: Vec<pm::Location>,
    location_index: HashMap<(u32, u64, u32, i64), u32>,
}

impl FlameTables {
    fn string(&mut self, s: &str) -> u32 {
        if self.strings.is_empty() {
            self.strings.push(String::new());
            self.string_index.insert(String::new(), 0);
        }
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.string_index.insert(s.to_owned(), i);
        i
    }

    /// The location of a node: its function and line, or its address in its object.
    fn location(&mut self, node: &parca_profile::FlameNode<'_>) -> u32 {
        let t = node.tables;
        let (function, address, mapping) = match (node.function, node.location) {
            (Some(f), _) => {
                let key = (
                    self.string(t.string(f.name)),
                    self.string(t.string(f.system_name)),
                    self.string(t.string(f.filename)),
                );
                let next = self.functions.len() as u32 + 1;
                let index = *self.function_index.entry(key).or_insert(next);
                if index == next {
                    self.functions.push(pm::Function {
                        start_line: f.start_line,
                        name_string_index: key.0,
                        system_name_string_index: key.1,
                        filename_string_index: key.2,
                        ..Default::default()
                    });
                }
                (index, 0, 0)
            }
            (None, Some(location)) => {
                let mapping = match location.mapping {
                    Some(m) => {
                        let m = t.mapping(m);
                        let key = (
                            self.string(t.string(m.file)),
                            self.string(t.string(m.build_id)),
                        );
                        let next = self.mappings.len() as u32 + 1;
                        let index = *self.mapping_index.entry(key).or_insert(next);
                        if index == next {
                            self.mappings.push(pm::Mapping {
                                start: m.memory_start,
                                limit: m.memory_limit,
                                offset: m.file_offset,
                                file_string_index: key.0,
                                build_id_string_index: key.1,
                                ..Default::default()
                            });
                        }
                        index
                    }
                    None => 0,
                };
                (0, location.address, mapping)
            }
            (None, None) => (0, 0, 0),
        };
        let key = (function, address, mapping, node.line);
        let next = self.locations.len() as u32 + 1;
        let index = *self.location_index.entry(key).or_insert(next);
        if index == next {
            self.locations.push(pm::Location {
                address,
                mapping_index: mapping,
                lines: if function == 0 {
                    Vec::new()
                } else {
                    vec![pm::Line {
                        line: node.line,
                        function_index: function,
                        ..Default::default()
                    }]
                },
                ..Default::default()
            });
        }
        index
    }
}

/// `ProfileStoreService`: `WriteRaw` stores what `/api/v1/write` stores; `WriteArrow` and
/// `Write` take Parca Agent's Arrow records (`parca_ingest::parca_arrow`).
pub(crate) struct ParcaProfileStore {
    pub(crate) api: Arc<Api>,
}

#[tonic::async_trait]
impl ps::profile_store_service_server::ProfileStoreService for ParcaProfileStore {
    async fn write_raw(
        &self,
        request: Request<ps::WriteRawRequest>,
    ) -> Result<Response<ps::WriteRawResponse>, Status> {
        let r = request.into_inner();
        let mut batch = Vec::new();
        for (i, series) in r.series.iter().enumerate() {
            let pairs: Vec<(&str, &str)> = series
                .labels
                .iter()
                .flat_map(|set| &set.labels)
                .map(|l| (l.name.as_str(), l.value.as_str()))
                .collect();
            let name = pairs
                .iter()
                .find(|(k, _)| *k == NAME_LABEL)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "series {i}: its labels have no `__name__` (the profile name, such as \
                         `memory` or `process_cpu`)"
                    ))
                })?;
            let labels = Labels::new(pairs.iter().copied().filter(|(k, _)| *k != NAME_LABEL))
                .map_err(|e| {
                    Status::invalid_argument(format!("series {i}: invalid labels: {e}"))
                })?;
            for (j, sample) in series.samples.iter().enumerate() {
                let profiles = (self.api.decoders)
                    .decode(&sample.raw_profile, &self.api.options.decode)
                    .map_err(|e| {
                        Status::invalid_argument(format!(
                            "series {i}, sample {j}: invalid pprof: {e}"
                        ))
                    })?;
                batch.extend(
                    parca_ingest::to_series(name, &labels, profiles, crate::clock::now_ms())
                        .map_err(|e| {
                            Status::invalid_argument(format!("series {i}, sample {j}: {e}"))
                        })?,
                );
            }
        }
        store(&self.api, "parca_write_raw", batch).await?;
        Ok(Response::new(ps::WriteRawResponse {}))
    }

    type WriteStream = std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<ps::WriteResponse, Status>> + Send>,
    >;

    /// The two-phase `v1` stream: a sample record naming stacks by id; the answer asks for
    /// every id (this server keeps no stacks between requests); the client sends their
    /// locations; the samples are stored and the stream ends.
    async fn write(
        &self,
        request: Request<tonic::Streaming<ps::WriteRequest>>,
    ) -> Result<Response<Self::WriteStream>, Status> {
        let mut inbound = request.into_inner();
        let api = Arc::clone(&self.api);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<ps::WriteResponse, Status>>(2);
        tokio::spawn(async move {
            let exchange = async {
                let first = inbound.message().await?.ok_or_else(|| {
                    Status::invalid_argument("the Write stream ended before its sample record")
                })?;
                let (samples, wanted) = blocking(move || {
                    let samples = V1Samples::read(&first.record)?;
                    let ids = samples.stacktrace_ids()?;
                    let wanted = if ids.is_empty() {
                        Vec::new()
                    } else {
                        V1Samples::request_record(&ids)?
                    };
                    Ok((samples, wanted))
                })
                .await?;
                if wanted.is_empty() {
                    return Ok(());
                }
                tx.send(Ok(ps::WriteResponse { record: wanted }))
                    .await
                    .map_err(|_| Status::cancelled("the client left the Write stream"))?;
                let second = inbound.message().await?.ok_or_else(|| {
                    Status::invalid_argument(
                        "the Write stream ended before the locations of the stacks it was asked for",
                    )
                })?;
                let batch =
                    blocking(move || samples.series(&second.record, crate::clock::now_ms()))
                        .await?;
                store(&api, "parca_write", batch).await
            };
            if let Err(status) = exchange.await {
                let _ = tx.send(Err(status)).await;
            }
        });
        let answers = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|answer| (answer, rx))
        });
        Ok(Response::new(Box::pin(answers)))
    }

    /// Parca Agent's report (schema `v2`): one Arrow IPC stream, each row a sample.
    async fn write_arrow(
        &self,
        request: Request<ps::WriteArrowRequest>,
    ) -> Result<Response<ps::WriteArrowResponse>, Status> {
        let ipc = request.into_inner().ipc_buffer;
        let batch = blocking(move || {
            parca_ingest::parca_arrow::write_arrow_series(&ipc, crate::clock::now_ms())
        })
        .await?;
        store(&self.api, "parca_write_arrow", batch).await?;
        Ok(Response::new(ps::WriteArrowResponse {}))
    }
}

/// Runs a conversion off the async workers; a fault in what was sent is `INVALID_ARGUMENT`.
async fn blocking<T: Send + 'static>(
    convert: impl FnOnce() -> Result<T, parca_ingest::Error> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(convert)
        .await
        .map_err(|e| Status::internal(format!("the conversion task failed: {e}")))?
        .map_err(|e| Status::invalid_argument(e.to_string()))
}

/// Stores `batch` as `/api/v1/write` stores a push; a write of which nothing was stored is an
/// error naming why.
async fn store(
    api: &Arc<Api>,
    source: &'static str,
    batch: Vec<parca_ingest::Series>,
) -> Result<(), Status> {
    let outcome = ingest::write_batch(api, source, batch)
        .await
        .map_err(from_api)?;
    if outcome.n_written == 0 && !outcome.refused.is_empty() {
        let refused: Vec<String> = outcome.refused.iter().map(ToString::to_string).collect();
        return Err(Status::invalid_argument(format!(
            "profile refused: {}",
            refused.join("; ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_through_milliseconds() {
        for ms in [0, 1_700_000_000_123, -1500] {
            assert_eq!(ms_of(&timestamp(ms)), ms);
        }
        assert_eq!(window(&None, &None), (i64::MIN, i64::MAX));
    }

    #[test]
    fn selector_names_and_escaped_patterns() {
        assert_eq!(
            selector_name("process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job=\"a\"}"),
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"
        );
        assert_eq!(regex_escape("a.b(c)"), "a\\.b\\(c\\)");
    }
}
