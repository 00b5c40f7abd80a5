//! Symbolization of this benchmark binary's own addresses: the memoized path (what a warm agent
//! pays per frame each window) and the first lookup in a freshly parsed object.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parca_symbolize::{ElfObject, ObjectKey, Options, Symbolizer};

fn bench(c: &mut Criterion) {
    let exe = std::env::current_exe().expect("current exe");
    let object = ElfObject::open(&exe).expect("own binary parses");
    // File offsets of a spread of addresses inside the first executable segment: symbol-rich.
    let offsets: Vec<u64> = (0..1024u64).map(|i| 0x1000 + i * 97).collect();

    let mut group = c.benchmark_group("symbolize");
    group.throughput(Throughput::Elements(offsets.len() as u64));
    group.bench_function("cold_object_1024_addresses", |b| {
        b.iter(|| {
            let mut n = 0;
            for &off in &offsets {
                if let Some(v) = object.vaddr_of_file_offset(off) {
                    n += object.symbolize(v).len();
                }
            }
            black_box(n)
        })
    });
    let mut symbolizer = Symbolizer::new(Options::default());
    let key = ObjectKey::File { dev: 0, inode: 0 };
    group.bench_function("memoized_1024_addresses", |b| {
        b.iter(|| {
            let mut n = 0;
            for &off in &offsets {
                n += symbolizer
                    .symbolize(&key, |_| ElfObject::open(&exe), off)
                    .len();
            }
            black_box(n)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
