//! What range evaluation answers: series of numbers at steps, and the steps asked for.

use parca_tsdb::Labels;

/// The steps of a range query: `start`, `start + step`, … up to `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeQuery {
    /// First step, milliseconds since the epoch.
    pub start_ms: i64,
    /// Last possible step.
    pub end_ms: i64,
    /// Distance between steps (positive).
    pub step_ms: i64,
}

/// One value of a series at one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The step.
    pub timestamp_ms: i64,
    /// The value in the series' unit.
    pub value: f64,
    /// For sample counts of CPU profiles: the value in the period's unit (CPU nanoseconds),
    /// as Parca shows it.
    pub period_value: Option<f64>,
}

/// A series of a range result.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSeries {
    /// Its labels: a stored series' labels, or a group's.
    pub labels: Labels,
    /// Values at the steps that have one, in order.
    pub points: Vec<Point>,
    /// Unit of `value`, e.g. `nanoseconds`, `bytes`, `count`.
    pub unit: String,
    /// Unit of `period_value`, when the points have one.
    pub period_unit: Option<String>,
}
