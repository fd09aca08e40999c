//! jitdump files: what a JIT writes about each piece of code it generates (`jit-PID.dump`, the
//! format perf reads, tools/perf/Documentation/jitdump-specification.txt in the Linux tree), as
//! node's `--perf-prof`, Java's perf agent and wasmtime write them. A `JIT_CODE_LOAD` record
//! names the code at an address range and gives it an index, a `JIT_CODE_DEBUG_INFO` record
//! before it gives its source lines, a `JIT_CODE_MOVE` moves code by its index.
//!
//! The file comes from the traced program: every size is checked against what is left of its
//! record before anything is read or allocated, and reading stops at the first record that
//! does not hold together, keeping the code named before it ([`JitDump::stopped`]).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use crate::Error;

/// The largest jitdump copied into a recording: code bytes make them large, a few hundred MB
/// after hours of a busy JIT.
pub const JITDUMP_CAP: u64 = 4 << 30;

const FILE_HEADER: usize = 40;
const RECORD_HEADER: u32 = 16;
/// pid, tid, vma, code_addr, code_size, code_index.
const LOAD_FIELDS: u64 = 40;
/// pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
const MOVE_FIELDS: u64 = 48;
/// code_addr, nr_entry.
const DEBUG_FIELDS: u64 = 16;
/// An entry's addr, line, discrim, then at least the file name's NUL.
const DEBUG_ENTRY_MIN: u64 = 17;
/// The most of one record read into memory (a load's name, a debug record's entries); the
/// code bytes are skipped, never read.
const RECORD_READ_CAP: u64 = 64 << 20;

const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;
const JIT_CODE_DEBUG_INFO: u32 = 2;

/// V8 writes its debug entries' addresses 0x40 past the code (the ELF header `perf inject`
/// puts before the code in the file it makes) and fills the header's reserved word with
/// 0xdeadbeef, which tells its files apart: their lines are moved back.
const V8_RESERVED: u32 = 0xdead_beef;
const V8_LINE_SHIFT: u64 = 0x40;

/// Why a jitdump could not be read, or where reading it stopped.
#[derive(Debug, thiserror::Error)]
pub enum JitDumpError {
    /// The file could not be read.
    #[error("reading it")]
    Io(#[source] std::io::Error),
    /// The first four bytes are neither `JiTD` nor `DTiJ`.
    #[error("not a jitdump file (it starts with {0:02x?}, not JiTD)")]
    Magic([u8; 4]),
    /// The file ends inside its header.
    #[error("its header is cut short at {0} bytes (a jitdump header has 40)")]
    ShortHeader(u64),
    /// The header says it is smaller than a header.
    #[error("its header says {0} bytes (a jitdump header has 40)")]
    HeaderSize(u32),
    /// A version this reader does not know.
    #[error("version {0} (only version 1 is known)")]
    Version(u32),
    /// A record that does not hold together: reading stops there.
    #[error("record {index} at byte {offset}: {problem}")]
    Record {
        /// Its number, from 0.
        index: u64,
        /// Where it starts in the file.
        offset: u64,
        /// What is wrong with it.
        problem: RecordProblem,
    },
}

/// What is wrong with one record.
#[derive(Debug, thiserror::Error)]
pub enum RecordProblem {
    /// Its size is below the record header's.
    #[error("its size {0} is below the 16-byte record header")]
    TooSmall(u32),
    /// The file ends inside it.
    #[error("cut short: {read} of its {size} bytes are in the file")]
    CutShort {
        /// Its size.
        size: u64,
        /// Bytes of it the file holds.
        read: u64,
    },
    /// Smaller than the fixed fields of its kind.
    #[error("a {kind} record of {size} bytes, shorter than its {needed} bytes of fields")]
    ShortFields {
        /// The record kind.
        kind: &'static str,
        /// Its size.
        size: u64,
        /// What its fields need.
        needed: u64,
    },
    /// A load's code does not fit its record.
    #[error("{code} bytes of code do not fit its {size} bytes")]
    CodeOverruns {
        /// The code size it gives.
        code: u64,
        /// Its size.
        size: u64,
    },
    /// A name without its terminating NUL inside the record.
    #[error("the {0} has no terminating NUL inside the record")]
    Unterminated(&'static str),
    /// A part to be read into memory is larger than any real one.
    #[error("{what} of {len} bytes (more than the {cap} read)")]
    TooLarge {
        /// What it is.
        what: &'static str,
        /// Its size.
        len: u64,
        /// The most read.
        cap: u64,
    },
    /// More debug entries than the record can hold.
    #[error("{entries} debug entries cannot fit its {size} bytes")]
    TooManyEntries {
        /// The entry count it gives.
        entries: u64,
        /// Its size.
        size: u64,
    },
    /// Code whose end is past the address space.
    #[error("code at {start:#x} of {size} bytes ends past the address space")]
    AddressOverflow {
        /// Its start.
        start: u64,
        /// Its size.
        size: u64,
    },
}

/// One source position of JIT code: from `addr` to the next position's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitLine {
    /// The first address it covers.
    pub addr: u64,
    /// The source file as the JIT names it.
    pub file: Arc<str>,
    /// The line, from 1.
    pub line: u32,
    /// The column (V8) or discriminator the JIT gives, 0 when none.
    pub column: u32,
}

/// One piece of code a `JIT_CODE_LOAD` named, where it is now (after its moves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitCode {
    /// Its first address.
    pub start: u64,
    /// The address after it.
    pub end: u64,
    /// The function's name as the JIT gives it (node: `JS:*hot /app/hot.js:2:18`).
    pub name: Arc<str>,
    /// The JIT's index for it, which moves refer to.
    pub code_index: u64,
    /// Its source positions by address, from the debug record before its load.
    pub lines: Arc<[JitLine]>,
}

