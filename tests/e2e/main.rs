//! End-to-end tests, one module per area. They use the corpus in `tests/testdata/` and, where
//! present, real outside tools (google/pprof); a test that needs a missing tool says so and
//! passes without checking, and CI installs every such tool so that nothing is skipped there.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

mod agent;
mod agent_hostile;
mod agent_java;
mod agent_node;
mod agent_off_cpu;
mod agent_php;
mod agent_python;
mod agent_ruby;
mod agent_rustc;
mod alertmanager;
mod check_rules;
mod corpus;
mod fanout;
mod insights;
mod objstore;
mod otlp;
mod parca_agent_writes;
mod parca_client;
mod pprof_oracle;
mod prometheus_clients;
mod query_arithmetic;
mod query_golden;
mod rules_eval;
mod security;
mod server;
mod server_harness;
mod server_import;
mod server_push;
mod spans;
mod store_faults;
mod support;
mod tsdb_crash;
mod tsdb_import;
mod user_files;
mod views_oracle;
