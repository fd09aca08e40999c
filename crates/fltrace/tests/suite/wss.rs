//! Working-set size from reference bits, and what this machine offers of DAMON and PMUs.

use super::util::*;
use fltrace_trace::{CodeAddr, VirtAddr};

/// The phases of the workload (64 MiB, then 8 MiB of it, then idle) show in the output. The
/// 8 MiB phase reads low: its translations stay in the TLB, which sets no Accessed bit again
/// after clear_refs (the method's known limit); it must read below the 64 MiB phase.
#[test]
fn wss_follows_the_phases() {
    let w = workloads();
    let dir = Dir::new();
    let out = dir
        .fltrace()
        .args(["wss", "--interval", "100ms", "--format", "csv", "--"])
        .arg(&w.faults)
        .args(["phases", "1500"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("time_s,wss_bytes,rss_bytes"));
    let rows: Vec<(f64, u64)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].parse().expect("time"), f[1].parse().expect("wss"))
        })
        .collect();
    // The phases in order, by what each interval saw rather than by when: a loaded machine
    // stretches the phases and shifts the samples, but never reorders them.
    let mb = 1u64 << 20;
    let wide = rows.iter().filter(|(_, w)| *w >= 48 * mb).count();
    assert!(wide >= 3, "64 MiB phase: {rows:?}");
    let last_wide = rows
        .iter()
        .rposition(|(_, w)| *w >= 48 * mb)
        .expect("a 64 MiB interval");
    let narrow = rows[last_wide + 1..]
        .iter()
        .position(|(_, w)| (4 * mb..16 * mb).contains(w))
        .map(|i| last_wide + 1 + i)
        .unwrap_or_else(|| panic!("8 MiB phase after the 64 MiB one: {rows:?}"));
    assert!(
        rows[narrow + 1..].iter().any(|(_, w)| *w < mb),
        "idle phase after the 8 MiB one: {rows:?}"
    );
    let pid = dir.pids("wss", "csv")[0];
    let trace = std::fs::read_to_string(fltrace_trace::files::path(dir.path(), "wss", pid, "csv"))
        .expect("trace");
    assert!(trace.starts_with("time_s,start,end,referenced_bytes,rss_bytes,path\n"));
    // The trace reads back, and each interval's mappings add up to the working set printed
    // for it.
    let (kind, ranges) =
        fltrace_trace::read_range_trace(&fltrace_trace::files::path(dir.path(), "wss", pid, "csv"))
            .expect("trace reads back");
    assert_eq!(kind, fltrace_trace::RangeTraceKind::ReferencedBytes);
    let mut per_interval = std::collections::BTreeMap::<String, u64>::new();
    for r in &ranges {
        *per_interval.entry(format!("{:.3}", r.time_s)).or_default() += r.value;
    }
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let printed: u64 = f[1].parse().expect("wss");
        assert_eq!(
            per_interval.get(f[0]).copied().unwrap_or(0),
            printed,
            "interval {}",
            f[0]
        );
    }
    assert!(
        std::fs::read_to_string(fltrace_trace::files::path(dir.path(), "wss", pid, "svg"))
            .expect("plot")
            .contains("working set")
    );

    // The heatmap of that trace: the 64 MiB phase (left) is drawn hotter than the 8 MiB one
    // (right), whose samples see an eighth of the mapping referenced. Mean shade, not the
    // number of cells: on a loaded machine the long 64 MiB samples come further apart.
    let out = dir.run(&["heatmap", "--from", "wss", "--terminal"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    const SHADES: &str = " .:-=+*#%@";
    let mean_shade = |cells: Vec<char>| {
        let drawn: Vec<usize> = cells
            .into_iter()
            .filter_map(|c| SHADES.find(c))
            .filter(|&shade| shade > 0)
            .collect();
        drawn.iter().sum::<usize>() as f64 / drawn.len().max(1) as f64
    };
    let map: Vec<Vec<char>> = text
        .lines()
        .take_while(|l| !l.contains("from reference bits"))
        .map(|l| l.chars().collect())
        .collect();
    let left = mean_shade(
        map.iter()
            .flat_map(|l| l.iter().take(40).copied())
            .collect(),
    );
    let right = mean_shade(
        map.iter()
            .flat_map(|l| l.iter().skip(60).copied())
            .collect(),
    );
    assert!(left > right, "left {left}, right {right}:\n{text}");
    assert!(text.contains("from reference bits"), "{text}");
}

/// Per-page detail needs idle page tracking; where the kernel lacks it (as here) `--pages`
/// says so in one line and runs nothing.
#[test]
fn per_page_detail_needs_idle_page_tracking() {
    let dir = Dir::new();
    let out = dir.run(&["wss", "--pages", "--duration", "1s", "--", "sleep", "5"]);
    if std::path::Path::new("/sys/kernel/mm/page_idle/bitmap").exists() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("idle page tracking"), "{err}");
}

