//! `fltrace report -g`: the call tree of faults as `perf report -g` draws its call graph
//! (`graph` mode: percentages of all faults), or one JSON document.

use std::fmt::Write as _;

use fltrace_analyze::{CallNode, CallOrder, CallTree, percent};
use serde_json::{Value, json};

use crate::Error;
use crate::TableFormat;

/// Branches holding less than this share of all faults are gathered into one line, as perf
/// hides them (its default `--call-graph graph,0.5`).
pub const DEFAULT_MIN_PERCENT: f64 = 0.5;

/// What is drawn below a node: its children above `min_percent`, then the others gathered as
/// `[N smaller branches]` (their faults summed, so that nothing goes unsaid).
fn shown(
    children: &[CallNode],
    total: u64,
    min_percent: f64,
) -> (Vec<&CallNode>, Option<CallNode>) {
    let (big, small): (Vec<&CallNode>, Vec<&CallNode>) = children
        .iter()
        .partition(|c| percent(c.count, total) >= min_percent);
    let gathered = (!small.is_empty()).then(|| CallNode {
        name: format!(
            "[{} smaller branch{}]",
            small.len(),
            if small.len() == 1 { "" } else { "es" }
        ),
        count: small.iter().map(|c| c.count).sum(),
        children: Vec::new(),
    });
    (big, gathered)
}

/// Draws the frames below `node` at `indent` (the column its name starts at), as perf does: a
/// callee that takes all of its caller's faults on the next line, aligned; branches as
/// `|--P%--name` (the last one ` --P%--name`), each drawing its own below it.
fn draw_children(
    out: &mut String,
    node: &CallNode,
    indent: &str,
    at_root: bool,
    total: u64,
    min_percent: f64,
) {
    let (big, gathered) = shown(&node.children, total, min_percent);
    let mut items: Vec<&CallNode> = big;
    if let Some(gathered) = &gathered {
        items.push(gathered);
    }
    if items.is_empty() {
        return;
    }
    if at_root {
        let _ = writeln!(out, "{indent}|");
    }
    if let [only] = items[..]
        && only.count == node.count
        && gathered.is_none()
    {
        if at_root {
            let _ = writeln!(out, "{indent}---{}", only.name);
            let indent = format!("{indent}   ");
            draw_children(out, only, &indent, false, total, min_percent);
        } else {
            let _ = writeln!(out, "{indent}{}", only.name);
            draw_children(out, only, indent, false, total, min_percent);
        }
        return;
    }
    if !at_root {
        let _ = writeln!(out, "{indent}|");
    }
    for (i, child) in items.iter().enumerate() {
        let last = i + 1 == items.len();
        let head = format!("--{:.2}%--", percent(child.count, total));
        let bar = if last { ' ' } else { '|' };
        let _ = writeln!(out, "{indent}{bar}{head}{}", child.name);
        let below = format!("{indent}{bar}{}", " ".repeat(head.len()));
        draw_children(out, child, &below, false, total, min_percent);
        if !last {
            let _ = writeln!(out, "{indent}|");
        }
    }
}

fn order_name(order: CallOrder) -> &'static str {
    match order {
        CallOrder::Caller => "caller",
        CallOrder::Callee => "callee",
    }
}

fn node_json(node: &CallNode, total: u64, min_percent: f64) -> Value {
    let (big, gathered) = shown(&node.children, total, min_percent);
    let children: Vec<Value> = big
        .iter()
        .map(|c| node_json(c, total, min_percent))
        .chain(gathered.iter().map(|g| node_json(g, total, min_percent)))
        .collect();
    json!({ "name": node.name, "count": node.count, "children": children })
}

