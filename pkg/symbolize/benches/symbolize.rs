//! Symbolization of this benchmark binary's own addresses (DWARF with inlined frames): lookups
//! in a parsed object, and the memoized path (what a warm agent pays per frame each window).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parca_symbolize::{ElfObject, ObjectKey, Options, Symbolizer};

fn bench(c: &mut Criterion) {
    let exe = std::env::current_exe().expect("current exe");
    let object = ElfObject::open(&exe).expect("own binary parses");
    // File offsets of 1024 addresses spread over 256 KiB of this binary's code, around `bench`.
    let here = bench as *const () as u64;
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let (start, offset) = maps
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (s, e) = f.first()?.split_once('-')?;
            let (s, e) = (
                u64::from_str_radix(s, 16).ok()?,
                u64::from_str_radix(e, 16).ok()?,
            );
            ((s..e).contains(&here)).then(|| Some((s, u64::from_str_radix(f.get(2)?, 16).ok()?)))?
        })
        .next()
        .expect("a mapping holds this code");
    let base = (here - start + offset).saturating_sub(128 << 10);
    let offsets: Vec<u64> = (0..1024u64).map(|i| base + i * 256).collect();
    let frames: usize = offsets
        .iter()
        .filter_map(|&off| object.vaddr_of_file_offset(off))
        .map(|v| object.symbolize(v).len())
        .sum();
    assert!(
        frames > 512,
        "the offsets must fall in symbolized code ({frames} frames)"
    );

    let mut group = c.benchmark_group("symbolize");
    group.throughput(Throughput::Elements(offsets.len() as u64));
    group.bench_function("object_1024_addresses", |b| {
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
