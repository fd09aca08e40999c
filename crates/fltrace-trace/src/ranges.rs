//! The access traces of `fltrace wss`: for each interval, address ranges and how much of them
//! was accessed (`fltrace-data-wss-<pid>.csv` from reference bits, `fltrace-data-damon-<pid>.csv`
//! from DAMON). The heatmap reads them beside the fault traces.

use std::path::Path;

use crate::Error;

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
    pub start: u64,
    /// Address after the last.
    pub end: u64,
    /// Bytes referenced or access count (see [`RangeTraceKind`]).
    pub value: u64,
}

/// Reads a wss or damon trace; its header says which.
pub fn read_range_trace(path: &Path) -> Result<(RangeTraceKind, Vec<RangeSample>), Error> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let kind = if header.starts_with("time_s,start,end,referenced_bytes") {
        RangeTraceKind::ReferencedBytes
    } else if header.starts_with("time_s,start,end,nr_accesses") {
        RangeTraceKind::DamonAccesses
    } else {
        return Err(Error::Format {
            path: path.to_owned(),
            message: "not a wss or damon trace (unexpected header)".into(),
        });
    };
    let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
    let samples = lines
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, line)| {
            let mut fields = line.split(',');
            let sample = (|| {
                Some(RangeSample {
                    time_s: fields.next()?.parse().ok()?,
                    start: hex(fields.next()?)?,
                    end: hex(fields.next()?)?,
                    value: fields.next()?.parse().ok()?,
                })
            })();
            sample.ok_or_else(|| Error::Format {
                path: path.to_owned(),
                message: format!("line {}: not `time_s,start,end,value,...`", i + 2),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((kind, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

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
                start: 0x1000,
                end: 0x3000,
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
            (RangeTraceKind::DamonAccesses, 7, 0x7f2000)
        );
        std::fs::write(&damon, "a,b\n").unwrap();
        assert!(read_range_trace(&damon).is_err());
    }
}
