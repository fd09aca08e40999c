//! The access traces of `fltrace wss`: for each interval, address ranges and how much of them
//! was accessed (`fltrace-data-wss-<pid>.csv` from reference bits, `fltrace-data-damon-<pid>.csv`
//! from DAMON). The heatmap reads them beside the fault traces.

use std::path::Path;

use crate::{Error, VirtAddr};

/// Which measurement a range trace holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeTraceKind {
    /// Reference bits: `value` is the bytes of the range referenced during the interval.
    ReferencedBytes,
    /// DAMON: `value` is the access count of the region the range lay in.
    DamonAccesses,
}

/// One range of one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RangeSample {
    /// End of the interval, seconds since sampling began.
    pub time_s: f64,
    /// First address.
    pub start: VirtAddr,
    /// Address after the last.
    pub end: VirtAddr,
    /// Bytes referenced or access count (see [`RangeTraceKind`]).
    pub value: u64,
}

/// The header of a reference-bit trace; its first four columns are [`RangeSample`]'s.
pub const REFERENCED_HEADER: [&str; 6] = [
    "time_s",
    "start",
    "end",
    "referenced_bytes",
    "rss_bytes",
    "path",
];

/// The header of a DAMON trace.
pub const DAMON_HEADER: [&str; 4] = ["time_s", "start", "end", "nr_accesses"];

/// Reads a wss or damon trace; its header says which.
pub fn read_range_trace(path: &Path) -> Result<(RangeTraceKind, Vec<RangeSample>), Error> {
    let format = |message: String| Error::Format {
        path: path.to_owned(),
        message,
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        // Reference-bit rows have six fields, DAMON rows four.
        .flexible(true)
        .from_reader(crate::files::open_input(path)?);
    let mut records = reader.records();
    let header = match records.next() {
        Some(header) => header.map_err(|e| csv_error(path, e))?,
        None => csv::StringRecord::new(),
    };
    let starts_with = |expected: &[&str]| {
        header.len() >= expected.len() && header.iter().zip(expected).all(|(a, b)| a == *b)
    };
    let kind = if starts_with(&REFERENCED_HEADER[..4]) {
        RangeTraceKind::ReferencedBytes
    } else if starts_with(&DAMON_HEADER) {
        RangeTraceKind::DamonAccesses
    } else {
        return Err(format(
            "not a wss or damon trace (unexpected header)".into(),
        ));
    };
    let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
    let mut samples = Vec::new();
    for record in records {
        let record = record.map_err(|e| csv_error(path, e))?;
        let line = record.position().map_or(0, csv::Position::line);
        if record.len() == 1 && record[0].is_empty() {
            continue;
        }
        let sample = (|| {
            Some(RangeSample {
                time_s: record.get(0)?.parse().ok()?,
                start: VirtAddr::new(hex(record.get(1)?)?),
                end: VirtAddr::new(hex(record.get(2)?)?),
                value: record.get(3)?.parse().ok()?,
            })
        })();
        samples.push(
            sample
                .ok_or_else(|| format(format!("line {line}: not `time_s,start,end,value,...`")))?,
        );
    }
    Ok((kind, samples))
}

fn csv_error(path: &Path, error: csv::Error) -> Error {
    if !error.is_io_error() {
        return Error::Format {
            path: path.to_owned(),
            message: error.to_string(),
        };
    }
    match error.into_kind() {
        csv::ErrorKind::Io(source) => Error::Io {
            path: path.to_owned(),
            source,
        },
        other => Error::Format {
            path: path.to_owned(),
            message: format!("{other:?}"),
        },
    }
}

/// A range trace being written: rows are kept in memory and the file is created by
/// [`RangeTraceWriter::write`], after sampling, so that nothing is left half-written.
pub struct RangeTraceWriter {
    kind: RangeTraceKind,
    csv: csv::Writer<Vec<u8>>,
    rows: usize,
}

impl RangeTraceWriter {
    /// An empty trace of `kind`, with its header.
    pub fn new(kind: RangeTraceKind) -> RangeTraceWriter {
        let mut csv = csv::Writer::from_writer(Vec::new());
        let header: &[&str] = match kind {
            RangeTraceKind::ReferencedBytes => &REFERENCED_HEADER,
            RangeTraceKind::DamonAccesses => &DAMON_HEADER,
        };
        // Writing into memory cannot fail.
        let _ = csv.write_record(header);
        RangeTraceWriter { kind, csv, rows: 0 }
    }

    /// Which trace this is.
    pub fn kind(&self) -> RangeTraceKind {
        self.kind
    }

    /// Rows added so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// A row of a reference-bit trace: `sample.value` bytes referenced of the range,
    /// `rss_bytes` resident, in the mapping named `mapping`.
    pub fn push_referenced(&mut self, sample: &RangeSample, rss_bytes: u64, mapping: &str) {
        debug_assert_eq!(self.kind, RangeTraceKind::ReferencedBytes);
        let [time, start, end, value] = fields(sample);
        let _ = self.csv.write_record([
            time.as_str(),
            &start,
            &end,
            &value,
            &rss_bytes.to_string(),
            mapping,
        ]);
        self.rows += 1;
    }

    /// A row of a DAMON trace: `sample.value` is the region's access count.
    pub fn push_accesses(&mut self, sample: &RangeSample) {
        debug_assert_eq!(self.kind, RangeTraceKind::DamonAccesses);
        let _ = self.csv.write_record(fields(sample));
        self.rows += 1;
    }

    /// The trace as written so far.
    pub fn bytes(&mut self) -> &[u8] {
        let _ = self.csv.flush();
        self.csv.get_ref()
    }

    /// Writes the trace to `path` (a new file, or one of the user's own; see
    /// [`crate::files::create`]).
    pub fn write(mut self, path: &Path) -> Result<(), Error> {
        use std::io::Write as _;
        let bytes = self.bytes();
        crate::files::create(path)?
            .write_all(bytes)
            .map_err(Error::io(path))
    }
}

/// One interval of `fltrace wss`: when it ended and how much was accessed and resident. A row
/// of the CSV the command prints ([`WssRows`]) and a point of its working-set plot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WssRow {
    /// End of the interval, seconds since sampling began.
    pub time_s: f64,
    /// Bytes accessed in the interval: the working-set size.
    pub wss_bytes: u64,
    /// Bytes resident.
    pub rss_bytes: u64,
}

