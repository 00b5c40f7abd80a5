//! google/pprof's legacy test files, decoded through [`crate::decode`], against google/pprof's
//! own reading of them: the `Profile.String()` its `TestParse` keeps in `*.string` (samples'
//! values and stacks, locations' addresses, functions and mappings, mappings, period), printed
//! here from our [`Pprof`] in the same layout. Then frame patterns, errors and hostile input.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

use std::fmt::Write;
use std::path::PathBuf;

use crate::{DecodeOptions, Error, Pprof, decode};

/// google/pprof's legacy files, in `tests/testdata/pprof/published/google-pprof/`.
const FILES: [&str; 14] = [
    "legacy/cppbench.heap",
    "legacy/cppbench.growth",
    "legacy/cppbench.contention",
    "legacy/cppbench.thread",
    "legacy/cppbench.thread.all",
    "legacy/cppbench.thread.none",
    "legacy/gobench.heap",
    "legacy/go.godoc.thread",
    "legacy/java.heap",
    "legacy/java.cpu",
    "legacy/java.contention",
    "legacy/cppbench.cpu",
    "legacy/go.crc32.cpu",
    "gobench.cpu",
];

fn corpus(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/testdata/pprof/published/google-pprof")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// google/pprof's `Profile.String()` of `name` (`pkg/pprof/testdata/google-pprof-legacy/`).
fn expected(name: &str) -> String {
    let file = name.rsplit('/').next().expect("a file name");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/google-pprof-legacy")
        .join(format!("{file}.string"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read(name: &str) -> Pprof {
    decode(&corpus(name), &DecodeOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// google/pprof's `Profile.String()` (profile/profile.go), of a decoded profile.
fn go_string(p: &Pprof) -> String {
    let h = p.header();
    let mut out = Vec::<String>::new();
    for &c in &h.comment {
        out.push(format!("Comment: {}", p.string(c)));
    }
    if let Some(pt) = h.period_type {
        out.push(format!(
            "PeriodType: {} {}",
            p.string(pt.r#type),
            p.string(pt.unit)
        ));
    }
    out.push(format!("Period: {}", h.period));
    assert_eq!(h.time_nanos, 0, "legacy profiles have no time");
    if h.duration_nanos != 0 {
        let d = go_duration(h.duration_nanos);
        out.push(format!("Duration: {}", &d[..d.len().min(4)]));
    }
    out.push("Samples:".into());
    let types: Vec<String> = h
        .sample_type
        .iter()
        .map(|t| {
            let dflt = if t.r#type == h.default_sample_type {
                "[dflt]"
            } else {
                ""
            };
            format!("{}/{}{dflt}", p.string(t.r#type), p.string(t.unit))
        })
        .collect();
    out.push(types.join(" "));
    for i in 0..p.n_samples() {
        let mut line = String::new();
        for v in p.sample_values(i) {
            write!(line, " {v:>10}").expect("string");
        }
        line.push_str(": ");
        for &l in p.sample_locations(i) {
            write!(line, "{} ", p.locations()[l as usize].id).expect("string");
        }
        out.push(line);
        let mut numeric: Vec<(String, Vec<i64>)> = Vec::new();
        for label in p.sample_labels(i) {
            assert_eq!(label.str, 0, "legacy profiles have numeric labels only");
            assert_eq!(label.num_unit, 0, "google/pprof sets no unit");
            let key = p.string(label.key).to_owned();
            match numeric.iter_mut().find(|(k, _)| *k == key) {
                Some((_, values)) => values.push(label.num),
                None => numeric.push((key, vec![label.num])),
            }
        }
        if !numeric.is_empty() {
            let mut labels: Vec<String> = numeric
                .iter()
                .map(|(k, vs)| {
                    let vs: Vec<String> = vs.iter().map(i64::to_string).collect();
                    format!("{k}:[{}]", vs.join(" "))
                })
                .collect();
            labels.sort();
            out.push(format!("{:16}{}", "", labels.join(" ")));
        }
    }
    out.push("Locations".into());
    for l in p.locations() {
        let mut head = format!("{:6}: {:#x} ", l.id, l.address);
        if let Some(m) = l.mapping {
            write!(head, "M={} ", p.mappings()[m as usize].id).expect("string");
        }
        if l.is_folded {
            head.push_str("[F] ");
        }
        let lines = p.lines(l);
        if lines.is_empty() {
            out.push(head.clone());
        }
        for line in lines {
            let f = &p.functions()[line.function as usize];
            let mut text = format!(
                "{} {}:{} s={}",
                p.string(f.name),
                p.string(f.filename),
                line.line,
                f.start_line
            );
            if f.name != f.system_name {
                write!(text, "({})", p.string(f.system_name)).expect("string");
            }
            out.push(format!("{head}{text}"));
            head = " ".repeat(13);
        }
    }
    out.push("Mappings".into());
    for m in p.mappings() {
        let mut bits = String::new();
        for (set, bit) in [
            (m.has_functions, "[FN]"),
            (m.has_filenames, "[FL]"),
            (m.has_line_numbers, "[LN]"),
            (m.has_inline_frames, "[IN]"),
        ] {
            if set {
                bits.push_str(bit);
            }
        }
        out.push(format!(
            "{}: {:#x}/{:#x}/{:#x} {} {} {bits}",
            m.id,
            m.memory_start,
            m.memory_limit,
            m.file_offset,
            p.string(m.filename),
            p.string(m.build_id)
        ));
    }
    out.join("\n") + "\n"
}

/// Go's `time.Duration.String()` for durations of a second or more (what legacy profiles have),
/// e.g. `4h35m2.83s`.
fn go_duration(nanos: i64) -> String {
    assert!(nanos >= 1_000_000_000, "only durations of a second or more");
    let nanos = nanos as u64;
    let fraction = format!("{:09}", nanos % 1_000_000_000);
    let fraction = fraction.trim_end_matches('0');
    let seconds = nanos / 1_000_000_000;
    let mut out = String::new();
    let (hours, minutes) = (seconds / 3600, seconds / 60 % 60);
    if hours > 0 {
        write!(out, "{hours}h").expect("string");
    }
    if seconds >= 60 {
        write!(out, "{minutes}m").expect("string");
    }
    write!(out, "{}", seconds % 60).expect("string");
    if !fraction.is_empty() {
        write!(out, ".{fraction}").expect("string");
    }
    out + "s"
}

/// The first line where two texts differ, for a readable failure.
fn first_difference(ours: &str, theirs: &str) -> Option<String> {
    let (a, b): (Vec<_>, Vec<_>) = (ours.lines().collect(), theirs.lines().collect());
    (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .map(|i| {
            format!(
                "line {}:\n  ours:   {:?}\n  theirs: {:?}",
                i + 1,
                a.get(i),
                b.get(i)
            )
        })
}

#[test]
fn every_legacy_file_reads_as_google_pprof_reads_it() {
    for name in FILES {
        let ours = go_string(&read(name));
        let theirs = expected(name);
        if let Some(difference) = first_difference(&ours, &theirs) {
            panic!("{name} differs from google/pprof's reading at {difference}");
        }
        assert_eq!(ours, theirs, "{name}");
    }
}

#[test]
fn go_duration_is_gos() {
    assert_eq!(go_duration(16_502_830_000_000), "4h35m2.83s");
    assert_eq!(go_duration(61_000_000_000), "1m1s");
    assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
}

/// `addLegacyFrameInfo`: allocator frames leave heap profiles (the Go runtime's panics and
/// calls stay), lock internals leave contention profiles, the profiler's signal handler the rest.
#[test]
fn frame_patterns_are_google_pprofs() {
    let frames = |name: &str| {
        let p = read(name);
        let h = p.header();
        (
            p.string(h.drop_frames).to_owned(),
            p.string(h.keep_frames).to_owned(),
        )
    };
    for name in [
        "legacy/cppbench.heap",
        "legacy/cppbench.growth",
        "legacy/gobench.heap",
        "legacy/java.heap",
    ] {
        let (drop, keep) = frames(name);
        assert!(
            drop.starts_with("calloc|cfree|malloc|free|memalign|do_memalign|(__)?posix_memalign")
                && drop.ends_with("|operator new(\\[\\])?|simple_alloc::allocate"),
            "{name}: {drop}"
        );
        assert_eq!(
            keep, "runtime\\.panic|runtime\\.reflectcall|runtime\\.call[0-9]*",
            "{name}"
        );
    }
    for name in ["legacy/cppbench.contention", "legacy/java.contention"] {
        let (drop, keep) = frames(name);
        assert!(
            drop.starts_with("RecordLockProfileData|(base::)?RecordLockProfileData.*|")
                && drop.ends_with("|(SpinLockHolder::)?~SpinLockHolder.*"),
            "{name}: {drop}"
        );
        assert_eq!(keep, "", "{name}");
    }
    for name in [
        "legacy/cppbench.thread",
        "legacy/go.godoc.thread",
        "legacy/java.cpu",
        "gobench.cpu",
    ] {
        assert_eq!(
            frames(name),
            (
                "ProfileData::Add|ProfileData::prof_handler|CpuProfiler::prof_handler|\
                 __pthread_sighandler|__restore"
                    .to_owned(),
                String::new()
            ),
            "{name}"
        );
    }
}

fn decode_text(text: &str) -> Result<Pprof, Error> {
    decode(text.as_bytes(), &DecodeOptions::default())
}

fn error_of(text: &str) -> String {
    match decode_text(text) {
        Ok(_) => panic!("{text:?} decoded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unknown_text_names_what_was_tried() {
    assert_eq!(
        error_of("heap profile?"),
        "profile is not protobuf (top level: field `period` has wire type 1, expected a varint \
         at byte 3), not gzip, and not one of google/pprof's legacy formats (Go or Java CPU, \
         gperftools or Go heap, growth, contention or thread text)"
    );
}

#[test]
fn gzip_of_nothing_known_says_gzip() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"<html>").expect("to vec");
    let err = decode(&gz.finish().expect("gzip"), &DecodeOptions::default()).expect_err("html");
    assert!(
        err.to_string()
            .starts_with("profile is gzip, but what it holds is not protobuf (top level: "),
        "{err}"
    );
}

#[test]
fn malformed_text_names_format_and_line() {
    for (text, want) in [
        (
            "heap profile: 1: 2 [1: 2] @ heapz_v2/524288\n1: 2 [1: 2] @ 0x1\nbogus\n",
            "legacy heap profile is malformed: line 3: `bogus` is not a heap sample \
             (`count: bytes [count: bytes] @ addresses`)",
        ),
        (
            "heap profile: 1: 2 [1: 2] @ heapz_v2/524288\n0: 2 [0: 2] @ 0x1\n",
            "legacy heap profile is malformed: line 2: inuse count is 0 but inuse bytes are 2",
        ),
        (
            "heap profile: 1: 2 [1: 2] @ heapz/524288\n",
            "legacy heap profile is malformed: line 1: unknown kind `heapz` (google/pprof \
             reads heap, heap_v2, heapz_v2 and heapprofile)",
        ),
        (
            "heap profile: 1: 2 [1: 2] @ heap_v2/1\n1: 2 [1: 2] @ 0x1 0x473add693e639c6f0\n",
            "legacy heap profile is malformed: line 2: address 0x473add693e639c6f0 does not \
             fit in 64 bits",
        ),
        (
            "goroutine profile: total 1\n1 @ 0x1\n# comment\n1 @\n",
            "legacy Go count profile is malformed: line 4: `1 @` is not a count sample \
             (`count @ addresses`)",
        ),
        (
            "--- threadz 1 ---\n--- Thread 1 (name: a/1) stack: ---\n  PC: 0x40b688 \
             0x473add693e639c6f0\n--- Memory map: ---\n",
            "legacy thread profile is malformed: line 3: address 0x473add693e639c6f0 does not \
             fit in 64 bits",
        ),
        (
            "--- threadz 1 ---\n--- Thread 1 (name: a/1) stack: ---\n  PC: 0x40b688\n",
            "legacy thread profile is malformed: line 3: the input ends in a thread's stack, \
             not at `--- Memory map: ---`",
        ),
        (
            "--- contentionz 1 ---\ncycles/second = fast\n",
            "legacy contention profile is malformed: line 2: `cycles/second` is `fast`, not a \
             number",
        ),
        (
            "--- contentionz 1 ---\nsampling period = 100\n  1 2 @ 0x1\n  x @ 0x2\n",
            "legacy contention profile is malformed: line 4: `x @ 0x2` is not a contention \
             sample (`delay count @ addresses`)",
        ),
        (
            "--- heapz 1 ---\nformat = java\nresolution = bytes\n  10 0 @ 0x1\n",
            "legacy Java heap profile is malformed: line 4: a heap sample with a count of 0",
        ),
        (
            "--- heapz 1 ---\nformat = java\n  10 1 @ 0x1\n",
            "legacy Java heap profile is malformed: line 3: a sample before the `resolution` \
             attribute, which gives the sample types",
        ),
        (
            "--- contentionz 1 ---\nformat = java\nresolution = microseconds\n  08 1 @ 0x1\n",
            "legacy Java contention profile is malformed: line 4: value 08 is out of range",
        ),
    ] {
        assert_eq!(error_of(text), want, "{text:?}");
    }
}

/// Java's contention profiles share gperftools' header; each reading gets its own.
#[test]
fn contention_headers_go_to_the_right_reader() {
    let java = decode_text(
        "--- contentionz 1 ---\nformat = java\nresolution = microseconds\n\
         sampling period = 10\n  5 1 @ 0x1\n\n 0x1 a.B.c (B.java:3)\n",
    )
    .expect("java");
    assert_eq!(java.sample_values(0), [10, 50]);
    assert_eq!(
        java.string(java.header().sample_type[1].unit),
        "microseconds"
    );
    assert_eq!(java.string(java.functions()[0].name), "a.B.c");

    let gperftools = decode_text(
        "--- contentionz 1 ---\ncycles/second = 2000000000\nsampling period = 10\n  5 1 @ 0x1\n",
    )
    .expect("gperftools");
    // 5 cycles × 10 at 2 cycles per nanosecond.
    assert_eq!(gperftools.sample_values(0), [10, 25]);
    assert_eq!(gperftools.locations()[0].address, 0);
}

/// A protobuf whose references do not resolve is refused as such, even when its strings hold
/// what would be a legacy header.
#[test]
fn protobuf_with_legacy_strings_stays_protobuf() {
    use prost::Message;
    let profile = crate::proto::Profile {
        sample_type: vec![crate::proto::ValueType { r#type: 1, unit: 9 }],
        string_table: vec![
            String::new(),
            "heap profile: 1: 2 [1: 2] @ heap/2\n1: 2 [1: 2] @ 0x1\n".into(),
        ],
        ..Default::default()
    };
    let err = decode(&profile.encode_to_vec(), &DecodeOptions::default()).expect_err("index 9");
    assert!(
        err.to_string().contains("refers to string index 9"),
        "{err}"
    );
}

/// Growth in memory is charged and refused at the decoder's limit.
#[test]
fn conversion_stops_at_the_memory_limit() {
    let mut text = String::from("goroutine profile: total 1\n");
    for i in 0..10_000 {
        writeln!(text, "1 @ 0x{i:x}1").expect("string");
    }
    let options = DecodeOptions {
        max_decompressed_bytes: 1 << 20,
    };
    let err = decode(text.as_bytes(), &options).expect_err("too large");
    assert_eq!(
        err.to_string(),
        "legacy profile is larger than the limit of 1048576 bytes once converted to protobuf"
    );
    assert!(
        decode(
            text.as_bytes(),
            &DecodeOptions {
                max_decompressed_bytes: 16 << 20
            }
        )
        .is_ok()
    );
}

/// Many mappings and many addresses outside them cost bounded time.
#[test]
fn overlapping_mappings_cost_bounded_time() {
    let mut text = String::from("goroutine profile: total 1\n");
    for i in 0..20_000u64 {
        writeln!(text, "1 @ 0x{:x}", 0x1_0000_0000 + i).expect("string");
    }
    text.push_str("--- Memory map: ---\n");
    for i in 0..20_000u64 {
        // Overlapping, with offsets: google/pprof scans them all for every address.
        writeln!(
            text,
            "{:x}-{:x} r-xp 1000 00:00 0 /lib{i}",
            0x10 + i,
            0x20 + i
        )
        .expect("string");
    }
    let err = decode(text.as_bytes(), &DecodeOptions::default()).expect_err("too much work");
    assert!(err.to_string().contains("steps"), "{err}");
}

/// Truncations and flipped bytes of every file: errors, never a panic.
#[test]
fn damaged_files_never_panic() {
    let options = DecodeOptions {
        max_decompressed_bytes: 4 << 20,
    };
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for name in FILES {
        let bytes = corpus(name);
        for cut in (0..bytes.len()).step_by(bytes.len() / 64 + 1) {
            let _ = decode(&bytes[..cut], &options);
        }
        for _ in 0..200 {
            let mut damaged = bytes.clone();
            for _ in 0..1 + next() % 4 {
                let at = next() as usize % damaged.len();
                damaged[at] = match next() % 4 {
                    0 => next() as u8,
                    1 => b'\n',
                    2 => b'0',
                    _ => b' ',
                };
            }
            let _ = decode(&damaged, &options);
        }
    }
}
