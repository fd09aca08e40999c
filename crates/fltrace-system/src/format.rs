//! Tracepoint formats: the id and the fields of `events/<group>/<name>/format` under tracefs,
//! parsed at run time, and the decoding of a sample's raw bytes by field name. Offsets and
//! sizes differ between kernels (the same tracepoint gains and loses fields), so nothing here
//! is hard-coded.

use std::path::Path;

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
    /// Reads `events/<group>/<name>/{id,format}` under `tracefs`; a missing tracepoint is
    /// [`Error::Missing`].
    pub fn read(tracefs: &Path, group: &str, name: &str) -> Result<TracepointFormat, Error> {
        let dir = tracefs.join("events").join(group).join(name);
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

    /// Whether tracefs has `group:name`.
    pub fn exists(tracefs: &Path, group: &str, name: &str) -> bool {
        tracefs
            .join("events")
            .join(group)
            .join(name)
            .join("id")
            .is_file()
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
        // `char comm[16]`: the name is before the brackets.
        let (name, array) = match last.split_once('[') {
            Some((name, _)) => (name.to_owned(), true),
            None => (last.to_owned(), false),
        };
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
}
