//! The events `fltrace count` and its siblings attach to, named as bpftrace and perf name them.

use std::fmt;
use std::path::PathBuf;

use aya::programs::perf_event::SoftwareEvent;

use crate::{Error, tracefs};

/// Software events by their perf names (several spellings, as perf and bpftrace accept).
pub const SOFTWARE_EVENTS: [(&str, SoftwareEvent); 10] = [
    ("page-faults", SoftwareEvent::PageFaults),
    ("page-fault", SoftwareEvent::PageFaults),
    ("faults", SoftwareEvent::PageFaults),
    ("minor-faults", SoftwareEvent::PageFaultsMin),
    ("major-faults", SoftwareEvent::PageFaultsMaj),
    ("context-switches", SoftwareEvent::ContextSwitches),
    ("cs", SoftwareEvent::ContextSwitches),
    ("cpu-migrations", SoftwareEvent::CpuMigrations),
    ("alignment-faults", SoftwareEvent::AlignmentFaults),
    ("emulation-faults", SoftwareEvent::EmulationFaults),
];

/// The events `fltrace count` takes, as `software:NAME`, `tracepoint:GROUP:NAME` and the
/// uprobe forms; with a pattern, those whose name contains it (the uprobe forms then left
/// out).
pub fn list(pattern: Option<&str>) -> Result<Vec<String>, Error> {
    let wanted = |name: &str| pattern.is_none_or(|p| name.contains(p));
    let software = SOFTWARE_EVENTS
        .iter()
        .filter(|(name, _)| wanted(name))
        .map(|(name, _)| format!("software:{name}"));
    let tracepoints = tracefs::list()?
        .into_iter()
        .filter(|name| wanted(name))
        .map(|name| format!("tracepoint:{name}"));
    let uprobes = ["uprobe:PATH:FUNCTION", "uretprobe:PATH:FUNCTION"]
        .into_iter()
        .filter(|_| pattern.is_none())
        .map(str::to_owned);
    Ok(software.chain(tracepoints).chain(uprobes).collect())
}

/// One event source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `category:name` under tracefs.
    Tracepoint {
        /// Its category (`syscalls`).
        category: String,
        /// Its name (`sys_enter_brk`).
        name: String,
    },
    /// A software perf event, counted at each occurrence.
    Software {
        /// Its perf name.
        name: String,
    },
    /// A user function's entry (or return, for `uretprobe:`).
    Uprobe {
        /// The ELF file.
        path: PathBuf,
        /// The function.
        symbol: String,
        /// Whether at its return.
        ret: bool,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Tracepoint { category, name } => write!(f, "tracepoint:{category}:{name}"),
            Event::Software { name } => write!(f, "software:{name}"),
            Event::Uprobe { path, symbol, ret } => write!(
                f,
                "{}:{}:{symbol}",
                if *ret { "uretprobe" } else { "uprobe" },
                path.display()
            ),
        }
    }
}