/// `--format json` prints what streams as every streaming tool does: one object per interval
/// and line, with the CSV's names (`time_s` to the millisecond, whole bytes), each line's
/// working set exactly the sum of that interval's mappings in the trace file, which `-o`
/// puts in a directory it creates (parents too).
#[test]
fn json_lines_one_per_interval() {
    let w = workloads();
    let dir = Dir::new();
    let out = dir
        .fltrace()
        .args([
            "wss",
            "--interval",
            "100ms",
            "--format",
            "json",
            "-o",
            "new/wss",
            "--",
        ])
        .arg(&w.faults)
        .args(["phases", "600"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let written = dir.path().join("new/wss");
    let files: Vec<String> = std::fs::read_dir(&written)
        .expect("-o new/wss created")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let pid = files
        .iter()
        .find_map(|name| fltrace_trace::files::pid_of(name, "wss", "csv"))
        .unwrap_or_else(|| panic!("no wss trace in {files:?}"));
    assert!(
        files.contains(&format!("fltrace-data-wss-{pid}.svg")),
        "{files:?}"
    );
    assert!(dir.pids("wss", "csv").is_empty(), "written beside -o");
    let (_, ranges) =
        fltrace_trace::read_range_trace(&fltrace_trace::files::path(&written, "wss", pid, "csv"))
            .expect("trace reads back");
    let mut per_interval = std::collections::BTreeMap::<String, u64>::new();
    for r in &ranges {
        *per_interval.entry(format!("{:.3}", r.time_s)).or_default() += r.value;
    }
    let mut lines = 0;
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).expect("one JSON object a line");
        let time = format!("{:.3}", row["time_s"].as_f64().expect("seconds"));
        let wss = per_interval.get(&time).copied().unwrap_or(0);
        let rss = row["rss_bytes"].as_u64().expect("whole bytes");
        assert!(rss > 0, "{line}");
        assert_eq!(
            line,
            format!("{{\"time_s\":{time},\"wss_bytes\":{wss},\"rss_bytes\":{rss}}}")
        );
        lines += 1;
    }
    assert!(lines >= 3, "{text}");
}

/// A DAMON trace drawn as a heatmap: its ranges land in rows of their own, weighted by their
/// access counts (a synthetic trace: the machine's monitor aggregates too slowly for a test).
#[test]
fn heatmap_of_a_damon_trace() {
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("fltrace-data-damon-4242.csv"),
        "time_s,start,end,nr_accesses\n\
         1.000,0x10000,0x12000,3\n\
         2.000,0x10000,0x11000,20\n\
         2.000,0x90000,0x91000,1\n",
    )
    .expect("trace written");
    let out = dir.run(&["heatmap", "--from", "damon", "--terminal", "--width", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The line under the picture wraps at the terminal's width.
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("3 accessed ranges of process 4242 from DAMON"),
        "{text}"
    );
    assert!(words.contains("2 touched ranges"), "{text}");
    let out = dir.run(&["heatmap", "--from", "damon", "-o", "d.svg"]);
    assert!(out.status.success());
    assert!(dir.path().join("d.svg").is_file());
}