impl JitCode {
    /// The source position covering `addr`, if its debug record gave one.
    pub fn line_at(&self, addr: u64) -> Option<&JitLine> {
        let after = self.lines.partition_point(|l| l.addr <= addr);
        after.checked_sub(1).and_then(|i| self.lines.get(i))
    }
}

/// The code a jitdump names, by address; code written over older code replaces it.
#[derive(Debug, Default)]
pub struct JitDump {
    /// start -> code.
    code: BTreeMap<u64, JitCode>,
    /// code index -> start, for moves.
    starts: HashMap<u64, u64>,
    /// The pid in the header (the JIT's own, in its pid namespace).
    pub pid: u32,
    /// Records read whole.
    pub records: u64,
    /// Moves whose code index no load named (applied to nothing).
    pub unmatched_moves: u64,
    /// Where reading stopped before the end of the file, and why; the code named before it
    /// is kept.
    pub stopped: Option<JitDumpError>,
}

/// A byte order's integer readers.
#[derive(Debug, Clone, Copy)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u32(self, bytes: &[u8], at: usize) -> u32 {
        let mut word = [0u8; 4];
        if let Some(b) = bytes.get(at..at + 4) {
            word.copy_from_slice(b);
        }
        match self {
            Endian::Little => u32::from_le_bytes(word),
            Endian::Big => u32::from_be_bytes(word),
        }
    }

    fn u64(self, bytes: &[u8], at: usize) -> u64 {
        let mut word = [0u8; 8];
        if let Some(b) = bytes.get(at..at + 8) {
            word.copy_from_slice(b);
        }
        match self {
            Endian::Little => u64::from_le_bytes(word),
            Endian::Big => u64::from_be_bytes(word),
        }
    }
}

/// A reader that counts the bytes it gave.
struct Counted<R> {
    inner: R,
    offset: u64,
}

impl<R: Read> Counted<R> {
    /// Fills `buf` as far as the input goes: the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, JitDumpError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(JitDumpError::Io(e)),
            }
        }
        self.offset += filled as u64;
        Ok(filled)
    }

    /// Skips `len` bytes: the bytes skipped.
    fn skip(&mut self, len: u64) -> Result<u64, JitDumpError> {
        let skipped = std::io::copy(&mut (&mut self.inner).take(len), &mut std::io::sink())
            .map_err(JitDumpError::Io)?;
        self.offset += skipped;
        Ok(skipped)
    }
}

/// The part of a name before its NUL.
fn terminated<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a [u8], RecordProblem> {
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .ok_or(RecordProblem::Unterminated(what))?;
    Ok(&bytes[..end])
}

