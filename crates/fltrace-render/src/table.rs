//! Tables that fit the terminal: every table fltrace prints goes through [`Table`], which
//! sizes each column to its content and, when the whole does not fit the width, shortens the
//! names in the middle (`libsqlite3.so…+0xa74f0`, never two different names to the same
//! text), then leaves out the columns that say least, in the order each table gives.
//! Sizes are printed in one style everywhere, binary units ([`bytes`]: `12.5 MiB`).

use std::collections::BTreeMap;

/// The width of a table when the terminal's is not known (stdout is a file or a pipe and
/// `COLUMNS` is not set).
pub const DEFAULT_WIDTH: usize = 120;

/// The narrowest width tables are laid out for: below it they still print, wider.
pub const MIN_WIDTH: usize = 80;

/// The width tables fit: `COLUMNS` if set, else the terminal's on stdout, else
/// [`DEFAULT_WIDTH`].
pub fn terminal_width() -> usize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let stdout_columns = || {
        // SAFETY: TIOCGWINSZ writes one winsize into `size`, which outlives the call.
        let got = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
        (got == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
    };
    width_of(std::env::var("COLUMNS").ok().as_deref(), stdout_columns)
}

/// `columns` (`COLUMNS`) if it is a positive number, else the terminal's, else
/// [`DEFAULT_WIDTH`].
pub(crate) fn width_of(columns: Option<&str>, terminal: impl FnOnce() -> Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .or_else(terminal)
        .unwrap_or(DEFAULT_WIDTH)
}

/// `bytes` in binary units, as every table and summary prints sizes: `512 B`, `4.0 KiB`,
/// `12.5 MiB`, `1.5 GiB`.
pub fn bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The length of the end of `chars` that tells similar names apart and is kept whole when
/// the name is shortened: a stripped frame's `+0xa74f0`, a `:line`.
fn kept_suffix(chars: &[char]) -> usize {
    let text: String = chars.iter().collect();
    if let Some(at) = text.rfind("+0x")
        && text[at + 3..].chars().all(|c| c.is_ascii_hexdigit())
        && at + 3 < text.len()
    {
        return text[at..].chars().count();
    }
    let digits = chars
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .count();
    if digits > 0 && chars.len() > digits && chars[chars.len() - digits - 1] == ':' {
        return digits + 1;
    }
    0
}