impl Event {
    /// Parses `syscalls:sys_enter_brk`, `tracepoint:syscalls:sys_enter_brk`, `page-faults`,
    /// `software:page-faults[:1]`, `uprobe:/path/lib.so:symbol`, `uretprobe:...`.
    pub fn parse(text: &str) -> Result<Event, Error> {
        let unknown = || Error::UnknownEvent(text.to_owned());
        if let Some(rest) = text
            .strip_prefix("uprobe:")
            .map(|r| (r, false))
            .or_else(|| text.strip_prefix("uretprobe:").map(|r| (r, true)))
        {
            let (spec, ret) = rest;
            let (path, symbol) = spec.rsplit_once(':').ok_or_else(unknown)?;
            if path.is_empty() || symbol.is_empty() {
                return Err(unknown());
            }
            return Ok(Event::Uprobe {
                path: path.into(),
                symbol: symbol.to_owned(),
                ret,
            });
        }
        let bare = text
            .strip_prefix("software:")
            .map(|s| s.split(':').next().unwrap_or(s))
            .unwrap_or(text);
        if software_event(bare).is_some() {
            return Ok(Event::Software {
                name: bare.to_owned(),
            });
        }
        let tp = text
            .strip_prefix("tracepoint:")
            .or_else(|| text.strip_prefix("t:"))
            .unwrap_or(text);
        let (category, name) = tp.split_once(':').ok_or_else(unknown)?;
        // A tracefs this user cannot read is said as such, not as an unknown event.
        tracefs::events_dir()?;
        if !tracefs::exists(category, name) {
            return Err(unknown());
        }
        Ok(Event::Tracepoint {
            category: category.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The fields an event offers for `--by field:` and `--filter`.
    pub fn fields(&self) -> Result<Vec<tracefs::Field>, Error> {
        match self {
            Event::Tracepoint { category, name } => tracefs::fields(category, name),
            // The registers, at their offsets in x86_64's struct pt_regs.
            Event::Uprobe { .. } => Ok(UPROBE_FIELDS
                .iter()
                .map(|&(name, index)| tracefs::Field {
                    name: name.to_owned(),
                    offset: index * 8,
                    size: 8,
                    signed: false,
                    data_loc: false,
                    char_array: false,
                })
                .collect()),
            Event::Software { .. } => Ok(Vec::new()),
        }
    }

    /// The named field, or an error listing those there are.
    pub fn field(&self, wanted: &str) -> Result<tracefs::Field, Error> {
        let fields = self.fields()?;
        if let Some(f) = fields.iter().find(|f| f.name == wanted) {
            return Ok(f.clone());
        }
        let known: Vec<_> = fields
            .iter()
            .map(|f| f.name.as_str())
            .filter(|n| !n.starts_with("common_"))
            .collect();
        Err(Error::NoField {
            event: self.to_string(),
            field: wanted.to_owned(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        })
    }
}

/// Argument and return registers of a uprobe, by index in `struct pt_regs`.
const UPROBE_FIELDS: [(&str, usize); 7] = [
    ("arg0", 14),
    ("arg1", 13),
    ("arg2", 12),
    ("arg3", 11),
    ("arg4", 9),
    ("arg5", 8),
    ("retval", 10),
];

/// The `PERF_COUNT_SW_*` number of a software event's name.
pub fn software_config(name: &str) -> Option<u32> {
    software_event(name).map(|e| e as u32)
}

pub(crate) fn software_event(name: &str) -> Option<SoftwareEvent> {
    SOFTWARE_EVENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, e)| e)
}

/// Comparison of a `--filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq = 1,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&`: any of the bits set.
    And,
}

/// `FIELD OP VALUE`, kept in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldFilter {
    /// The field's name.
    pub field: String,
    /// The comparison.
    pub op: Op,
    /// The value compared with (negative values as two's complement).
    pub value: u64,
}

impl FieldFilter {
    /// Parses `bytes_alloc > 4096`, `len>=0x1000`, `flags & 2`, `ret == -12`.
    pub fn parse(text: &str) -> Result<FieldFilter, Error> {
        let bad = || Error::BadFilter(text.to_owned());
        const OPS: [(&str, Op); 7] = [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
            ("&", Op::And),
        ];
        let (at, token, op) = OPS
            .iter()
            .filter_map(|&(token, op)| text.find(token).map(|at| (at, token, op)))
            .min_by_key(|&(at, token, _)| (at, std::cmp::Reverse(token.len())))
            .ok_or_else(bad)?;
        let field = text[..at].trim();
        let value = text[at + token.len()..].trim();
        if field.is_empty() || !field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad());
        }
        Ok(FieldFilter {
            field: field.to_owned(),
            op,
            value: parse_int(value).ok_or_else(bad)?,
        })
    }
}

impl FieldFilter {
    /// Whether a field's value passes, compared as the kernel side compares it.
    pub fn matches(&self, value: u64, signed: bool) -> bool {
        let (v, want) = (value, self.value);
        let (sv, sw) = (v as i64, want as i64);
        match self.op {
            Op::Eq => v == want,
            Op::Ne => v != want,
            Op::Lt if signed => sv < sw,
            Op::Lt => v < want,
            Op::Le if signed => sv <= sw,
            Op::Le => v <= want,
            Op::Gt if signed => sv > sw,
            Op::Gt => v > want,
            Op::Ge if signed => sv >= sw,
            Op::Ge => v >= want,
            Op::And => v & want != 0,
        }
    }
}

fn parse_int(text: &str) -> Option<u64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse().ok()?,
    };
    Some(if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_filters() {
        let f = FieldFilter::parse("bytes_alloc >= 0x1000").expect("parses");
        assert_eq!(
            (f.field.as_str(), f.op, f.value),
            ("bytes_alloc", Op::Ge, 4096)
        );
        let f = FieldFilter::parse("ret==-12").expect("parses");
        assert_eq!((f.op, f.value), (Op::Eq, (-12i64) as u64));
        let f = FieldFilter::parse("len<5").expect("parses");
        assert_eq!((f.op, f.value), (Op::Lt, 5));
        assert!(FieldFilter::parse("len ~ 5").is_err());
        assert!(FieldFilter::parse("== 5").is_err());
    }

    #[test]
    fn parses_event_names() {
        assert_eq!(
            Event::parse("software:page-faults:1").expect("parses"),
            Event::Software {
                name: "page-faults".into()
            }
        );
        assert_eq!(
            Event::parse("uprobe:/lib/x86_64-linux-gnu/libc.so.6:malloc").expect("parses"),
            Event::Uprobe {
                path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
                symbol: "malloc".into(),
                ret: false
            }
        );
        assert!(Event::parse("nosuch").is_err());
    }
}
