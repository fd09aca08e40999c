#!/usr/bin/env python3
"""Unsigned (UINT_64, read by Spark as decimal(20,0)) against signed INT64 address columns:
the same faults (3 million by default, of 100 processes) and 2,000 mappings (20 a process)
written both ways by DuckDB, and the time of the top-sites query's equi-and-range join,
address arithmetic and group-by in DuckDB and Spark local mode.

    target/venv/bin/python bench/spark_types.py [ROWS]
"""
import os, sys, tempfile, time

import duckdb
from pyspark.sql import SparkSession

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 3_000_000
tmp = tempfile.mkdtemp(prefix="spark-types-")
con = duckdb.connect()
for name, t64 in (("unsigned", "ubigint"), ("signed", "bigint")):
    con.execute(f"""copy (select (i % 100)::integer as pid,
                          ((i // 100) % 20 * 4096 + 93824992231424 + (i % 4093))::{t64} as ip
                   from range({rows}) t(i)) to '{tmp}/{name}-faults.parquet'""")
    con.execute(f"""copy (select (i // 20)::integer as pid,
                          (93824992231424 + (i % 20) * 4096)::{t64} as start_addr,
                          (93824992231424 + (i % 20 + 1) * 4096)::{t64} as end_addr,
                          (i * 4096)::{t64} as pgoff, 'lib' || (i % 10) as path
                   from range(2000) t(i)) to '{tmp}/{name}-mmaps.parquet'""")
QUERY = """select m.path, f.ip - m.start_addr + m.pgoff as file_offset, count(*) as faults
from faults f join mmaps m on m.pid = f.pid and f.ip >= m.start_addr and f.ip < m.end_addr
group by 1, 2 order by faults desc, 1, 2 limit 20"""
spark = SparkSession.builder.master("local[2]").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
for name in ("unsigned", "signed"):
    for table in ("faults", "mmaps"):
        spark.read.parquet(f"{tmp}/{name}-{table}.parquet").createOrReplaceTempView(table)
        con.execute(f"create or replace view {table} as from '{tmp}/{name}-{table}.parquet'")
    types = dict(spark.table("faults").dtypes)
    size = os.path.getsize(f"{tmp}/{name}-faults.parquet")
    for engine, run in (("duckdb", lambda: con.execute(QUERY).fetchall()),
                        ("spark", lambda: spark.sql(QUERY).collect())):
        run()
        times = []
        for _ in range(3):
            t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
        print(f"{name:8} ip as {types['ip']:14} {size/1e6:6.1f} MB  {engine:6} best {min(times):.2f} s of 3")
spark.stop()