impl JitDump {
    /// Reads the jitdump at `path`, refused beyond [`JITDUMP_CAP`] bytes.
    pub fn read(path: &Path) -> Result<JitDump, Error> {
        let file = crate::files::open_input(path)?;
        let len = file
            .metadata()
            .map_err(|source| Error::Io {
                path: path.to_owned(),
                source,
            })?
            .len();
        if len > JITDUMP_CAP {
            return Err(crate::files::too_big(path, len, JITDUMP_CAP));
        }
        JitDump::parse(std::io::BufReader::with_capacity(1 << 16, file)).map_err(|e| {
            Error::Format {
                path: path.to_owned(),
                message: crate::error_chain(&e),
            }
        })
    }

    /// Parses a jitdump: an error when its header is not one; a record that does not hold
    /// together ends the reading, said in [`JitDump::stopped`].
    pub fn parse(reader: impl Read) -> Result<JitDump, JitDumpError> {
        let mut input = Counted {
            inner: reader,
            offset: 0,
        };
        let mut header = [0u8; FILE_HEADER];
        let read = input.fill(&mut header)?;
        let magic = [header[0], header[1], header[2], header[3]];
        let endian = match &magic {
            b"DTiJ" => Endian::Little,
            b"JiTD" => Endian::Big,
            _ if read < 4 => return Err(JitDumpError::ShortHeader(read as u64)),
            _ => return Err(JitDumpError::Magic(magic)),
        };
        if read < FILE_HEADER {
            return Err(JitDumpError::ShortHeader(read as u64));
        }
        let version = endian.u32(&header, 4);
        if version > 1 {
            return Err(JitDumpError::Version(version));
        }
        let header_size = endian.u32(&header, 8);
        if (header_size as usize) < FILE_HEADER {
            return Err(JitDumpError::HeaderSize(header_size));
        }
        let extra = u64::from(header_size) - FILE_HEADER as u64;
        let skipped = input.skip(extra)?;
        if skipped < extra {
            return Err(JitDumpError::ShortHeader(FILE_HEADER as u64 + skipped));
        }
        let line_shift = if endian.u32(&header, 16) == V8_RESERVED {
            V8_LINE_SHIFT
        } else {
            0
        };
        let mut dump = JitDump {
            pid: endian.u32(&header, 20),
            ..JitDump::default()
        };
        let mut reading = Reading {
            endian,
            line_shift,
            files: HashMap::new(),
            pending_lines: None,
        };
        loop {
            let offset = input.offset;
            match reading.record(&mut input, &mut dump) {
                Ok(true) => dump.records += 1,
                Ok(false) => break,
                Err(Stop::Io(e)) => return Err(e),
                Err(Stop::Record(problem)) => {
                    dump.stopped = Some(JitDumpError::Record {
                        index: dump.records,
                        offset,
                        problem,
                    });
                    break;
                }
            }
        }
        Ok(dump)
    }

    /// The code covering `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&JitCode> {
        let (_, code) = self.code.range(..=addr).next_back()?;
        (addr < code.end).then_some(code)
    }

    /// How many pieces of code it names.
    pub fn len(&self) -> usize {
        self.code.len()
    }

    /// Whether it names none.
    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    /// Adds `code`, replacing every older piece it overlaps.
    fn insert(&mut self, code: JitCode) {
        // The ranges kept never overlap, so those ending after `start` are the last ones
        // starting before `end`.
        let overlapping: Vec<u64> = self
            .code
            .range(..code.end)
            .rev()
            .take_while(|(_, c)| c.end > code.start)
            .map(|(s, _)| *s)
            .collect();
        for start in overlapping {
            self.code.remove(&start);
        }
        self.starts.insert(code.code_index, code.start);
        self.code.insert(code.start, code);
    }

    /// Moves the code of `index` to `new_start`, `size` bytes, its lines with it.
    fn move_code(&mut self, index: u64, new_start: u64, size: u64) {
        let old = self
            .starts
            .get(&index)
            .and_then(|start| self.code.get(start))
            .filter(|c| c.code_index == index)
            .map(|c| c.start);
        let Some(code) = old.and_then(|start| self.code.remove(&start)) else {
            self.unmatched_moves += 1;
            return;
        };
        let lines: Vec<JitLine> = code
            .lines
            .iter()
            .map(|l| JitLine {
                addr: l.addr.wrapping_sub(code.start).wrapping_add(new_start),
                ..l.clone()
            })
            .collect();
        self.insert(JitCode {
            start: new_start,
            end: new_start.saturating_add(size),
            lines: lines.into(),
            ..code
        });
    }
}