/// Where the parameter list that ends a C++ function name opens (`f(int, long)`), if the
/// name ends with one.
fn parameters_start(chars: &[char]) -> Option<usize> {
    if chars.last() != Some(&')') {
        return None;
    }
    let mut depth = 0i32;
    for (i, c) in chars.iter().enumerate().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return (i > 0).then_some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Where the function's own name begins in `chars[..end]`: after the last `::` outside
/// template arguments.
fn own_name_start(chars: &[char], end: usize) -> usize {
    let mut depth = 0i32;
    let mut i = end;
    while i > 0 {
        i -= 1;
        match chars[i] {
            '>' => depth += 1,
            '<' => depth -= 1,
            ':' if depth == 0 && i > 0 && chars[i - 1] == ':' => return i + 1,
            _ => {}
        }
    }
    0
}

/// `s` in at most `width` characters, cut in the middle where it is longer
/// (`libsqlite3.so…+0xa74f0`): a stripped frame's address or a line number is kept whole,
/// and a C++ function loses its parameter list first, then what comes before its own name
/// (`mesh::re…touch_pages(…)`).
pub fn middle(s: &str, width: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= width {
        return s.to_owned();
    }
    match width {
        0 => return String::new(),
        1 => return "…".to_owned(),
        _ => {}
    }
    if let Some(open) = parameters_start(&chars) {
        let mut short: Vec<char> = chars[..open].to_vec();
        short.extend(['(', '…', ')']);
        if short.len() <= width {
            return short.into_iter().collect();
        }
        let own = own_name_start(&chars, open);
        let tail = short.len() - own;
        if tail + 2 <= width {
            let mut out: String = short[..width - 1 - tail].iter().collect();
            out.push('…');
            out.extend(&short[own..]);
            return out;
        }
        // Even the function's own name does not fit: cut the shortened name plainly (cut
        // as a name again, its `(…)` would open a parameter list without end).
        return cut_plainly(&short, width);
    }
    cut_plainly(&chars, width)
}

/// `chars` (longer than `width`, at least 2) cut in the middle, a stripped frame's address or
/// a line number kept whole where it fits.
fn cut_plainly(chars: &[char], width: usize) -> String {
    let kept = kept_suffix(chars);
    let tail = if kept > 0 && kept + 2 <= width {
        kept
    } else {
        (width - 1) / 2
    };
    let head = width - 1 - tail;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// `chars` shown through a window of `width` characters that holds position `at`, with `…`
/// where the window cuts.
fn window(chars: &[char], at: usize, width: usize) -> String {
    if chars.len() <= width {
        return chars.iter().collect();
    }
    // Room for an ellipsis on both sides, the differing character in the middle of it.
    let inner = width.saturating_sub(2).max(1);
    let start = at.saturating_sub(inner / 2).min(chars.len() - inner);
    if start == 0 {
        let mut out: String = chars[..width - 1].iter().collect();
        out.push('…');
        return out;
    }
    if start + inner >= chars.len() {
        let mut out = "…".to_owned();
        out.extend(&chars[chars.len() - (width - 1)..]);
        return out;
    }
    let mut out = "…".to_owned();
    out.extend(&chars[start..start + inner]);
    out.push('…');
    out
}

/// Each of `names` in at most `width` characters ([`middle`]), different names never
/// reading the same: names that would are shown around the first character they differ in.
pub fn distinct(names: &[&str], width: usize) -> Vec<String> {
    let mut shown: Vec<String> = names.iter().map(|n| middle(n, width)).collect();
    if width < 3 {
        return shown;
    }
    // Each pass tells apart the names of one text by the first character where they differ;
    // names still together then share a longer prefix, so this ends.
    for _ in 0..names.iter().map(|n| n.len()).max().unwrap_or(0) {
        let mut by_text: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, text) in shown.iter().enumerate() {
            by_text.entry(text.as_str()).or_default().push(i);
        }
        let clashes: Vec<Vec<usize>> = by_text
            .into_values()
            .filter(|rows| rows.iter().any(|&i| names[i] != names[rows[0]]))
            .collect();
        if clashes.is_empty() {
            break;
        }
        for rows in clashes {
            let chars: Vec<Vec<char>> = rows.iter().map(|&i| names[i].chars().collect()).collect();
            let common = (0..)
                .take_while(|&k| {
                    chars
                        .iter()
                        .all(|c| c.get(k).is_some() && c.get(k) == chars[0].get(k))
                })
                .count();
            for (&i, c) in rows.iter().zip(&chars) {
                shown[i] = window(c, common, width);
            }
        }
    }
    shown
}

/// `text` broken into lines of at most `width` characters at spaces (a word longer than a
/// line is cut), for the sentences under tables.
pub fn wrap(text: &str, width: Option<usize>) -> String {
    let Some(width) = width.filter(|&w| w > 0) else {
        return text.to_owned();
    };
    let mut out = String::new();
    for (n, paragraph) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let mut line = String::new();
        let mut len = 0;
        for word in paragraph.split(' ') {
            let mut word: Vec<char> = word.chars().collect();
            if len > 0 && len + 1 + word.len() > width {
                out.push_str(&line);
                out.push('\n');
                line.clear();
                len = 0;
            }
            while word.len() > width {
                let rest = word.split_off(width);
                out.extend(&word);
                out.push('\n');
                word = rest;
            }
            if len > 0 {
                line.push(' ');
                len += 1;
            }
            line.extend(&word);
            len += word.len();
        }
        out.push_str(&line);
    }
    out
}

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Numbers.
    Right,
    /// Words.
    Left,
}

