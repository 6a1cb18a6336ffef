//! The HS3 reader on documents of arbitrary structure (`structure/mod.rs`): cycles, shared
//! nodes, long chains, malformed parameter points. On a thread with a small stack, the reader
//! and one NLL evaluation must answer — a model or an error — and never overflow or panic.

use ns_compute::{Device, Likelihood};
use ns_unbinned::hs3::{ReadOptions, read};
use proptest::prelude::*;

#[path = "common/structure.rs"]
mod structure;

fn read_and_evaluate(bytes: Vec<u8>) -> std::thread::Result<()> {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let doc = structure::document(&bytes);
            if let Ok(model) = read(&doc, &ReadOptions::default())
                && let Ok(data) = model.observed()
            {
                let init = model.suggested_init();
                let mut grad = vec![0.0; init.len()];
                let _ = model.nll_grad(&data, &init, &mut grad);
                let _ = model.where_undefined(&init, &data);
                let _ = model.open(Device::Cpu);
            }
        })
        .unwrap()
        .join()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn any_structure_reads_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        prop_assert!(read_and_evaluate(bytes).is_ok(), "the reader panicked or overflowed");
    }
}

#[test]
fn the_structures_cover_cycles_sharing_and_depth() {
    // The generator reaches what it is for: across seeds, refusals of each kind and models read.
    let mut seen = std::collections::BTreeSet::new();
    let mut read_ok = 0;
    for seed in 0..4000u32 {
        let bytes: Vec<u8> = (0..64)
            .map(|k| (seed.wrapping_mul(2654435761).wrapping_add(k * 40503) >> (k % 13)) as u8)
            .collect();
        match read(&structure::document(&bytes), &ReadOptions::default()) {
            Ok(_) => read_ok += 1,
            Err(e) => {
                let m = e.to_string();
                for class in [
                    "contains itself",
                    "depends on itself",
                    "nest deeper",
                    "listed twice",
                    "must be a number",
                ] {
                    if m.contains(class) {
                        seen.insert(class);
                    }
                }
            }
        }
    }
    assert!(read_ok > 0, "no structure read");
    assert_eq!(seen.len(), 5, "refusals seen: {seen:?}");
}