/// The `top` largest roots of `tree` (all with 0), branches under `min_percent` of all faults
/// gathered, as `format` writes them (a table is perf's call graph text; CSV has no trees and
/// is written as JSON's caller asks: refused by the command line).
pub fn call_tree(
    tree: &CallTree,
    top: usize,
    min_percent: f64,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    let shown_roots = fltrace_analyze::rows_shown(top, tree.roots.len());
    let (roots, rest) = tree.roots.split_at(shown_roots);
    let rest_faults: u64 = rest.iter().map(|r| r.count).sum();
    if format == TableFormat::Json {
        let roots: Vec<Value> = roots
            .iter()
            .map(|r| node_json(r, tree.total, min_percent))
            .collect();
        let document = json!({
            "order": order_name(tree.order),
            "total": tree.total,
            "min_percent": min_percent,
            "roots": roots,
            "roots_left_out": rest.len(),
            "faults_left_out": rest_faults,
        });
        return Ok(format!(
            "{}\n",
            serde_json::to_string_pretty(&document).map_err(|e| Error::Draw(e.to_string()))?
        ));
    }
    let mut out = String::new();
    let other = match tree.order {
        CallOrder::Caller => "callee",
        CallOrder::Callee => "caller",
    };
    let _ = writeln!(
        out,
        "# {} fault{} by {} (-g {other} for the other way); percentages of all faults, \
         branches under {min_percent}% gathered",
        tree.total,
        if tree.total == 1 { "" } else { "s" },
        order_name(tree.order),
    );
    let _ = writeln!(out, "#");
    for root in roots {
        let _ = writeln!(
            out,
            "{:>9.2}%  {:>9}  {}",
            percent(root.count, tree.total),
            root.count,
            root.name
        );
        draw_children(
            &mut out,
            root,
            "            ",
            true,
            tree.total,
            min_percent,
        );
        out.push('\n');
    }
    if !rest.is_empty() {
        let _ = writeln!(
            out,
            "# {} ({}): --top 0 shows all",
            fltrace_analyze::plural(rest.len() as u64, "more root"),
            fltrace_analyze::plural(rest_faults, "fault")
        );
    }
    // Deep trees indent far: each line keeps its indentation and branch and cuts its name.
    Ok(match width {
        Some(_) => out
            .lines()
            .map(|line| crate::table::fit_line(line, width) + "\n")
            .collect(),
        None => out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, count: u64, children: Vec<CallNode>) -> CallNode {
        CallNode {
            name: name.into(),
            count,
            children,
        }
    }

    /// A chain, a branch, a callee that is not all of its caller and a branch too small to
    /// show, drawn byte for byte as perf draws them.
    #[test]
    fn draws_as_perf() {
        let tree = CallTree {
            order: CallOrder::Caller,
            total: 1000,
            roots: vec![node(
                "prog",
                1000,
                vec![
                    node(
                        "main",
                        997,
                        vec![
                            node("fill", 600, vec![node("memset", 600, Vec::new())]),
                            node("scan", 394, vec![node("read", 390, Vec::new())]),
                            node("tiny", 3, Vec::new()),
                        ],
                    ),
                    node("[truncated]", 3, Vec::new()),
                ],
            )],
        };
        let text = call_tree(&tree, 0, DEFAULT_MIN_PERCENT, TableFormat::Table, None).unwrap();
        let expected = "\
# 1000 faults by caller (-g callee for the other way); percentages of all faults, branches under 0.5% gathered
#
   100.00%       1000  prog
            |
            |--99.70%--main
            |          |
            |          |--60.00%--fill
            |          |          memset
            |          |
            |          |--39.40%--scan
            |          |          |
            |          |           --39.00%--read
            |          |
            |           --0.30%--[1 smaller branch]
            |
             --0.30%--[1 smaller branch]

";
        assert_eq!(text, expected, "\n{text}");
        // A root whose one callee takes all its faults starts its chain with `---`.
        let chain = CallTree {
            order: CallOrder::Callee,
            total: 5,
            roots: vec![node("fill", 5, vec![node("main", 5, Vec::new())])],
        };
        let text = call_tree(&chain, 0, DEFAULT_MIN_PERCENT, TableFormat::Table, None).unwrap();
        assert!(
            text.ends_with("   100.00%          5  fill\n            |\n            ---main\n\n"),
            "{text}"
        );
        assert!(text.starts_with("# 5 faults by callee (-g caller for the other way)"));
    }

    /// JSON keeps the same tree and says what `--top` left out.
    #[test]
    fn json_document() {
        let tree = CallTree {
            order: CallOrder::Callee,
            total: 10,
            roots: vec![
                node("fill", 9, vec![node("main", 9, Vec::new())]),
                node("scan", 1, Vec::new()),
            ],
        };
        let text = call_tree(&tree, 1, DEFAULT_MIN_PERCENT, TableFormat::Json, None).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["order"], "callee");
        assert_eq!(value["roots"][0]["children"][0]["name"], "main");
        assert_eq!(value["roots"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            (
                value["roots_left_out"].as_u64(),
                value["faults_left_out"].as_u64()
            ),
            (Some(1), Some(1))
        );
    }
}
