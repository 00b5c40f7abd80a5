//! The heap profile of a process running on jemalloc with profiling on, as the server does.

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Heap profiling on, one sample per 512 KiB allocated on average, as in the server.
#[allow(non_upper_case_globals)]
// SAFETY: jemalloc reads this symbol by name as a NUL-terminated string; nothing else defines it.
#[unsafe(export_name = "malloc_conf")]
pub static malloc_conf: &[u8] = b"prof:true,prof_active:true,lg_prof_sample:19\0";

/// Holds 64 MiB in 64 blocks, so the sampler cannot miss it.
#[inline(never)]
fn hold_a_lot_for_the_heap_test() -> Vec<Vec<u8>> {
    (0..64).map(|i| vec![i as u8; 1 << 20]).collect()
}

#[test]
fn heap_profile_names_the_allocating_function_with_its_path() {
    let held = hold_a_lot_for_the_heap_test();
    let profile = parca_selfprof::heap_profile().unwrap();
    let strings = &profile.string_table;
    let function_named = |name: &str| {
        profile
            .function
            .iter()
            .find(|f| strings[f.name as usize] == name)
            .map(|f| f.id)
    };
    let ours = function_named("heap::hold_a_lot_for_the_heap_test")
        .expect("the allocating function is named with its path");
    let in_ours: i64 = profile
        .sample
        .iter()
        .filter(|s| {
            s.location_id.iter().any(|&l| {
                profile.location[l as usize - 1]
                    .line
                    .iter()
                    .any(|line| line.function_id == ours)
            })
        })
        .map(|s| s.value[0])
        .sum();
    // inuse_space: jemalloc scales its samples to the bytes they stand for.
    assert!(
        in_ours >= 32 << 20,
        "{in_ours} bytes under the allocating function"
    );
    assert_eq!(
        strings[profile.drop_frames as usize],
        parca_selfprof::ALLOCATOR_FRAMES
    );
    let stats = parca_selfprof::memory_stats().expect("jemalloc's figures");
    assert!(stats.heap_allocated_bytes >= 64 << 20, "{stats:?}");
    assert!(
        stats.resident_bytes >= stats.heap_allocated_bytes / 2,
        "{stats:?}"
    );
    drop(held);
}
