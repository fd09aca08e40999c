#!/usr/bin/env python3
"""Runs SQL queries on DuckDB and on Spark (PySpark, local mode, default settings) over the
same directory of fltrace tables; prints each engine's rows as JSON.

Usage: engines.py DIR DUCKDB_SETUP SPARK_SETUP QUERY...

Both engines start in DIR (Spark resolves relative paths against its JVM's working
directory). Each setup is a block of statements separated by `;` (the view definitions of
docs/FORMAT.md). Then one line per query: {"duckdb": [[...], ...], "spark": [[...], ...]},
and a last line {"spark_types": {view: [[column, type], ...]}} with the types Spark gave each
view's columns. One SparkSession serves every query. The tests use it to check that the
documented queries run unchanged on both engines and give the same rows.
"""

import datetime
import decimal
import json
import os
import sys

try:
    import duckdb
    from pyspark.sql import Row, SparkSession
except ImportError as e:
    sys.exit(f"{e}: run scripts/setup.sh")


def statements(block: str) -> list[str]:
    lines = [l for l in block.splitlines() if not l.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def plain(value):
    """A value as JSON has it, the same from both engines: Spark's rows and arrays as lists,
    decimals as integers when whole."""
    if isinstance(value, Row):
        return [plain(v) for v in value]
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    return value


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    os.chdir(sys.argv[1])
    duck = duckdb.connect()
    for statement in statements(sys.argv[2]):
        duck.execute(statement)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("fltrace-engines")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    views = []
    for statement in statements(sys.argv[3]):
        spark.sql(statement)
        words = statement.split()
        if words[:3] == ["create", "temporary", "view"]:
            views.append(words[3])
    for query in sys.argv[4:]:
        duck_rows = [plain(list(r)) for r in duck.execute(query).fetchall()]
        spark_rows = [plain(r) for r in spark.sql(query).collect()]
        print(json.dumps({"duckdb": duck_rows, "spark": spark_rows}), flush=True)
    types = {v: [list(t) for t in spark.table(v).dtypes] for v in views}
    print(json.dumps({"spark_types": types}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
