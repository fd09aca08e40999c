//! Tracepoints as tracefs describes them, for both mechanisms: where tracefs is, the list of
//! tracepoints, and the id and fields of `events/<group>/<name>/format`, parsed at run time,
//! with the decoding of a sample's raw bytes by field name. Offsets and sizes differ between
//! kernels (the same tracepoint gains and loses fields), so nothing here is hard-coded.

use std::path::{Path, PathBuf};

use crate::Error;

/// One field of a tracepoint's raw record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's name (`pid`, `comm`...).
    pub name: String,
    /// Byte offset in the raw record.
    pub offset: usize,
    /// Size in bytes (of the descriptor, for `__data_loc` fields).
    pub size: usize,
    /// Whether it is a signed integer.
    pub signed: bool,
    /// A `__data_loc` field: a u32 whose low half is the offset of the data and the high half
    /// its length (dynamic strings such as `oom:mark_victim`'s `comm`).
    pub data_loc: bool,
    /// A fixed `char name[N]` array.
    pub char_array: bool,
}

/// A tracepoint's id and fields.
#[derive(Debug, Clone)]
pub struct TracepointFormat {
    /// `group:name`.
    pub name: String,
    /// The id to open it with.
    pub id: u64,
    /// Its fields, common ones included.
    pub fields: Vec<Field>,
}