#[derive(Debug, Clone)]
struct Column {
    header: String,
    align: Align,
    /// A name column: shortened in the middle to fit, at least this wide while any other
    /// way to fit remains.
    name_min: Option<usize>,
    /// Left out when nothing else makes the table fit: the lowest first.
    drop: Option<u8>,
    /// Spaces before the column.
    gap: usize,
}

/// A table of text, laid out to fit a width ([`Table::render`]). Columns are added in
/// order; rows are lists of cells, each optionally followed by lines of its own (a stack's
/// callers), which are shortened to the width.
#[derive(Debug, Clone, Default)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<(Vec<String>, Vec<String>)>,
}

impl Table {
    /// An empty table.
    pub fn new() -> Table {
        Table::default()
    }

    /// A column never shortened (numbers, short words).
    pub fn column(mut self, header: &str, align: Align) -> Table {
        let gap = usize::from(!self.columns.is_empty());
        self.columns.push(Column {
            header: header.to_owned(),
            align,
            name_min: None,
            drop: None,
            gap,
        });
        self
    }

    /// A column of names, left-aligned, shortened in the middle to fit, at least `min`
    /// characters wide while the table can fit otherwise.
    pub fn name(mut self, header: &str, min: usize) -> Table {
        self = self.column(header, Align::Left);
        if let Some(column) = self.columns.last_mut() {
            column.name_min = Some(min);
        }
        self
    }

    /// The last column added is left out when the table does not fit otherwise, those of
    /// lower `priority` first.
    pub fn droppable(mut self, priority: u8) -> Table {
        if let Some(column) = self.columns.last_mut() {
            column.drop = Some(priority);
        }
        self
    }

    /// `spaces` before the last column added (1 by default).
    pub fn gap(mut self, spaces: usize) -> Table {
        if let Some(column) = self.columns.last_mut() {
            column.gap = spaces;
        }
        self
    }

