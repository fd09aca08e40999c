//! Tracepoints as tracefs describes them: the list and each event's field layout.

use std::path::{Path, PathBuf};

use crate::Error;

/// One field of a tracepoint's record, from its `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its name.
    pub name: String,
    /// Byte offset in the record.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// Whether it is a signed integer.
    pub signed: bool,
}

/// The tracefs mount point.
pub fn root() -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

/// The `events` directory of tracefs; when tracefs is closed to this user, the error says
/// what opens it (an unreadable tracefs must not make every event "unknown").
pub(crate) fn events_dir() -> Result<PathBuf, Error> {
    match fltrace_capture::sys::tracefs() {
        Ok(root) => Ok(root.join("events")),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(Error::Unsupported(format!("tracefs: {e}")))
        }
        Err(_) => Err(Error::Unsupported(
            "tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)".into(),
        )),
    }
}

/// Every tracepoint as `category:name`, sorted.
pub fn list() -> Result<Vec<String>, Error> {
    let events = events_dir()?;
    let mut out = Vec::new();
    for category in std::fs::read_dir(&events)
        .map_err(Error::io(&events))?
        .flatten()
    {
        let Ok(names) = std::fs::read_dir(category.path()) else {
            continue;
        };
        for name in names.flatten() {
            if name.path().join("format").is_file() {
                out.push(format!(
                    "{}:{}",
                    category.file_name().to_string_lossy(),
                    name.file_name().to_string_lossy()
                ));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Whether the tracepoint exists.
pub fn exists(category: &str, name: &str) -> bool {
    events_dir().is_ok_and(|e| e.join(category).join(name).join("format").is_file())
}

/// The fields of a tracepoint (the common_* header fields included).
pub fn fields(category: &str, name: &str) -> Result<Vec<Field>, Error> {
    let path = events_dir()?.join(category).join(name).join("format");
    let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
    Ok(parse_format(&text))
}

/// Parses a tracefs `format` file.
pub fn parse_format(text: &str) -> Vec<Field> {
    text.lines().filter_map(parse_field_line).collect()
}

fn parse_field_line(line: &str) -> Option<Field> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.trim().split(';') {
        let part = part.trim();
        if let Some(d) = part.strip_prefix("field:") {
            decl = Some(d);
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = v.parse().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.parse().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v == "1";
        }
    }
    let decl = decl?;
    // `unsigned long i_ino`, `char comm[16]`, `__data_loc char[] name`: the last word, less
    // any array suffix.
    let last = decl.split_whitespace().last()?;
    let name = last.split('[').next()?.trim_start_matches('*');
    Some(Field {
        name: name.to_owned(),
        offset: offset?,
        size: size?,
        signed,
    })
}

/// The id of a tracepoint (for perf_event_open).
pub fn id(category: &str, name: &str) -> Result<u64, Error> {
    let path = events_dir()?.join(category).join(name).join("id");
    read_u64(&path)
}

fn read_u64(path: &Path) -> Result<u64, Error> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    text.trim()
        .parse()
        .map_err(|_| Error::Unsupported(format!("{} does not hold a number", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_of_a_format_file() {
        let text = "name: mm_filemap_fault\nID: 597\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
            \tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
            \tfield:char comm[16];\toffset:20;\tsize:16;\tsigned:1;\n\
            \tfield:__data_loc char[] name;\toffset:36;\tsize:4;\tsigned:0;\n\nprint fmt: \"x\"\n";
        let fields = parse_format(text);
        let names: Vec<_> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["common_type", "i_ino", "s_dev", "comm", "name"]);
        assert_eq!(
            fields[2],
            Field {
                name: "s_dev".into(),
                offset: 16,
                size: 4,
                signed: false
            }
        );
        assert!(fields[3].signed);
    }
}
