//! Unwinding a copy of this benchmark's own stack (about 20 frames of Rust and libc, built
//! without frame pointers) with its `.eh_frame`: what the agent pays per sample once the rows of
//! the addresses are memoized, and what building an object's unwind table costs.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parca_symbolize::unwind::{Registers, StackCopy, UnwindTable, compact, unwind};

#[inline(never)]
fn capture(depth: u32, out: &mut (Registers, Vec<u8>)) -> u32 {
    if depth > 0 {
        return black_box(capture(depth - 1, out)) + 1;
    }
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers and the address of the next instruction.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
        );
    }
    let mut bytes = vec![0u8; 16 << 10];
    // SAFETY: the 16 KiB above rsp are this thread's stack (the caller reserved 64 KiB above).
    unsafe {
        std::ptr::copy_nonoverlapping(sp as *const u8, bytes.as_mut_ptr(), bytes.len());
    }
    *out = (Registers { ip, sp, bp }, bytes);
    0
}

/// (start, file offset) of the mapping of this executable that holds `addr`.
fn mapping_of(addr: u64) -> (u64, u64) {
    let exe = std::fs::read_link("/proc/self/exe").expect("own executable");
    let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
    maps.lines()
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (s, e) = f.first()?.split_once('-')?;
            let (s, e) = (
                u64::from_str_radix(s, 16).ok()?,
                u64::from_str_radix(e, 16).ok()?,
            );
            ((s..e).contains(&addr) && f.len() >= 6 && Path::new(f[5]) == exe)
                .then(|| Some((s, u64::from_str_radix(f[2], 16).ok()?)))?
        })
        .expect("a mapping holds this code")
}

fn bench(c: &mut Criterion) {
    let exe = std::fs::read_link("/proc/self/exe").expect("own executable");
    let file = std::fs::File::open(&exe).expect("open own executable");
    let mut out = (
        Registers {
            ip: 0,
            sp: 0,
            bp: 0,
        },
        Vec::new(),
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            let pad = black_box([0u8; 64 << 10]);
            capture(10, &mut out);
            black_box(&pad);
        });
    });
    let table = Arc::new(UnwindTable::read(&file, &exe).expect("own unwind table"));
    let (start, offset) = mapping_of(out.0.ip);
    let lookup = |addr: u64| {
        let vaddr = table.vaddr_of_file_offset(addr.checked_sub(start)? + offset)?;
        Some((table.clone(), vaddr))
    };
    let stack = StackCopy {
        sp: out.0.sp,
        bytes: &out.1,
    };
    let mut frames = Vec::new();
    unwind(out.0, &stack, 127, &mut frames, lookup);
    assert!(frames.len() >= 10, "{frames:x?}");

    let mut group = c.benchmark_group("unwind");
    group.throughput(Throughput::Elements(frames.len() as u64));
    group.bench_function("own_stack_memoized_rows", |b| {
        b.iter(|| {
            frames.clear();
            black_box(unwind(out.0, &stack, 127, &mut frames, lookup))
        })
    });
    group.throughput(Throughput::Elements(table.n_fdes() as u64));
    group.bench_function("build_table_of_this_binary", |b| {
        b.iter(|| black_box(UnwindTable::read(&file, &exe).expect("table").n_fdes()))
    });
    // The agent's tables (rows for the BPF program), of this binary, of glibc, and of any
    // objects named in PARCA_BENCH_CFI_OBJECTS (colon-separated paths; e.g. the toolchain's
    // librustc_driver, whose C++ and Rust code remembers and restores CFI states often).
    let mut objects = vec![
        ("this_binary".to_owned(), exe.clone()),
        ("libc".to_owned(), "/lib/x86_64-linux-gnu/libc.so.6".into()),
    ];
    for path in std::env::var("PARCA_BENCH_CFI_OBJECTS")
        .unwrap_or_default()
        .split(':')
    {
        let path = std::path::PathBuf::from(path);
        if let Some(name) = path.file_name() {
            objects.push((name.to_string_lossy().into_owned(), path));
        }
    }
    for (name, path) in &objects {
        let path = path.as_path();
        let Ok(object) = std::fs::File::open(path) else {
            continue;
        };
        let limits = compact::Limits::default();
        let table = compact::compile(&object, path, &limits).expect("compiles");
        group.throughput(Throughput::Elements(table.fdes));
        group.bench_function(format!("compile_compact_table_of_{name}"), |b| {
            b.iter(|| black_box(compact::compile(&object, path, &limits).expect("compiles")))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