    /// Adds a row of cells, one per column.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push((cells, Vec::new()));
    }

    /// Adds a line under the last row (indented text, shortened to the width).
    pub fn under(&mut self, line: String) {
        if let Some((_, lines)) = self.rows.last_mut() {
            lines.push(line);
        }
    }

    /// The widths of the columns shown (`None` for one left out) within `width`.
    fn layout(&self, width: Option<usize>) -> Vec<Option<usize>> {
        let natural: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(c, column)| {
                self.rows
                    .iter()
                    .map(|(cells, _)| cells.get(c).map_or(0, |s| s.chars().count()))
                    .chain([column.header.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut widths: Vec<Option<usize>> = natural.iter().copied().map(Some).collect();
        let Some(width) = width else {
            return widths;
        };
        let total = |widths: &[Option<usize>]| -> usize {
            let mut first = true;
            let mut sum = 0;
            for (column, w) in self.columns.iter().zip(widths) {
                if let Some(w) = w {
                    sum += w + if first { 0 } else { column.gap };
                    first = false;
                }
            }
            sum
        };
        // Narrows the widest name columns, one character at a time, down to `floor`.
        let shrink = |widths: &mut Vec<Option<usize>>, floor: &dyn Fn(&Column) -> usize| {
            while total(widths) > width {
                let widest = self
                    .columns
                    .iter()
                    .zip(widths.iter())
                    .enumerate()
                    .filter_map(|(c, (column, w))| {
                        let w = (*w)?;
                        (column.name_min.is_some() && w > floor(column)).then_some((w, c))
                    })
                    .max();
                match widest {
                    Some((w, c)) => widths[c] = Some(w - 1),
                    None => break,
                }
            }
        };
        loop {
            let mut tried = widths.clone();
            shrink(&mut tried, &|column| column.name_min.unwrap_or(0));
            if total(&tried) <= width {
                return tried;
            }
            // A column to leave out: the lowest priority, the rightmost of equals.
            let dropped = self
                .columns
                .iter()
                .enumerate()
                .filter(|(c, _)| widths[*c].is_some())
                .filter_map(|(c, column)| column.drop.map(|p| (std::cmp::Reverse(p), c)))
                .max();
            match dropped {
                Some((_, c)) => widths[c] = None,
                None => {
                    shrink(&mut widths, &|_| 1);
                    return widths;
                }
            }
        }
    }

    /// The table with its header, fitting `width` columns where it can (`None`: every cell
    /// whole). Trailing spaces are trimmed.
    pub fn render(&self, width: Option<usize>) -> String {
        let widths = self.layout(width);
        // Each name column's cells, shortened together so that no two read the same.
        let cells: Vec<Vec<String>> = self
            .columns
            .iter()
            .enumerate()
            .map(|(c, column)| {
                let texts: Vec<&str> = self
                    .rows
                    .iter()
                    .map(|(cells, _)| cells.get(c).map_or("", String::as_str))
                    .collect();
                match (column.name_min, widths[c]) {
                    (Some(_), Some(w)) => distinct(&texts, w),
                    _ => texts.iter().map(|&t| t.to_owned()).collect(),
                }
            })
            .collect();
        let line = |texts: &mut dyn Iterator<Item = (usize, &str)>| -> String {
            let mut out = String::new();
            let mut first = true;
            for (c, text) in texts {
                let Some(w) = widths[c] else { continue };
                let column = &self.columns[c];
                if !first {
                    out.extend(std::iter::repeat_n(' ', column.gap));
                }
                first = false;
                let text = middle(text, w);
                match column.align {
                    Align::Right => out.push_str(&format!("{text:>w$}")),
                    Align::Left => out.push_str(&format!("{text:<w$}")),
                }
            }
            out.trim_end().to_owned()
        };
        let mut out = line(
            &mut self
                .columns
                .iter()
                .enumerate()
                .map(|(c, column)| (c, column.header.as_str())),
        );
        out.push('\n');
        for (r, (_, under)) in self.rows.iter().enumerate() {
            out.push_str(&line(
                &mut cells
                    .iter()
                    .enumerate()
                    .map(|(c, column)| (c, column[r].as_str())),
            ));
            out.push('\n');
            for text in under {
                out.push_str(&fit_line(text, width));
                out.push('\n');
            }
        }
        out
    }

    /// Whether column `header` is shown at `width`.
    pub fn shows(&self, header: &str, width: Option<usize>) -> bool {
        let widths = self.layout(width);
        self.columns
            .iter()
            .zip(widths)
            .any(|(column, w)| column.header == header && w.is_some())
    }
}

/// `line` in at most `width` characters, its leading spaces kept and the rest cut in the
/// middle.
pub fn fit_line(line: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return line.to_owned();
    };
    let text = line.trim_start();
    let indent = line.len() - text.len();
    let indent_text = &line[..indent];
    format!(
        "{indent_text}{}",
        middle(
            text,
            width.saturating_sub(indent_text.chars().count()).max(1)
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `COLUMNS` wins when it is a positive number; else the terminal, else 120.
    #[test]
    fn table_width() {
        assert_eq!(width_of(Some(" 90 "), || Some(80)), 90);
        assert_eq!(width_of(Some("0"), || Some(80)), 80);
        assert_eq!(width_of(Some("wide"), || None), DEFAULT_WIDTH);
        assert_eq!(width_of(None, || None), DEFAULT_WIDTH);
    }

    /// Names are cut in the middle; a stripped frame's address and a line stay whole.
    #[test]
    fn cut_in_the_middle() {
        assert_eq!(middle("short", 8), "short");
        assert_eq!(
            middle("libsqlite3.so.0.8.6+0xa74f0", 22),
            "libsqlite3.so…+0xa74f0"
        );
        assert_eq!(middle("dl-reloc.c:301", 12), "dl-relo…:301");
        assert_eq!(middle("a_long_function", 7), "a_l…ion");
        assert_eq!(middle("abc", 1), "…");
        // A C++ function: its parameters go first, then its scope.
        let cxx = "mesh::refinement_pool<mesh::subdivision_policy>::touch_pages(char volatile*, unsigned long)";
        assert_eq!(
            middle(cxx, 63),
            "mesh::refinement_pool<mesh::subdivision_policy>::touch_pages(…)"
        );
        assert_eq!(
            middle(cxx, 62),
            "mesh::refinement_pool<mesh::subdivision_policy>…touch_pages(…)"
        );
        assert_eq!(middle(cxx, 16), "m…touch_pages(…)");
        // Narrower than the function's own name: cut plainly, once (this recursed without end).
        assert_eq!(middle("ns::a_long_name(int)", 8), "ns::…(…)");
        assert_eq!(middle("f(a)(b)", 4), "f(…)");
        assert_eq!(middle(cxx, 24), "mesh::ref…touch_pages(…)");
        // Overloads that the cut would make one read apart by their parameters.
        let overloads = ["ns::function(int)", "ns::function(long)"];
        let shown = distinct(&overloads, 14);
        assert_ne!(shown[0], shown[1], "{shown:?}");
    }

    /// Two names that the middle cut would make one read apart, at the first character they
    /// differ in; equal names stay equal.
    #[test]
    fn different_names_never_read_the_same() {
        let names = [
            "namespace::function_with_a_long_name_one_suffix_the_same",
            "namespace::function_with_a_long_name_two_suffix_the_same",
            "namespace::function_with_a_long_name_one_suffix_the_same",
            "short",
        ];
        let shown = distinct(&names, 20);
        assert_ne!(shown[0], shown[1], "{shown:?}");
        assert_eq!(shown[0], shown[2]);
        assert_eq!(shown[3], "short");
        assert!(shown.iter().all(|s| s.chars().count() <= 20), "{shown:?}");
        assert!(
            shown[0].contains("one") && shown[1].contains("two"),
            "{shown:?}"
        );
        // Stripped frames of one library keep their addresses.
        let frames = [
            "libstripped-with-a-long-name.so.0.8.6+0x1139",
            "libstripped-with-a-long-name.so.0.8.6+0x1160",
        ];
        let shown = distinct(&frames, 16);
        assert_eq!(shown, ["libstrip…+0x1139", "libstrip…+0x1160"]);
    }

    /// Sentences break at spaces within the width.
    #[test]
    fn wrapped_at_spaces() {
        assert_eq!(wrap("aa bb cc", Some(5)), "aa bb\ncc");
        assert_eq!(wrap("abcdefgh", Some(3)), "abc\ndef\ngh");
        assert_eq!(wrap("aa bb", None), "aa bb");
    }

    /// Names shrink to their minimum first, then droppable columns go, lowest first; what
    /// remains fits.
    #[test]
    fn fits_by_shrinking_then_dropping() {
        let mut table = Table::new()
            .column("#", Align::Right)
            .column("count", Align::Right)
            .column("extra", Align::Right)
            .droppable(1)
            .name("function", 8)
            .name("file", 6);
        table.row(vec![
            "1".into(),
            "100".into(),
            "x".into(),
            "a_very_long_function_name".into(),
            "a_long_file.c:12".into(),
        ]);
        table.under("    <- a caller with a long name that goes on and on".into());
        let wide = table.render(None);
        assert!(
            wide.contains("a_very_long_function_name a_long_file.c:12"),
            "{wide}"
        );
        let fit = table.render(Some(30));
        assert!(fit.lines().all(|l| l.chars().count() <= 30), "{fit}");
        assert!(fit.contains("extra"), "{fit}");
        let narrow = table.render(Some(24));
        assert!(narrow.lines().all(|l| l.chars().count() <= 24), "{narrow}");
        assert!(!narrow.contains("extra"), "{narrow}");
        assert!(narrow.contains(":12"), "{narrow}");
        assert!(narrow.contains("    <- "), "{narrow}");
    }

    /// Sizes in binary units.
    #[test]
    fn sizes_binary() {
        assert_eq!(bytes(333), "333 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(3 << 19), "1.5 MiB");
    }
}
