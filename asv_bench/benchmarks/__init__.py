"""asv benchmarks for nbquant, one module per capability (see ``common`` for sizes and backends)."""