/// Why reading records stopped early.
enum Stop {
    Io(JitDumpError),
    Record(RecordProblem),
}

impl From<JitDumpError> for Stop {
    fn from(e: JitDumpError) -> Stop {
        Stop::Io(e)
    }
}

/// The state of reading the records of one file.
struct Reading {
    endian: Endian,
    /// Subtracted from debug entries' addresses (V8's).
    line_shift: u64,
    /// File names, each kept once.
    files: HashMap<Vec<u8>, Arc<str>>,
    /// The lines of the last debug record, for the load of the code at that address.
    pending_lines: Option<(u64, Vec<JitLine>)>,
}

impl Reading {
    /// Reads `len` bytes of a record into memory, within the cap.
    fn body<R: Read>(
        &self,
        input: &mut Counted<R>,
        len: u64,
        what: &'static str,
        size: u64,
    ) -> Result<Vec<u8>, Stop> {
        if len > RECORD_READ_CAP {
            return Err(Stop::Record(RecordProblem::TooLarge {
                what,
                len,
                cap: RECORD_READ_CAP,
            }));
        }
        let mut bytes = vec![0u8; len as usize];
        let read = input.fill(&mut bytes)?;
        if (read as u64) < len {
            return Err(Stop::Record(RecordProblem::CutShort {
                size,
                read: u64::from(RECORD_HEADER) + read as u64,
            }));
        }
        Ok(bytes)
    }

    /// Skips the rest of a record.
    fn skip<R: Read>(&self, input: &mut Counted<R>, len: u64, size: u64) -> Result<(), Stop> {
        let skipped = input.skip(len)?;
        if skipped < len {
            return Err(Stop::Record(RecordProblem::CutShort {
                size,
                read: size - (len - skipped),
            }));
        }
        Ok(())
    }