impl TracepointFormat {
    /// Reads `events/<group>/<name>/{id,format}` under tracefs; a missing tracepoint is
    /// [`Error::Missing`].
    pub fn read(group: &str, name: &str) -> Result<TracepointFormat, Error> {
        let dir = events_dir()?.join(group).join(name);
        let full = format!("{group}:{name}");
        let missing = |_| Error::Missing {
            what: format!("tracepoint {full}"),
            detail: format!(" ({} is absent)", dir.display()),
        };
        let id_text = std::fs::read_to_string(dir.join("id")).map_err(missing)?;
        let text = std::fs::read_to_string(dir.join("format")).map_err(missing)?;
        let id = id_text.trim().parse().map_err(|_| Error::Kernel {
            what: format!("the id of {full}"),
            source: std::io::Error::other(format!("unreadable: {id_text:?}")),
            hint: "",
        })?;
        Ok(TracepointFormat {
            name: full,
            id,
            fields: parse_fields(&text),
        })
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// A view of `raw` (a sample's `PERF_SAMPLE_RAW` bytes) decoding this format.
    pub fn decode<'a>(&'a self, raw: &'a [u8]) -> Decoded<'a> {
        Decoded { format: self, raw }
    }
}

/// The `events` directory of tracefs; when tracefs is closed to this user, the error says
/// what opens it (an unreadable tracefs must not make every event "unknown").
pub fn events_dir() -> Result<PathBuf, Error> {
    match fltrace_capture::perf::tracefs() {
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
    Ok(parse_fields(&text))
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

/// Parses the field lines of a format file, e.g.
/// `field:__data_loc char[] comm;` then `offset:12;`, `size:4;`, `signed:0;` (tab-separated).
pub fn parse_fields(format: &str) -> Vec<Field> {
    let mut fields = Vec::new();
    for line in format.lines() {
        let mut decl = None;
        let (mut offset, mut size, mut signed) = (None, None, false);
        for part in line.split(';') {
            let part = part.trim();
            if let Some(d) = part.strip_prefix("field:") {
                decl = Some(d.trim().to_owned());
            } else if let Some(v) = part.strip_prefix("offset:") {
                offset = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("signed:") {
                signed = v.trim() == "1";
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            continue;
        };
        let Some(last) = decl.split_whitespace().last() else {
            continue;
        };
        // `unsigned long i_ino`, `char comm[16]`, `__data_loc char[] name`, `void *ptr`: the
        // last word, less any array suffix or pointer star.
        let (name, array) = match last.split_once('[') {
            Some((name, _)) => (name, true),
            None => (last, false),
        };
        let name = name.trim_start_matches('*').to_owned();
        let data_loc = decl.starts_with("__data_loc");
        fields.push(Field {
            char_array: array && !data_loc && decl.contains("char"),
            name,
            offset,
            size,
            signed,
            data_loc,
        });
    }
    fields
}

/// A raw record seen through its format.
#[derive(Clone, Copy)]
pub struct Decoded<'a> {
    format: &'a TracepointFormat,
    raw: &'a [u8],
}

impl Decoded<'_> {
    fn bytes(&self, name: &str) -> Option<(&Field, &[u8])> {
        let field = self.format.field(name)?;
        let bytes = self.raw.get(field.offset..field.offset + field.size)?;
        Some((field, bytes))
    }

    /// An integer field, sign-extended if the format says it is signed.
    pub fn i64(&self, name: &str) -> Option<i64> {
        let (field, bytes) = self.bytes(name)?;
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        let value = u64::from_ne_bytes(word);
        Some(if field.signed && n < 8 {
            let shift = 64 - 8 * n as u32;
            ((value << shift) as i64) >> shift
        } else {
            value as i64
        })
    }

    /// An integer field as unsigned.
    pub fn u64(&self, name: &str) -> Option<u64> {
        let (_, bytes) = self.bytes(name)?;
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        Some(u64::from_ne_bytes(word))
    }

    /// A string field, `__data_loc` or `char[N]`, up to its first NUL.
    pub fn str(&self, name: &str) -> Option<String> {
        let (field, bytes) = self.bytes(name)?;
        let text = if field.data_loc {
            let loc = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
            let (offset, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            self.raw.get(offset..offset + len)?
        } else {
            bytes
        };
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        Some(String::from_utf8_lossy(&text[..end]).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// oom:mark_victim of Linux 6.18, as its format file lists it.
    pub(crate) const MARK_VICTIM: &str = "name: mark_victim\nID: 609\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;\n\
        \tfield:__data_loc char[] comm;\toffset:12;\tsize:4;\tsigned:0;\n\
        \tfield:unsigned long total_vm;\toffset:16;\tsize:8;\tsigned:0;\n\
        \tfield:unsigned long anon_rss;\toffset:24;\tsize:8;\tsigned:0;\n\
        \tfield:short oom_score_adj;\toffset:64;\tsize:2;\tsigned:1;\n\n\
        print fmt: \"pid=%d comm=%s\", REC->pid, __get_str(comm)\n";

    /// Fields, dynamic strings and signed short integers decode by name.
    #[test]
    fn decodes_fields_by_name() {
        let format = TracepointFormat {
            name: "oom:mark_victim".into(),
            id: 609,
            fields: parse_fields(MARK_VICTIM),
        };
        let comm = format.field("comm").expect("comm");
        assert!(comm.data_loc);
        let mut raw = vec![0u8; 80];
        raw[8..12].copy_from_slice(&4321i32.to_ne_bytes());
        raw[16..24].copy_from_slice(&123456u64.to_ne_bytes());
        raw[64..66].copy_from_slice(&(-1000i16).to_ne_bytes());
        // "victim\0" at offset 72, 7 bytes.
        raw[72..79].copy_from_slice(b"victim\0");
        raw[12..16].copy_from_slice(&((7u32 << 16) | 72).to_ne_bytes());
        let d = format.decode(&raw);
        assert_eq!(d.i64("pid"), Some(4321));
        assert_eq!(d.u64("total_vm"), Some(123456));
        assert_eq!(d.i64("oom_score_adj"), Some(-1000));
        assert_eq!(d.str("comm").as_deref(), Some("victim"));
        assert_eq!(d.u64("no_such_field"), None);
    }

    /// `char comm[16]` arrays are strings named without their brackets.
    #[test]
    fn char_arrays_are_strings() {
        let fields = parse_fields("\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n");
        assert_eq!(fields[0].name, "comm");
        assert!(fields[0].char_array);
        let format = TracepointFormat {
            name: "x:y".into(),
            id: 1,
            fields,
        };
        let mut raw = vec![0u8; 24];
        raw[8..12].copy_from_slice(b"bash");
        assert_eq!(format.decode(&raw).str("comm").as_deref(), Some("bash"));
    }

    #[test]
    fn parses_fields_of_a_format_file() {
        let text = "name: mm_filemap_fault\nID: 597\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\
            \tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\
            \tfield:char comm[16];\toffset:20;\tsize:16;\tsigned:1;\n\
            \tfield:__data_loc char[] name;\toffset:36;\tsize:4;\tsigned:0;\n\nprint fmt: \"x\"\n";
        let fields = parse_fields(text);
        let names: Vec<_> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["common_type", "i_ino", "s_dev", "comm", "name"]);
        assert_eq!(
            fields[2],
            Field {
                name: "s_dev".into(),
                offset: 16,
                size: 4,
                signed: false,
                data_loc: false,
                char_array: false,
            }
        );
        assert!(fields[3].signed);
    }
}
