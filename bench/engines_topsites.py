#!/usr/bin/env python3
"""Times docs/FORMAT.md's top-sites query over a series in DuckDB and in Spark local mode
(default settings, local[2], one session): views as the document defines them, the query run
three times after a first run, the best and the worst printed. Used by bench/engines.sh.

    engines_topsites.py SERIES_DIR FORMAT_MD
"""
import os
import sys
import time

import duckdb
from pyspark.sql import SparkSession

series, doc = sys.argv[1], open(sys.argv[2]).read()
blocks = [b.split("```")[0] for b in doc.split("```sql\n")[1:]]


def block(title):
    return next(b for b in blocks if b.startswith(f"-- {title}\n"))


def statements(text):
    """The view definitions the query needs (faults, stacks, mmaps): a series without
    --allocs has no allocs files, which DuckDB refuses to make a view of."""
    lines = [l for l in text.splitlines() if not l.lstrip().startswith("--")]
    wanted = (" faults ", " stacks ", " mmaps ")
    return [s.strip() for s in "\n".join(lines).split(";")
            if s.strip() and any(w in s for w in wanted)]


query = next(b for b in blocks if "file_offset" in b).strip().rstrip(";")
os.chdir(series)
duck = duckdb.connect()
for s in statements(block("DuckDB: a series")):
    duck.execute(s)
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
for s in statements(block("Spark SQL: a series")):
    spark.sql(s)
faults = duck.execute("select count(*) from faults").fetchone()[0]
print(f"{faults} faults in {series}")
for name, run in (("duckdb", lambda: duck.execute(query).fetchall()),
                  ("spark local[2]", lambda: spark.sql(query).collect())):
    rows = run()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    print(f"{name}: {len(rows)} rows, best {min(times):.2f} s, worst {max(times):.2f} s of 3")
spark.stop()
