//! Reading events from Parquet (the shape of the seed engine's table): all columns against the
//! one observable, row-group pushdown at 100 / 25 / 10 % selectivity, sequential against
//! parallel decode, at 10⁵ and 10⁷ events. Files are written here (arrow writer, snappy, row
//! groups of 2¹⁶ rows, the observable increasing so that its statistics select row groups).
//!
//!     cargo bench -p ns-unbinned --bench parquet

use std::sync::Arc;

use arrow_array::{Float64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ns_unbinned::parquet::ParquetRead;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

const COLUMNS: [&str; 4] = ["mass", "pt", "eta", "weight"];

fn write(path: &std::path::Path, n: usize) {
    let schema = Arc::new(Schema::new(
        COLUMNS
            .iter()
            .map(|c| Field::new(*c, DataType::Float64, false))
            .collect::<Vec<_>>(),
    ));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(1 << 16))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).unwrap();
    let chunk = 1 << 20;
    for start in (0..n).step_by(chunk) {
        let len = chunk.min(n - start);
        let col = |f: fn(usize, usize) -> f64| -> Arc<dyn arrow_array::Array> {
            Arc::new(Float64Array::from_iter_values(
                (start..start + len).map(|i| f(i, n)),
            ))
        };
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                col(|i, n| 100.0 * i as f64 / n as f64),
                col(|i, _| ((i * 7919) % 1000) as f64 * 0.1),
                col(|i, _| ((i * 104_729) % 500) as f64 * 0.01 - 2.5),
                col(|i, _| 0.5 + (i % 3) as f64 * 0.25),
            ],
        )
        .unwrap();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("ns-parquet-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut group = c.benchmark_group("parquet_read");
    group.sample_size(10);
    for n in [100_000usize, 10_000_000] {
        let path = dir.join(format!("events-{n}.parquet"));
        write(&path, n);
        group.throughput(Throughput::Elements(n as u64));
        let read = |columns: &[&str], hi: f64, pushdown: bool, parallel: bool| ParquetRead {
            path: path.clone(),
            columns: columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    (
                        c.to_string(),
                        if i == 0 { 0.0 } else { -1e9 },
                        if i == 0 { hi } else { 1e9 },
                    )
                })
                .collect(),
            weights: None,
            pushdown,
            parallel,
        };
        let cases = [
            ("all_columns", read(&COLUMNS, 100.0, true, true)),
            ("projected", read(&COLUMNS[..1], 100.0, true, true)),
            ("pushdown_25pct", read(&COLUMNS[..1], 25.0, true, true)),
            ("pushdown_10pct", read(&COLUMNS[..1], 10.0, true, true)),
            ("no_pushdown_10pct", read(&COLUMNS[..1], 10.0, false, true)),
            ("sequential", read(&COLUMNS[..1], 100.0, true, false)),
        ];
        for (name, r) in cases {
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| r.read().unwrap().len())
            });
        }
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