/// With a DAMON monitor fltrace did not start (as on these machines), --damon says so in one
/// line and reads that monitor's aggregated events read-only, translated to the process's
/// pages; the monitor itself is left exactly as it was. Runs 12 s: the monitor aggregates
/// every 5 s or so.
#[test]
fn damon_monitor_in_use_is_read_read_only() {
    let w = workloads();
    let dir = Dir::new();
    let state_path = "/sys/kernel/mm/damon/admin/kdamonds/0/state";
    let before = std::fs::read_to_string(state_path).unwrap_or_default();
    let out = dir
        .fltrace()
        .args(["wss", "--damon", "--duration", "13s", "--"])
        .arg(&w.faults)
        .args(["phases", "4000"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    if before.trim() == "on" {
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("in use by a monitor fltrace did not start (kdamond 0)")
                && err.contains("read-only"),
            "{err}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let rows: Vec<Vec<u64>> = text
            .lines()
            .skip(1)
            .map(|l| {
                l.split(',')
                    .skip(1)
                    .map(|v| v.parse().expect("number"))
                    .collect()
            })
            .collect();
        assert!(!rows.is_empty(), "one aggregation at least: {text}");
        assert!(
            rows.iter().all(|r| r[1] >= 64 << 20),
            "the 64 MiB buffer's frames are found: {rows:?}"
        );
    } else {
        assert_eq!(out.status.code(), Some(1));
        assert!(err.contains("DAMON"), "{err}");
    }
    let after = std::fs::read_to_string(state_path).unwrap_or_default();
    assert_eq!(before, after, "the machine's monitor is untouched");
}

/// Access sampling needs PEBS or IBS: without them (as here), one clear line and no recording.
#[test]
fn access_samples_without_pmu_support_is_one_clear_line() {
    let devices = std::path::Path::new("/sys/bus/event_source/devices");
    let precise = std::fs::read_to_string(devices.join("cpu/caps/max_precise")).unwrap_or_default();
    let has_support = devices.join("ibs_op").is_dir()
        || (precise.trim() != "0"
            && !precise.trim().is_empty()
            && devices.join("cpu/events/mem-loads").exists());
    let dir = Dir::new();
    let w = workloads();
    let out = dir
        .fltrace()
        .args(["record", "--access-samples", "--"])
        .arg(&w.faults)
        .args(["nested", "2000"])
        .output()
        .expect("fltrace runs");
    if has_support {
        // Where the PMU can sample accesses, the faults workload's stores are sampled.
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !dir.pids("access", "parquet").is_empty(),
            "access samples written"
        );
        return;
    }
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no hardware memory-access sampling on this machine"),
        "{err}"
    );
    assert!(dir.pids("faults", "parquet").is_empty(), "nothing recorded");
}

/// Everything after capture, on samples the test writes: PMU loads and stores drawn over time
/// and address, stores red (the machine has no PMU to take real ones).
#[test]
fn heatmap_of_access_samples() {
    use fltrace_trace::{AccessRecord, AccessWriter, files};
    let dir = Dir::new();
    let mut writer = AccessWriter::create(&files::access(dir.path(), 77)).expect("table");
    for i in 0..100u64 {
        writer
            .push(AccessRecord {
                time_ns: 1_000_000_000 + i * 1_000_000,
                tid: 77,
                ip: CodeAddr::new(0x40_1000),
                addr: VirtAddr::new(0x7f00_0000_0000) + (i % 10) * 4096,
                latency: 30,
                // Loads for the first half, stores (PERF_MEM_OP_STORE) after.
                data_src: if i < 50 { 2 } else { 4 },
                stack_id: 0,
            })
            .expect("row");
    }
    writer.finish().expect("footer");
    let out = dir.run(&["heatmap", "--from", "access", "--terminal"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("100 access samples of process 77"), "{text}");
    assert!(text.contains("1 touched ranges"), "{text}");
    let out = dir.run(&["heatmap", "--from", "access", "-o", "a.svg", "--width", "2"]);
    assert!(out.status.success());
    let svg = std::fs::read_to_string(dir.path().join("a.svg")).expect("svg");
    // Column 0 holds the loads (blue), column 1 the stores (red).
    assert!(svg.contains("fill=\"#0000FF\""), "{svg}");
    assert!(svg.contains("fill=\"#FF0000\""), "{svg}");
}

/// A recording's faults become a heatmap: the PNG has the asked columns (with its axes around
/// them) and the fill's pages as coloured (written) cells; the terminal rendering summarises
/// it.
#[test]
fn heatmap_of_a_recording() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "300"]);
    let out = dir.run(&[
        "heatmap", "-o", "heat.png", "--width", "64", "--height", "32",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(dir.path().join("heat.png")).expect("png"),
    ));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png data");
    // 64 columns of 16 pixels (the plot is about 1024 pixels wide), axes and legend around.
    assert!(info.width > 1024 && info.width < 1600, "{}", info.width);
    let red = buf
        .chunks(3)
        .filter(|p| p[0] > 200 && p[1] < 150 && p[2] < 150)
        .count();
    assert!(red > 0, "written cells are red");
    let defaults = dir.run(&["heatmap"]);
    assert!(defaults.status.success());
    let memref = std::fs::read_to_string(fltrace_trace::files::path(
        dir.path(),
        "memref",
        dir.pids("faults", "parquet")[0],
        "svg",
    ))
    .expect("memref plots");
    assert!(memref.contains("temporal") && memref.contains("spatial"));
    let terminal = dir.run(&["heatmap", "--terminal"]);
    let text = String::from_utf8_lossy(&terminal.stdout);
    // The picture, then the line under it, wrapped at the terminal's width, ends the output.
    let mut last_lines: Vec<&str> = text.trim_end().lines().rev().take(3).collect();
    last_lines.reverse();
    assert!(last_lines.join(" ").contains("faults of process"), "{text}");
}
