//! `fltrace-data-stacks-<pid>.parquet` (and the allocation and access stacks, of the same
//! layout): the deduplicated call stacks other tables refer to by id.

use std::path::Path;

use parquet::data_type::Int64Type;

use super::Origin;
use super::reader::{GroupColumns, ReadRow, RowGroups};
use super::writer::{Columns, TableRow, TableWriter};
use crate::{CodeAddr, Error, Stack, StackEnd};

impl TableRow for Stack {
    const SCHEMA: &'static str = "message stack {
  required binary recording (STRING);
  required int32 pid;
  required int32 stack_id;
  required int32 generation;
  required group frames (LIST) {
    repeated group list {
      required int64 element;
    }
  }
  required int32 stack_end;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &[];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        _first: u64,
        batch: &[Stack],
    ) -> parquet::errors::Result<()> {
        c.origin(origin, batch.len())?;
        c.i32(batch.iter().map(|s| s.id))?;
        c.i32(batch.iter().map(|s| s.generation))?;
        // A list column: definition level 0 marks an empty list, repetition level 0 the
        // first element of each row.
        let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
        for stack in batch {
            if stack.frames.is_empty() {
                def.push(0);
                rep.push(0);
            }
            for (i, frame) in stack.frames.iter().enumerate() {
                values.push(frame.get() as i64);
                def.push(1);
                rep.push(i16::from(i > 0));
            }
        }
        c.write::<Int64Type>(&values, Some(&def), Some(&rep))?;
        c.i32(batch.iter().map(|s| s.end.code()))
    }
}

impl ReadRow for Stack {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<Stack>, Error> {
        let (ids, generations) = (c.u32s("stack_id")?, c.u32s("generation")?);
        // Recordings made before stacks were classified have no `stack_end`.
        let ends = if c.has_column("stack_end") {
            c.u32s("stack_end")?
        } else {
            Vec::new()
        };
        let frames = c.list::<Int64Type>("frames")?;
        let mut stacks: Vec<Stack> = Vec::with_capacity(ids.len());
        let mut values = frames.values.iter();
        for (def, rep) in frames.def.iter().zip(&frames.rep) {
            if *rep == 0 {
                let row = stacks.len();
                let (Some(&id), Some(&generation)) = (ids.get(row), generations.get(row)) else {
                    return Err(c.error("more stack lists than rows"));
                };
                stacks.push(Stack {
                    end: ends
                        .get(row)
                        .map_or(StackEnd::Unknown, |&code| StackEnd::from_code(code)),
                    id,
                    generation,
                    frames: Vec::new(),
                });
            }
            if *def == 1 {
                let (Some(stack), Some(value)) = (stacks.last_mut(), values.next()) else {
                    return Err(c.error("stack frames without a stack"));
                };
                stack.frames.push(CodeAddr::new(*value as u64));
            }
        }
        if stacks.len() != ids.len() {
            return Err(c.error(format!(
                "{} stack lists for {} rows",
                stacks.len(),
                ids.len()
            )));
        }
        Ok(stacks)
    }
}

/// Writes `fltrace-data-stacks-<pid>.parquet`.
pub type StackWriter = TableWriter<Stack>;

/// Reads a stacks file.
pub fn read_stacks(path: &Path) -> Result<Vec<Stack>, Error> {
    RowGroups::open_table(path)?.read_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::read_origin;
    use crate::tables::writer::CheckpointedFile;

    /// Stacks read back exactly: every end kind, an empty stack, the largest address.
    #[test]
    fn stacks_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let stacks_path = dir.path().join("s.parquet");
        let mut writer = StackWriter::create(&stacks_path).unwrap();
        let expected = vec![
            Stack {
                end: StackEnd::Complete,
                id: 0,
                generation: 0,
                frames: [1, 2, 3].map(CodeAddr::new).to_vec(),
            },
            Stack {
                end: StackEnd::Unknown,
                id: 1,
                generation: 0,
                frames: vec![],
            },
            Stack {
                end: StackEnd::Truncated,
                id: 2,
                generation: 1,
                frames: [u64::MAX, 7].map(CodeAddr::new).to_vec(),
            },
        ];
        for s in &expected {
            writer.push(s.clone()).unwrap();
        }
        writer.finish().unwrap();
        assert_eq!(read_stacks(&stacks_path).unwrap(), expected);
    }

    /// The stacks table of layout 1 (no `recording`, `pid` or `stack_end`) still reads.
    #[test]
    fn layout_1_stacks_read() {
        const OLD_STACK_SCHEMA: &str = "message stack {
          required int32 stack_id (INTEGER(32,false));
          required int32 generation (INTEGER(32,false));
          required group frames (LIST) {
            repeated group list {
              required int64 element (INTEGER(64,false));
            }
          }
        }";
        let dir = tempfile::tempdir().unwrap();
        let stacks_path = dir.path().join("s.parquet");
        let mut table =
            CheckpointedFile::create(&stacks_path, OLD_STACK_SCHEMA, &[], &[], &[]).unwrap();
        table
            .row_group(|c| {
                c.i32([3].into_iter())?;
                c.i32([0].into_iter())?;
                c.write::<Int64Type>(&[10, 11], Some(&[1, 1]), Some(&[0, 1]))
            })
            .unwrap();
        table.finish().unwrap();
        assert_eq!(
            read_stacks(&stacks_path).unwrap(),
            vec![Stack {
                end: StackEnd::Unknown,
                id: 3,
                generation: 0,
                frames: [10, 11].map(CodeAddr::new).to_vec()
            }]
        );
        assert_eq!(read_origin(&stacks_path).unwrap(), None);
    }
}