    /// Reads one record into `dump`: false at the end of the file.
    fn record<R: Read>(
        &mut self,
        input: &mut Counted<R>,
        dump: &mut JitDump,
    ) -> Result<bool, Stop> {
        let mut header = [0u8; RECORD_HEADER as usize];
        let read = input.fill(&mut header)?;
        if read == 0 {
            return Ok(false);
        }
        if read < header.len() {
            return Err(Stop::Record(RecordProblem::CutShort {
                size: u64::from(RECORD_HEADER),
                read: read as u64,
            }));
        }
        let kind = self.endian.u32(&header, 0);
        let size = self.endian.u32(&header, 4);
        if size < RECORD_HEADER {
            return Err(Stop::Record(RecordProblem::TooSmall(size)));
        }
        let size = u64::from(size);
        let body = size - u64::from(RECORD_HEADER);
        let short = |kind: &'static str, needed: u64| {
            Stop::Record(RecordProblem::ShortFields {
                kind,
                size,
                needed: needed + u64::from(RECORD_HEADER),
            })
        };
        match kind {
            JIT_CODE_LOAD => {
                // The fields, the name's NUL at least.
                if body < LOAD_FIELDS + 1 {
                    return Err(short("JIT_CODE_LOAD", LOAD_FIELDS + 1));
                }
                let fields = self.body(input, LOAD_FIELDS, "JIT_CODE_LOAD fields", size)?;
                let code_addr = self.endian.u64(&fields, 16);
                let code_size = self.endian.u64(&fields, 24);
                let code_index = self.endian.u64(&fields, 32);
                let name_len = (body - LOAD_FIELDS)
                    .checked_sub(code_size)
                    .filter(|&n| n > 0)
                    .ok_or(Stop::Record(RecordProblem::CodeOverruns {
                        code: code_size,
                        size,
                    }))?;
                let name = self.body(input, name_len, "JIT_CODE_LOAD name", size)?;
                let name = terminated(&name, "function name").map_err(Stop::Record)?;
                let end = code_addr.checked_add(code_size).ok_or(Stop::Record(
                    RecordProblem::AddressOverflow {
                        start: code_addr,
                        size: code_size,
                    },
                ))?;
                let name: Arc<str> = String::from_utf8_lossy(name).into();
                self.skip(input, code_size, size)?;
                let lines = match self.pending_lines.take() {
                    Some((addr, lines)) if addr == code_addr => lines,
                    _ => Vec::new(),
                };
                dump.insert(JitCode {
                    start: code_addr,
                    end,
                    name,
                    code_index,
                    lines: lines.into(),
                });
            }
            JIT_CODE_MOVE => {
                if body < MOVE_FIELDS {
                    return Err(short("JIT_CODE_MOVE", MOVE_FIELDS));
                }
                let fields = self.body(input, MOVE_FIELDS, "JIT_CODE_MOVE fields", size)?;
                self.skip(input, body - MOVE_FIELDS, size)?;
                let new_start = self.endian.u64(&fields, 24);
                let code_size = self.endian.u64(&fields, 32);
                let code_index = self.endian.u64(&fields, 40);
                if new_start.checked_add(code_size).is_none() {
                    return Err(Stop::Record(RecordProblem::AddressOverflow {
                        start: new_start,
                        size: code_size,
                    }));
                }
                dump.move_code(code_index, new_start, code_size);
            }
            JIT_CODE_DEBUG_INFO => {
                if body < DEBUG_FIELDS {
                    return Err(short("JIT_CODE_DEBUG_INFO", DEBUG_FIELDS));
                }
                let bytes = self.body(input, body, "JIT_CODE_DEBUG_INFO record", size)?;
                let lines = self.debug_lines(&bytes, size).map_err(Stop::Record)?;
                self.pending_lines = Some((self.endian.u64(&bytes, 0), lines));
            }
            // JIT_CODE_CLOSE, JIT_CODE_UNWINDING_INFO and kinds of later versions.
            _ => self.skip(input, body, size)?,
        }
        Ok(true)
    }

    /// The source positions of a debug record's body, sorted by address.
    fn debug_lines(&mut self, bytes: &[u8], size: u64) -> Result<Vec<JitLine>, RecordProblem> {
        let entries = self.endian.u64(bytes, 8);
        let room = (bytes.len() as u64 - DEBUG_FIELDS) / DEBUG_ENTRY_MIN;
        if entries > room {
            return Err(RecordProblem::TooManyEntries { entries, size });
        }
        let mut lines: Vec<JitLine> = Vec::with_capacity(entries as usize);
        let mut at = DEBUG_FIELDS as usize;
        for _ in 0..entries {
            let fixed = bytes
                .get(at..at + 16)
                .ok_or(RecordProblem::Unterminated("debug entry's file name"))?;
            let addr = self.endian.u64(fixed, 0);
            let line = self.endian.u32(fixed, 8);
            let column = self.endian.u32(fixed, 12);
            at += 16;
            let name = terminated(
                bytes.get(at..).unwrap_or_default(),
                "debug entry's file name",
            )?;
            at += name.len() + 1;
            // `\xff` alone: the previous entry's file (perf's Java agent writes it).
            let file = match (name, lines.last()) {
                ([0xff], Some(previous)) => previous.file.clone(),
                _ => self
                    .files
                    .entry(name.to_vec())
                    .or_insert_with(|| String::from_utf8_lossy(name).into())
                    .clone(),
            };
            lines.push(JitLine {
                addr: addr.wrapping_sub(self.line_shift),
                file,
                line,
                column,
            });
        }
        lines.sort_by_key(|l| l.addr);
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes jitdump records as a JIT does, in little-endian or big-endian order.
    struct Writer {
        big: bool,
        bytes: Vec<u8>,
    }

    impl Writer {
        fn new(big: bool, reserved: u32) -> Writer {
            let mut w = Writer {
                big,
                bytes: Vec::new(),
            };
            w.bytes
                .extend_from_slice(if big { b"JiTD" } else { b"DTiJ" });
            w.u32(1);
            w.u32(40);
            w.u32(62);
            w.u32(reserved);
            w.u32(4242);
            w.u64(123);
            w.u64(0);
            w
        }

        fn u32(&mut self, v: u32) {
            let b = if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            self.bytes.extend_from_slice(&b);
        }

        fn u64(&mut self, v: u64) {
            let b = if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            self.bytes.extend_from_slice(&b);
        }

        fn record(&mut self, kind: u32, body: impl FnOnce(&mut Writer)) {
            let mut inner = Writer {
                big: self.big,
                bytes: Vec::new(),
            };
            body(&mut inner);
            self.u32(kind);
            self.u32(16 + inner.bytes.len() as u32);
            self.u64(0);
            self.bytes.extend_from_slice(&inner.bytes);
        }

        fn load(&mut self, addr: u64, size: u64, index: u64, name: &str) {
            self.record(JIT_CODE_LOAD, |w| {
                w.u32(1);
                w.u32(1);
                w.u64(addr);
                w.u64(addr);
                w.u64(size);
                w.u64(index);
                w.bytes.extend_from_slice(name.as_bytes());
                w.bytes.push(0);
                w.bytes.extend(std::iter::repeat_n(0xcc, size as usize));
            });
        }

        fn debug(&mut self, addr: u64, entries: &[(u64, u32, &[u8])]) {
            self.record(JIT_CODE_DEBUG_INFO, |w| {
                w.u64(addr);
                w.u64(entries.len() as u64);
                for (a, line, file) in entries {
                    w.u64(*a);
                    w.u32(*line);
                    w.u32(0);
                    w.bytes.extend_from_slice(file);
                    w.bytes.push(0);
                }
            });
        }

        fn move_code(&mut self, old: u64, new: u64, size: u64, index: u64) {
            self.record(JIT_CODE_MOVE, |w| {
                w.u32(1);
                w.u32(1);
                w.u64(new);
                w.u64(old);
                w.u64(new);
                w.u64(size);
                w.u64(index);
            });
        }
    }

    /// A file with every record kind: loads (one with lines), an unwinding record, an
    /// unknown kind, a move, a load over older code, a close.
    fn sample(big: bool, reserved: u32, shift: u64) -> Vec<u8> {
        let mut w = Writer::new(big, reserved);
        w.debug(
            0x1000,
            &[
                (0x1000 + shift, 10, b"app.js"),
                (0x1008 + shift, 11, &[0xff]),
                (0x100c + shift, 12, b"lib.js"),
            ],
        );
        w.load(0x1000, 0x10, 1, "JS:*hot app.js:10");
        w.record(4, |w| w.bytes.extend_from_slice(&[0u8; 24]));
        w.record(77, |w| w.bytes.extend_from_slice(b"later kind"));
        w.load(0x2000, 0x10, 2, "cold");
        w.move_code(0x2000, 0x3000, 0x10, 2);
        w.load(0x4000, 0x10, 3, "stale");
        w.load(0x4008, 0x8, 4, "over");
        w.record(3, |_| {});
        w.bytes
    }

    /// Loads name their ranges with their lines (V8's shifted ones moved back, `\xff` the
    /// previous file), moves take the code and its index along, later code over older code
    /// wins, other kinds are skipped; both byte orders.
    #[test]
    fn names_code_lines_and_moves() {
        for (big, reserved, shift) in [(false, 0, 0), (true, 0, 0), (false, V8_RESERVED, 0x40)] {
            let dump = JitDump::parse(&sample(big, reserved, shift)[..]).unwrap();
            assert!(dump.stopped.is_none(), "{:?}", dump.stopped);
            assert_eq!((dump.pid, dump.records, dump.len()), (4242, 9, 3));
            let hot = dump.lookup(0x1004).unwrap();
            assert_eq!((hot.start, hot.end), (0x1000, 0x1010));
            assert_eq!((&*hot.name, hot.code_index), ("JS:*hot app.js:10", 1));
            let line = hot.line_at(0x1009).unwrap();
            assert_eq!((&*line.file, line.line), ("app.js", 11));
            assert_eq!(hot.line_at(0x1000).unwrap().line, 10);
            let line = hot.line_at(0x100f).unwrap();
            assert_eq!((&*line.file, line.line), ("lib.js", 12));
            assert!(dump.lookup(0x1010).is_none());
            assert!(dump.lookup(0x2000).is_none(), "moved away");
            let moved = dump.lookup(0x300f).unwrap();
            assert_eq!((&*moved.name, moved.code_index), ("cold", 2));
            assert!(dump.lookup(0x3010).is_none());
            // "over" replaced all of "stale".
            assert!(dump.lookup(0x4000).is_none());
            assert_eq!(&*dump.lookup(0x4008).unwrap().name, "over");
        }
    }

    /// A move keeps the code's lines at the same offsets.
    #[test]
    fn moved_code_keeps_its_lines() {
        let mut w = Writer::new(false, 0);
        w.debug(0x1000, &[(0x1000, 5, b"a.js"), (0x1004, 6, b"a.js")]);
        w.load(0x1000, 8, 9, "f");
        w.move_code(0x1000, 0x5000, 8, 9);
        w.move_code(0x7000, 0x8000, 8, 99);
        let dump = JitDump::parse(&w.bytes[..]).unwrap();
        let f = dump.lookup(0x5005).unwrap();
        assert_eq!(f.line_at(0x5005).unwrap().line, 6);
        assert_eq!(f.line_at(0x5003).unwrap().line, 5);
        assert_eq!(dump.unmatched_moves, 1);
    }

    /// Each way a file can be wrong gives its own message, and what was read before a bad
    /// record is kept.
    #[test]
    fn bad_files_say_what_is_wrong() {
        let message = |bytes: &[u8]| match JitDump::parse(bytes) {
            Err(e) => e.to_string(),
            Ok(d) => d.stopped.map(|e| e.to_string()).unwrap_or_default(),
        };
        assert!(
            message(b"ELF\x7f and more bytes than a header has, forty at least....")
                .starts_with("not a jitdump file")
        );
        assert_eq!(
            message(b"DTiJ\x01\0\0\0"),
            "its header is cut short at 8 bytes (a jitdump header has 40)"
        );
        let mut v2 = Writer::new(false, 0).bytes;
        v2[4] = 2;
        assert_eq!(message(&v2), "version 2 (only version 1 is known)");

        let mut w = Writer::new(false, 0);
        w.load(0x1000, 8, 1, "kept");
        let good = w.bytes.len() as u64;
        w.u32(0);
        w.u32(3);
        w.u64(0);
        w.bytes.extend_from_slice(&[0u8; 64]);
        let dump = JitDump::parse(&w.bytes[..]).unwrap();
        assert_eq!(
            dump.stopped.as_ref().unwrap().to_string(),
            format!("record 1 at byte {good}: its size 3 is below the 16-byte record header")
        );
        assert_eq!(&*dump.lookup(0x1000).unwrap().name, "kept");

        let mut w = Writer::new(false, 0);
        w.record(JIT_CODE_DEBUG_INFO, |w| {
            w.u64(0x1000);
            w.u64(u64::MAX);
            w.bytes.extend_from_slice(&[0u8; 40]);
        });
        assert_eq!(
            message(&w.bytes),
            "record 0 at byte 40: 18446744073709551615 debug entries cannot fit its 72 bytes"
        );

        let mut w = Writer::new(false, 0);
        w.record(JIT_CODE_LOAD, |w| {
            w.bytes.extend_from_slice(&[0u8; 24]);
            w.u64(1 << 40);
            w.u64(0);
            w.bytes.extend_from_slice(b"f\0");
        });
        assert_eq!(
            message(&w.bytes),
            "record 0 at byte 40: 1099511627776 bytes of code do not fit its 58 bytes"
        );

        let mut w = Writer::new(false, 0);
        w.load(0x1000, 8, 1, "cut");
        w.bytes.truncate(w.bytes.len() - 3);
        assert_eq!(
            message(&w.bytes),
            "record 0 at byte 40: cut short: 65 of its 68 bytes are in the file"
        );
    }

    /// Fuzz-style: every prefix of a valid file, every byte flipped, and pseudo-random bytes
    /// after a valid header parse without a panic, into an error or the code before the damage.
    #[test]
    fn corrupted_files_never_panic() {
        let file = sample(false, V8_RESERVED, 0x40);
        for len in 0..file.len() {
            let _ = JitDump::parse(&file[..len]);
        }
        for at in 0..file.len() {
            for flip in [0xff, 0x80, 0x01] {
                let mut bytes = file.clone();
                bytes[at] ^= flip;
                if let Ok(dump) = JitDump::parse(&bytes[..]) {
                    for addr in [0x1000, 0x1008, 0x2000, 0x3000, 0x4008] {
                        if let Some(code) = dump.lookup(addr) {
                            let _ = code.line_at(addr);
                        }
                    }
                }
            }
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut bytes = file[..FILE_HEADER].to_vec();
            for _ in 0..(state % 300) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                bytes.push((state >> 24) as u8);
            }
            let _ = JitDump::parse(&bytes[..]);
        }
    }
}
