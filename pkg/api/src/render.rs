//! The API's wire formats of a profile's views: the flame-graph JSON tree, the `columns` layout
//! the web UI reads, the top table's and the call graph's JSON. The model (`parca_profile`) builds the views; how
//! they travel is the API's.

mod callgraph_json;
mod columns;
mod flame_json;
mod top_json;

#[cfg(test)]
mod tests;

pub use callgraph_json::CallGraphJson;
pub use columns::{COLUMNS_MAGIC, COLUMNS_VERSION, ColumnsWriter};
pub use flame_json::write_flame_graph_json;
pub use top_json::TopTableJson;
