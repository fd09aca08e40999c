//! `visualize --allocs`: the heap consumed over time by site with its peak and the resident
//! memory, allocations per second, sizes and the flamegraphs of the peak and of the leaks, as
//! SVG and as CSV and JSON; each process of a command its own; heaptrack as the oracle of
//! what both count alike.

use std::collections::HashMap;
use std::path::Path;

use super::util::*;

const MIB: u64 = 1 << 20;

/// `fltrace record -q --allocs -- <program> <args>`, which must succeed.
fn record_allocs(dir: &Dir, program: &Path, args: &[&str]) {
    let out = output_within(
        dir.fltrace()
            .args(["record", "-q", "--allocs", "--"])
            .arg(program)
            .args(args),
        std::time::Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `fltrace visualize --allocs <args>` (which `Dir::run` also runs from the whole tables and
/// compares); the files it names, by name.
fn charts(dir: &Dir, args: &[&str]) -> Vec<String> {
    let out = dir.run(&[&["visualize", "--allocs"], args].concat());
    assert!(
        out.status.success(),
        "visualize --allocs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_owned())
        .collect()
}

fn read(dir: &Dir, name: &str) -> String {
    std::fs::read_to_string(dir.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The `sites_bytes` of each interval of a chart's JSON, by site label.
fn site_bytes(json: &serde_json::Value, label: &str) -> Vec<u64> {
    let sites = json["sites"].as_array().expect("sites");
    let index = sites
        .iter()
        .position(|s| s["label"] == label)
        .unwrap_or_else(|| panic!("no site {label} among {sites:#?}"));
    json["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| i["sites_bytes"][index].as_u64().expect("bytes"))
        .collect()
}

/// workloads/chartphases.c: 64 MiB at one site, freed, then 8 MiB at another and 100,000
/// bytes at a third, kept. The consumed chart's peak is the 64 MiB (exactly: heap bytes are
/// the calls' sizes), in the first phase, when the first site held all of it and the others
/// nothing; the heap is empty between the phases; at the end the second and third sites hold
/// what they leaked. The same in the SVG (site names, the peak's words and marker), the CSV
/// and the JSON; the resident memory beside it reaches the 64 MiB the program filled; the
/// flamegraphs of the peak and of the leaks name only their sites.
#[test]
fn heap_chart_of_known_phases_peaks_in_the_first() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "chartphases.c");
    record_allocs(&dir, &program, &[]);
    let pid = dir.pids("allocs", "parquet")[0];
    let label = |name: &str, function: &str| {
        format!("{function} chartphases.c:{}", site("chartphases.c", name))
    };
    let (first, second, keep) = (
        label("first", "first_phase"),
        label("second", "second_phase"),
        label("keep", "keep"),
    );

    let written = charts(&dir, &["--format", "json"]);
    assert_eq!(written, [format!("fltrace-data-allocmem-{pid}.json")]);
    let json: serde_json::Value = serde_json::from_str(&read(&dir, &written[0])).expect("json");
    assert_eq!(json["peak"]["bytes"], 64 * MIB, "{}", json["peak"]);
    let heap: Vec<u64> = json["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| i["heap_bytes"].as_u64().expect("heap"))
        .collect();
    let (first_bytes, second_bytes, keep_bytes) = (
        site_bytes(&json, &first),
        site_bytes(&json, &second),
        site_bytes(&json, &keep),
    );
    assert_eq!(heap.iter().max(), Some(&(64 * MIB)));
    let peak = heap.iter().position(|&h| h == 64 * MIB).expect("peak");
    assert_eq!(
        (first_bytes[peak], second_bytes[peak], keep_bytes[peak]),
        (64 * MIB, 0, 0)
    );
    // The peak's time lies in the interval drawn at its height.
    let time = |i: usize| json["intervals"][i]["time_s"].as_f64().expect("time");
    let peak_s = json["peak"]["time_s"].as_f64().expect("peak time");
    let step = json["interval_s"].as_f64().expect("interval");
    assert!(
        time(peak) <= peak_s + 1e-9 && peak_s < time(peak) + step + 1e-9,
        "peak at {peak_s} s, its interval at {} s",
        time(peak)
    );
    // The first phase, then nothing alive, then the second.
    let second_starts = second_bytes
        .iter()
        .position(|&b| b > 0)
        .expect("second phase");
    assert!(peak < second_starts, "{peak} {second_starts}");
    assert!(
        heap[peak..second_starts].contains(&0),
        "the heap empties between the phases: {:?}",
        &heap[peak..second_starts]
    );
    let last = heap.len() - 1;
    assert_eq!(
        (first_bytes[last], second_bytes[last], keep_bytes[last]),
        (0, 8 * MIB, 100_000)
    );
    assert_eq!(json["allocs"], 64 + 8 + 1000 + 500);
    assert_eq!(json["temporary"], 500 + 1);
    let rss_most = json["rss"]
        .as_array()
        .expect("rss")
        .iter()
        .filter_map(|s| s["bytes"].as_u64())
        .max()
        .expect("resident samples");
    assert!(rss_most >= 64 * MIB, "resident memory peaked at {rss_most}");

    let written = charts(&dir, &["--format", "csv"]);
    assert_eq!(
        written,
        [
            format!("fltrace-data-allocmem-{pid}.csv"),
            format!("fltrace-data-allocsizes-{pid}.csv")
        ]
    );
    let rows = csv_rows(&read(&dir, &written[0]));
    assert_eq!(rows.len(), heap.len());
    let row = rows
        .iter()
        .max_by_key(|r| r["heap_bytes"].parse::<u64>().unwrap_or(0))
        .expect("rows");
    assert_eq!(
        (
            row["heap_bytes"].as_str(),
            row[&first].as_str(),
            row[&second].as_str()
        ),
        ("67108864", "67108864", "0")
    );
    let sizes = csv_rows(&read(&dir, &written[1]));
    let mib = sizes
        .iter()
        .find(|r| r["from"] == MIB.to_string())
        .expect("the 1 MiB bucket");
    assert_eq!(mib["count"], "72");

    let written = charts(&dir, &[]);
    let names: Vec<String> = [
        "allocmem",
        "allocrate",
        "allocsizes",
        "flamegraph-peak",
        "flamegraph-leaks",
    ]
    .iter()
    .map(|kind| format!("fltrace-data-{kind}-{pid}.svg"))
    .collect();
    assert_eq!(written, names);
    let svg = read(&dir, &names[0]);
    for text in [&first, &second, &keep] {
        assert!(
            svg.contains(&format!("\n{text}\n")),
            "no {text} in the chart"
        );
    }
    let words = format!("heap peak 64 MiB at {peak_s:.3} s");
    assert_eq!(svg.matches(&format!("\n{words}\n")).count(), 2, "{words}");
    let marker = |tag: &&str| tag.contains("fill=\"#C80000\"");
    assert_eq!(
        svg.split("<circle").skip(1).filter(marker).count(),
        1,
        "one peak marker"
    );
    assert!(svg.contains("\nresident memory (RSS, every 20 ms)\n"));
    assert!(svg.matches("<polygon").count() >= 3, "a band per site");
    let rate = read(&dir, &names[1]);
    assert!(rate.contains("heap allocations (1,572 in all)"), "{rate}");
    assert!(rate.contains("temporary allocations (501 in all)"));
    let sizes = read(&dir, &names[2]);
    assert!(sizes.contains("\n1 MiB\n") && sizes.contains("\n72\n"));
    let peak_flames = read(&dir, &names[3]);
    assert!(peak_flames.contains("first_phase") && !peak_flames.contains("second_phase"));
    let leak_flames = read(&dir, &names[4]);
    assert!(
        leak_flames.contains("second_phase")
            && leak_flames.contains("keep")
            && !leak_flames.contains("first_phase")
    );
}

/// A command whose process forks: each process recorded with allocations has charts of its
/// own, each naming its own sites and counting its own allocations.
#[test]
fn each_process_of_a_forking_command_has_its_own_charts() {
    let dir = Dir::new();
    record_allocs(&dir, &workloads().allocs, &["fork", "50"]);
    let pids = dir.pids("allocs", "parquet");
    assert_eq!(pids.len(), 2, "{pids:?}");
    let written = charts(&dir, &["--format", "json"]);
    assert_eq!(written.len(), 2, "{written:?}");
    // Sites by their lines: `forked allocs.c:N` and `child_allocs allocs.c:M`.
    let parent = format!(" allocs.c:{}", site("allocs.c", "parent"));
    let child = format!(" allocs.c:{}", site("allocs.c", "child"));
    let mut leaked = HashMap::new();
    for pid in &pids {
        let json: serde_json::Value =
            serde_json::from_str(&read(&dir, &format!("fltrace-data-allocmem-{pid}.json")))
                .expect("json");
        let labels: Vec<String> = json["sites"]
            .as_array()
            .expect("sites")
            .iter()
            .map(|s| s["label"].as_str().unwrap_or_default().to_owned())
            .collect();
        let find = |line: &str| labels.iter().find(|l| l.ends_with(line)).cloned();
        let (own, other) = match find(&child) {
            Some(label) => ((&child, label), &parent),
            None => ((&parent, find(&parent).expect("the parent's site")), &child),
        };
        assert!(find(other).is_none(), "{pid}: {labels:?}");
        let bytes = site_bytes(&json, &own.1);
        leaked.insert(own.0.clone(), *bytes.last().expect("intervals"));
    }
    // Each leaks its 50 blocks: 50 of 24 bytes in the parent, of 40 in the child.
    assert_eq!((leaked[&parent], leaked[&child]), (1200, 2000));
    let svgs = charts(&dir, &[]);
    for pid in &pids {
        assert!(
            svgs.contains(&format!("fltrace-data-allocmem-{pid}.svg")),
            "{svgs:?}"
        );
    }
}

/// heaptrack's figures per function of workloads/chartphases.c, each site in a function of
/// its own (`heaptrack_print --flamegraph-cost-type`: exact counts and bytes): calls,
/// temporary allocations, bytes leaked and bytes alive at the peak are what `report --allocs`
/// says, site by site. heaptrack's own allocation at its start (its C++ runtime's emergency
/// pool) is not the program's and is left out.
#[test]
fn heaptrack_agrees_per_site_on_calls_peak_leaks_and_temporaries() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "chartphases.c");
    let theirs = heaptrack_agrees(&dir, &program, &[], "chartphases.c");
    let mut sites: Vec<&str> = theirs.iter().map(String::as_str).collect();
    sites.sort_unstable();
    assert_eq!(sites, ["churn", "first_phase", "keep", "second_phase"]);
}

/// The same on malloc-4m (workloads/allocs.c malloc4m: 100,000 malloc/free pairs, every
/// seventh block kept a while in a ring of 1,024) beside the constructor's block and stdout's
/// buffer: the loop's 100,000 calls, its temporaries, the ring's leaks and its bytes at the
/// heap's peak as heaptrack counts them.
#[test]
fn heaptrack_agrees_per_site_on_malloc_4m() {
    let dir = Dir::new();
    let theirs = heaptrack_agrees(
        &dir,
        &workloads().allocs,
        &["malloc4m", "100000"],
        "allocs.c",
    );
    let mut sites: Vec<&str> = theirs.iter().map(String::as_str).collect();
    sites.sort_unstable();
    assert_eq!(sites, ["early", "main", "malloc4m"]);
}

/// Records `program args` with `record --allocs` and with heaptrack, and asserts that per
/// function of `file` (the innermost frame in it is the site) heaptrack's calls, temporary
/// allocations, bytes leaked and bytes alive at the peak are `report --allocs --by
/// function`'s. The functions heaptrack saw.
fn heaptrack_agrees(dir: &Dir, program: &Path, args: &[&str], file: &str) -> Vec<String> {
    record_allocs(dir, program, args);
    let out = dir.run(&["report", "--allocs", "--by", "function", "--format", "csv"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: HashMap<String, [u64; 4]> = csv_rows(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .filter(|r| r["file"].ends_with(file))
        .map(|r| {
            let n = |c: &str| r[c].parse::<u64>().unwrap_or(u64::MAX);
            (
                r["function"].clone(),
                [
                    n("allocs"),
                    n("temporary"),
                    n("leaked_bytes"),
                    n("peak_bytes"),
                ],
            )
        })
        .collect();

    let data = dir.path().join("heaptrack.data");
    let traced = std::process::Command::new("heaptrack")
        .arg("-o")
        .arg(&data)
        .arg(program)
        .args(args)
        .output()
        .expect("heaptrack runs (scripts/setup.sh installs it)");
    assert!(traced.status.success(), "{traced:?}");
    let suffix = format!(" ({file})");
    let mut theirs: HashMap<String, [u64; 4]> = HashMap::new();
    for (i, cost) in ["allocations", "temporary", "leaked", "peak"]
        .iter()
        .enumerate()
    {
        let folded = dir.path().join(format!("heaptrack.{cost}.folded"));
        let printed = std::process::Command::new("heaptrack_print")
            .args(["--flamegraph-cost-type", cost, "-F"])
            .arg(&folded)
            .arg(dir.path().join("heaptrack.data.zst"))
            .output()
            .expect("heaptrack_print runs");
        assert!(printed.status.success(), "{printed:?}");
        for line in read(dir, &format!("heaptrack.{cost}.folded")).lines() {
            // `main (chartphases.c);first_phase (chartphases.c); 64`: the innermost frame of
            // the program's own file is the site.
            let Some((stack, count)) = line.rsplit_once(' ') else {
                continue;
            };
            let Some(function) = stack
                .split(';')
                .filter_map(|f| f.strip_suffix(suffix.as_str()))
                .next_back()
            else {
                continue;
            };
            theirs.entry(function.to_owned()).or_default()[i] +=
                count.parse::<u64>().expect("count");
        }
    }
    for (function, figures) in &theirs {
        assert_eq!(
            ours.get(function),
            Some(figures),
            "{function}: calls, temporary, leaked, peak: ours {:?}, heaptrack's {figures:?}",
            ours.get(function)
        );
    }
    theirs.into_keys().collect()
}
