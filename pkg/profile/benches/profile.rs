//! The hot paths of the profile model, on real corpus profiles: decode + normalize, merge of
//! 1,000 profiles (decoded into one set of tables, as a store ingests them and `parca profile`
//! reads files; and, for comparison, each with tables of its own, remapped by the merge),
//! flame-graph and top-table build.
//!
//! `cargo bench -p parca-profile --bench profile`; see `compare_go.rs` for the comparison with
//! Go's `profile.Parse`.

/// The `parca` binary's allocator (jemalloc), so that the figures are those of the server and
/// of `parca profile`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parca_pprof::DecodeOptions;
use parca_profile::{FlameGraph, Meta, Profile, Samples, Tables, TopTable};

fn read(rel: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/testdata/pprof")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn cpu(rel: &str) -> Profile {
    let profiles =
        parca_profile::decode(&read(rel), &DecodeOptions::default()).expect("corpus decodes");
    parca_profile::select_sample_type(profiles, Some("cpu"), None).expect("cpu sample type")
}

/// Go CPU profiles of several programs (cpu/nanoseconds, period cpu/nanoseconds).
const CPU_FILES: [&str; 6] = [
    "go/go-cpu.pb.gz",
    "go/go-cpu-b.pb.gz",
    "prometheus/prometheus-cpu.pb.gz",
    "published/google-pprof/sample.cpu",
    "published/parca/labels.pb.gz",
    "rust/rust-cpu.pb.gz",
];

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_normalize");
    for rel in [
        "published/google-pprof/large.cpu",
        "published/parca/alloc_space_delta.pb.gz",
        "go/go-cpu.pb.gz",
    ] {
        let bytes = read(rel);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(rel, |b| {
            b.iter(|| {
                parca_profile::decode(std::hint::black_box(&bytes), &DecodeOptions::default())
                    .expect("decodes")
            })
        });
    }
    group.finish();
}

fn merge(c: &mut Criterion) {
    let sources: Vec<Profile> = CPU_FILES.iter().map(|f| cpu(f)).collect();
    let n_pairs =
        |profiles: &[Profile]| profiles.iter().map(|p| p.samples.len() as u64).sum::<u64>();
    let mut group = c.benchmark_group("merge_1000");

    // 1,000 real profiles, each decoded from its file into one set of tables: as a store
    // ingests them, and as `parca profile` reads several files. The merge is an array add.
    let files: Vec<Vec<u8>> = CPU_FILES.iter().map(|f| read(f)).collect();
    let mut tables = Tables::new();
    let parts: Vec<(Meta, Samples)> = (0..1000)
        .map(|i| {
            let pprof = parca_pprof::decode(&files[i % files.len()], &DecodeOptions::default())
                .expect("corpus decodes");
            let mut parts =
                parca_profile::normalize_into(&pprof, &mut tables).expect("corpus normalizes");
            let cpu = parca_profile::pick_sample_type(
                parts.iter().map(|(meta, _)| meta),
                Some("cpu"),
                None,
            )
            .expect("cpu sample type");
            parts.swap_remove(cpu)
        })
        .collect();
    let tables = Arc::new(tables);
    let shared: Vec<Profile> = parts
        .into_iter()
        .map(|(meta, samples)| Profile {
            tables: Arc::clone(&tables),
            meta,
            samples,
        })
        .collect();
    group.throughput(Throughput::Elements(n_pairs(&shared)));
    group.bench_function("one_set_of_tables", |b| {
        b.iter(|| parca_profile::merge(&shared).expect("merge"))
    });

    // As the CLI gets them: each file decoded on its own (100 copies of each of the 6 sources
    // here, each copy keeping its source's tables: 6 remaps, then array adds).
    let cycled: Vec<Profile> = (0..1000)
        .map(|i| sources[i % sources.len()].clone())
        .collect();
    group.throughput(Throughput::Elements(n_pairs(&cycled)));
    group.bench_function("six_sources", |b| {
        b.iter(|| parca_profile::merge(&cycled).expect("merge"))
    });

    // Worst case: 1,000 profiles, each with tables of its own (1,000 remaps).
    group.sample_size(10);
    let distinct: Vec<Profile> = (0..1000)
        .map(|i| cpu(CPU_FILES[i % CPU_FILES.len()]))
        .collect();
    group.throughput(Throughput::Elements(n_pairs(&distinct)));
    group.bench_function("distinct_tables", |b| {
        b.iter(|| parca_profile::merge(&distinct).expect("merge"))
    });
    group.finish();
}

fn views(c: &mut Criterion) {
    let large = cpu("published/google-pprof/large.cpu");
    let mut group = c.benchmark_group("views");
    group.throughput(Throughput::Elements(large.samples.len() as u64));
    group.bench_function("flamegraph_build/large.cpu", |b| {
        b.iter(|| FlameGraph::build(&large).len())
    });
    group.bench_function("top/large.cpu", |b| {
        b.iter(|| TopTable::build(&large).rows.len())
    });
    // A query's answer as pprof (`format=pprof`, gRPC): the export's interning of strings,
    // functions and locations.
    group.bench_function("to_pprof/large.cpu", |b| {
        b.iter(|| parca_profile::to_pprof(&large).string_table.len())
    });
    group.finish();
}

criterion_group!(benches, decode, merge, views);
criterion_main!(benches);