/// The header of `fltrace wss`'s rows ([`WssRows`]).
pub const WSS_HEADER: [&str; 3] = ["time_s", "wss_bytes", "rss_bytes"];

/// `fltrace wss`'s rows as CSV (`time_s,wss_bytes,rss_bytes`, time in milliseconds), each
/// flushed as it comes: the command's progress, read live by other programs.
pub struct WssRows<W: std::io::Write>(csv::Writer<W>);

impl<W: std::io::Write> WssRows<W> {
    /// Writes the header to `out`.
    pub fn new(out: W) -> std::io::Result<WssRows<W>> {
        let mut csv = csv::Writer::from_writer(out);
        csv.write_record(WSS_HEADER)?;
        csv.flush()?;
        Ok(WssRows(csv))
    }

    /// Writes and flushes one row.
    pub fn row(&mut self, row: &WssRow) -> std::io::Result<()> {
        self.0.write_record([
            format!("{:.3}", row.time_s),
            row.wss_bytes.to_string(),
            row.rss_bytes.to_string(),
        ])?;
        self.0.flush()
    }
}

/// Time in milliseconds, addresses in hex: the text the traces have always had.
fn fields(sample: &RangeSample) -> [String; 4] {
    [
        format!("{:.3}", sample.time_s),
        format!("{:#x}", sample.start),
        format!("{:#x}", sample.end),
        sample.value.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose output reaches `flushed` only when flushed, as a pipe's reader sees it.
    #[derive(Default)]
    struct Pipe {
        pending: Vec<u8>,
        flushed: std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
    }

    impl std::io::Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.pending.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.flushed.borrow_mut().append(&mut self.pending);
            Ok(())
        }
    }

    /// The header and each row reach the reader as they come, time to the millisecond.
    #[test]
    fn wss_rows_are_written_and_flushed_one_by_one() {
        let pipe = Pipe::default();
        let seen = pipe.flushed.clone();
        let text = || String::from_utf8(seen.borrow().clone()).unwrap();
        let mut rows = WssRows::new(pipe).unwrap();
        assert_eq!(text(), "time_s,wss_bytes,rss_bytes\n");
        rows.row(&WssRow {
            time_s: 0.1004,
            wss_bytes: 4096,
            rss_bytes: 1 << 20,
        })
        .unwrap();
        assert_eq!(text(), "time_s,wss_bytes,rss_bytes\n0.100,4096,1048576\n");
        rows.row(&WssRow {
            time_s: 12.3456,
            wss_bytes: 0,
            rss_bytes: 8192,
        })
        .unwrap();
        assert_eq!(
            text(),
            "time_s,wss_bytes,rss_bytes\n0.100,4096,1048576\n12.346,0,8192\n"
        );
    }

    /// Both traces' rows come back with their kind; a foreign file is refused.
    #[test]
    fn reads_wss_and_damon_traces() {
        let dir = tempfile::tempdir().unwrap();
        let wss = dir.path().join("w.csv");
        std::fs::write(
            &wss,
            "time_s,start,end,referenced_bytes,rss_bytes,path\n0.100,0x1000,0x3000,4096,8192,[heap]\n",
        )
        .unwrap();
        let (kind, rows) = read_range_trace(&wss).unwrap();
        assert_eq!(kind, RangeTraceKind::ReferencedBytes);
        assert_eq!(
            rows,
            vec![RangeSample {
                time_s: 0.1,
                start: VirtAddr::new(0x1000),
                end: VirtAddr::new(0x3000),
                value: 4096
            }]
        );
        let damon = dir.path().join("d.csv");
        std::fs::write(
            &damon,
            "time_s,start,end,nr_accesses\n1.5,0x7f0000,0x7f2000,7\n",
        )
        .unwrap();
        let (kind, rows) = read_range_trace(&damon).unwrap();
        assert_eq!(
            (kind, rows[0].value, rows[0].end),
            (RangeTraceKind::DamonAccesses, 7, VirtAddr::new(0x7f2000))
        );
        std::fs::write(&damon, "a,b\n").unwrap();
        assert!(read_range_trace(&damon).is_err());
    }

    /// Written rows read back as they were pushed; a mapping name with a comma is quoted
    /// rather than splitting its row; the text is the one the traces have always had.
    #[test]
    fn written_traces_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let sample = |time_s, start, end, value| RangeSample {
            time_s,
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            value,
        };
        let mut wss = RangeTraceWriter::new(RangeTraceKind::ReferencedBytes);
        wss.push_referenced(&sample(0.1, 0x1000, 0x3000, 4096), 8192, "[heap]");
        wss.push_referenced(&sample(0.25, 0x7f00, 0x9f00, 0), 4096, "/opt/a,b/lib.so");
        wss.push_referenced(&sample(0.25, 0xa000, 0xb000, 4096), 4096, "");
        assert_eq!(wss.rows(), 3);
        assert_eq!(
            String::from_utf8_lossy(wss.bytes()),
            "time_s,start,end,referenced_bytes,rss_bytes,path\n\
             0.100,0x1000,0x3000,4096,8192,[heap]\n\
             0.250,0x7f00,0x9f00,0,4096,\"/opt/a,b/lib.so\"\n\
             0.250,0xa000,0xb000,4096,4096,\n"
        );
        let path = dir.path().join("w.csv");
        wss.write(&path).unwrap();
        let (kind, rows) = read_range_trace(&path).unwrap();
        assert_eq!(kind, RangeTraceKind::ReferencedBytes);
        assert_eq!(
            rows,
            vec![
                sample(0.1, 0x1000, 0x3000, 4096),
                sample(0.25, 0x7f00, 0x9f00, 0),
                sample(0.25, 0xa000, 0xb000, 4096)
            ]
        );

        let mut damon = RangeTraceWriter::new(RangeTraceKind::DamonAccesses);
        damon.push_accesses(&sample(1.5, 0x7f0000, 0x7f2000, 7));
        let path = dir.path().join("d.csv");
        damon.write(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "time_s,start,end,nr_accesses\n1.500,0x7f0000,0x7f2000,7\n"
        );
        let (kind, rows) = read_range_trace(&path).unwrap();
        assert_eq!(
            (kind, rows),
            (
                RangeTraceKind::DamonAccesses,
                vec![sample(1.5, 0x7f0000, 0x7f2000, 7)]
            )
        );
    }

    /// A malformed row is refused with its line number.
    #[test]
    fn malformed_row_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.csv");
        std::fs::write(
            &path,
            "time_s,start,end,nr_accesses\n1.5,0x10,0x20,1\n2.0,zz,0x30,1\n",
        )
        .unwrap();
        let err = read_range_trace(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("line 3: not `time_s,start,end,value,...`"),
            "{err}"
        );
    }
}
