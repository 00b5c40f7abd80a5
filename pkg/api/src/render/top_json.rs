//! The top table as JSON (`/api/v1/query?format=top`, `parca profile --format top-json`).

use parca_profile::{TopRow, TopTable};
use serde::Serialize;

/// [`TopTable`] in the JSON shape the HTTP API documents.
#[derive(Debug, Serialize)]
pub struct TopTableJson<'a> {
    sample_type: &'a str,
    unit: &'a str,
    total: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_total: Option<i64>,
    rows: Vec<TopRowJson<'a>>,
}

#[derive(Debug, Serialize)]
struct TopRowJson<'a> {
    name: &'a str,
    flat: i64,
    cum: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_flat: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_cum: Option<i64>,
}

impl<'a> From<&'a TopTable> for TopTableJson<'a> {
    fn from(table: &'a TopTable) -> Self {
        let row = |r: &'a TopRow| TopRowJson {
            name: &r.name,
            flat: r.flat,
            cum: r.cum,
            base_flat: r.base_flat,
            base_cum: r.base_cum,
        };
        TopTableJson {
            sample_type: &table.sample_type,
            unit: &table.unit,
            total: table.total,
            base_total: table.base_total,
            rows: table.rows.iter().map(row).collect(),
        }
    }
}
