#!/usr/bin/env python3
"""Runs SQL queries with DuckDB in a directory of fltrace tables; prints each result as JSON.

Usage: sql.py DIR [--setup STATEMENTS] QUERY...

Each query runs with DIR as the working directory, so that the globs of docs/FORMAT.md
('fltrace-data-faults-*.parquet') work as written. One line per query:
{"columns": [...], "rows": [[...], ...]}. `--setup` runs its `;`-separated statements first
(the view definitions of docs/FORMAT.md) and prints nothing for them. The tests use it to check the documented queries
and the tables' figures against fltrace's own readers.
"""

import json
import os
import sys

try:
    import duckdb
except ImportError:
    sys.exit("DuckDB is not installed for this Python: run scripts/setup.sh")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    os.chdir(sys.argv[1])
    con = duckdb.connect()
    queries = sys.argv[2:]
    if queries[:1] == ["--setup"]:
        for statement in queries[1].split(";"):
            if statement.strip():
                con.execute(statement)
        queries = queries[2:]
    for query in queries:
        result = con.execute(query)
        columns = [d[0] for d in result.description]
        rows = result.fetchall()
        print(json.dumps({"columns": columns, "rows": rows}, default=str))


if __name__ == "__main__":
    main()
