//! Every fixture of `../shared/histfactory-xml/codec` (ROOT 6.40's files in every compression,
//! directories, cycles, 10⁶-bin histograms) read back bit for bit against
//! `codec_reference.json`, and damaged files refused with errors that name the place.

use std::path::PathBuf;

use ns_root::{Histogram, RootFile};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `../shared/histfactory-xml` beside the repository (override with `NEXTSTAT_HISTFACTORY_XML`).
fn shared() -> PathBuf {
    std::env::var_os("NEXTSTAT_HISTFACTORY_XML").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/histfactory-xml"),
        PathBuf::from,
    )
}

fn reference() -> Value {
    let path = shared().join("codec/codec_reference.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the shared test data is needed)", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn sha256_f64le(values: &[f64]) -> String {
    let mut hash = Sha256::new();
    for v in values {
        hash.update(v.to_le_bytes());
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn check(h: &Histogram, o: &Value, at: &str) {
    assert_eq!(h.class, o["class"], "{at}");
    assert_eq!(h.name, o["name"], "{at}");
    assert_eq!(h.title, o["title"], "{at}");
    assert_eq!(h.entries, o["entries"].as_f64().unwrap(), "{at}");
    assert_eq!(
        bits(&h.stats()),
        bits(&floats(&o["stats_tsumw_tsumw2_tsumwx_tsumwx2"])),
        "{at}"
    );
    let axes = o["axes"].as_array().unwrap();
    assert_eq!(h.axes.len(), axes.len(), "{at}");
    for (a, r) in h.axes.iter().zip(axes) {
        assert_eq!(a.nbins as u64, r["nbins"].as_u64().unwrap(), "{at}");
        assert_eq!(a.min, r["xmin"].as_f64().unwrap(), "{at}");
        assert_eq!(a.max, r["xmax"].as_f64().unwrap(), "{at}");
        match &r["variable_edges"] {
            Value::Null => assert!(a.variable_edges.is_none(), "{at}"),
            Value::Array(_) => assert_eq!(
                a.variable_edges.as_deref().map(bits),
                Some(bits(&floats(&r["variable_edges"]))),
                "{at}"
            ),
            // 10⁶ edges: described by their count, digest and ends.
            digest => {
                let edges = a.variable_edges.as_deref().unwrap();
                assert_eq!(
                    edges.len() as u64,
                    digest["count"].as_u64().unwrap(),
                    "{at}"
                );
                assert_eq!(sha256_f64le(edges), digest["sha256_f64le"], "{at}");
                assert_eq!(bits(&edges[..5]), bits(&floats(&digest["first_5"])), "{at}");
            }
        }
        if r.get("edges").is_some() {
            assert_eq!(bits(&a.edges()), bits(&floats(&r["edges"])), "{at}: edges");
        }
    }
    assert_eq!(h.sumw2.is_some(), o["has_sumw2"].as_bool().unwrap(), "{at}");
    if o.get("contents").is_some() {
        assert_eq!(
            bits(&h.contents),
            bits(&floats(&o["contents"])),
            "{at}: contents"
        );
        assert_eq!(
            bits(&h.errors()),
            bits(&floats(&o["errors"])),
            "{at}: errors"
        );
        match &o["sumw2"] {
            Value::Null => assert!(h.sumw2.is_none()),
            s => assert_eq!(
                h.sumw2.as_deref().map(bits),
                Some(bits(&floats(s))),
                "{at}: sumw2"
            ),
        }
    } else {
        // The 10⁶-bin histograms: digests, sums and the ends.
        assert_eq!(
            h.contents.len() as u64,
            o["ncells_incl_flows"].as_u64().unwrap(),
            "{at}"
        );
        assert_eq!(
            sha256_f64le(&h.contents),
            o["contents_sha256_f64le"],
            "{at}"
        );
        assert_eq!(
            h.contents.iter().sum::<f64>(),
            o["contents_sum"].as_f64().unwrap(),
            "{at}"
        );
        assert_eq!(
            bits(&h.contents[..5]),
            bits(&floats(&o["contents_first_5"])),
            "{at}"
        );
        assert_eq!(
            bits(&h.contents[h.contents.len() - 5..]),
            bits(&floats(&o["contents_last_5"])),
            "{at}"
        );
        let sumw2 = h.sumw2.as_deref().unwrap();
        assert_eq!(sha256_f64le(sumw2), o["sumw2_sha256_f64le"], "{at}");
        assert_eq!(
            sumw2.iter().sum::<f64>(),
            o["sumw2_sum"].as_f64().unwrap(),
            "{at}"
        );
    }
}

#[test]
fn every_fixture_reads_bit_for_bit() {
    let reference = reference();
    let mut histograms = 0;
    for file in reference["files"].as_array().unwrap() {
        let name = file["file"].as_str().unwrap();
        let root = RootFile::open(&shared().join("codec").join(name)).unwrap();
        for o in file["objects"].as_array().unwrap() {
            let path = o["path"].as_str().unwrap();
            let (dir, leaf) = path.rsplit_once('/').unwrap_or(("", path));
            let key = root
                .keys(dir)
                .unwrap()
                .into_iter()
                .find(|k| k.name == leaf && i64::from(k.cycle) == o["cycle"].as_i64().unwrap())
                .unwrap_or_else(|| panic!("{name}: no key {path};{}", o["cycle"]));
            assert_eq!(key.class, o["class"], "{name} {path}");
            for (field, value) in [
                ("keylen", u64::from(key.keylen)),
                ("nbytes", u64::from(key.nbytes)),
                ("objlen", u64::from(key.objlen)),
                ("seek_key", key.seek_key),
            ] {
                assert_eq!(
                    value,
                    o["key"][field].as_u64().unwrap(),
                    "{name} {path} {field}"
                );
            }
            if key.is_directory() {
                continue;
            }
            let h = root.histogram(&format!("{path};{}", o["cycle"])).unwrap();
            check(&h, o, &format!("{name} {path};{}", o["cycle"]));
            histograms += 1;
        }
    }
    assert!(histograms >= 50, "only {histograms} histograms compared");
}

/// A plain name reads the first key of that name in the directory's list, as ROOT does: the
/// highest cycle in a file ROOT wrote (it lists the newest first), the first cycle in one of
/// Combine's CI files, which lists them the other way (Combine's numbers are of cycle 1).
#[test]
fn a_name_without_cycle_is_the_first_listed_as_root_reads_it() {
    let root = RootFile::open(&shared().join("codec/many_keys_cycles_zlib.root")).unwrap();
    assert_eq!(
        root.histogram("cyc").unwrap(),
        root.histogram("cyc;2").unwrap()
    );
    assert_ne!(
        root.histogram("cyc;1").unwrap().contents,
        root.histogram("cyc;2").unwrap().contents
    );
    let combine = shared().join("../combine/data/ci/all_histograms_fps4_bin4j1b.root");
    let root = RootFile::open(&combine).unwrap();
    let name = "single_top_s_chan_pt_resUp";
    assert_eq!(
        root.histogram(name).unwrap(),
        root.histogram(&format!("{name};1")).unwrap()
    );
    assert_ne!(
        root.histogram(&format!("{name};1")).unwrap().contents,
        root.histogram(&format!("{name};2")).unwrap().contents
    );
}

#[test]
fn in_range_values_leave_the_flows_out() {
    let root = RootFile::open(&shared().join("codec/hists_zstd.root")).unwrap();
    let h = root.histogram("h1d_var_flow").unwrap();
    assert_eq!(h.values(), h.contents[1..h.contents.len() - 1]);
    let h2 = root.histogram("h2f").unwrap();
    assert_eq!(h2.values().len(), 4 * 3);
    assert_eq!(h2.values()[0], h2.contents[6 + 1]);
}

#[test]
fn mistakes_are_named() {
    let root = RootFile::open(&shared().join("codec/hists_lz4.root")).unwrap();
    let message = |r: Result<Histogram, ns_core::Error>| r.unwrap_err().to_string();
    let typo = message(root.histogram("h1dd"));
    assert!(
        typo.contains("no object 'h1dd' in the file (it holds: h1d, h1f"),
        "{typo}"
    );
    assert!(message(root.histogram("dir/nope")).contains("no object 'nope' in directory 'dir'"));
    assert!(message(root.histogram("dir")).contains("'dir' is a TDirectoryFile, not a histogram"));
    assert!(message(root.histogram("h1d/x")).contains("'h1d' is a TH1D, not a directory"));
    assert!(message(root.histogram("h1d;7")).contains("no object 'h1d' with cycle 7"));
    let missing = RootFile::open(&shared().join("codec/missing.root"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        missing.contains("missing.root") && missing.contains("No such file"),
        "{missing}"
    );
}

#[test]
fn damaged_files_are_errors_naming_the_byte_never_panics() {
    let path = shared().join("codec/hists_zlib.root");
    let bytes = std::fs::read(&path).unwrap();
    let empty = RootFile::from_bytes("empty.root", Vec::new())
        .err()
        .unwrap()
        .to_string();
    assert!(
        empty.contains("empty.root") && empty.contains("byte 0"),
        "{empty}"
    );
    let not_root = RootFile::from_bytes("x.root", b"{\"channels\": []}".to_vec())
        .err()
        .unwrap()
        .to_string();
    assert!(not_root.contains("not a ROOT file"), "{not_root}");
    // Every truncation, and every byte of the file flipped in turn: an error or a histogram,
    // never a panic.
    let names = [
        "h1d",
        "h1f",
        "h1f_nosumw2",
        "h1i",
        "h1d_var_flow",
        "h2f",
        "dir/h_in_dir",
        "dir/sub/h_nested",
    ];
    for cut in (0..bytes.len()).step_by(97) {
        if let Ok(file) = RootFile::from_bytes("cut.root", bytes[..cut].to_vec()) {
            for name in names {
                let _ = file.histogram(name);
            }
        }
    }
    let truncated = RootFile::from_bytes("cut.root", bytes[..bytes.len() / 2].to_vec())
        .and_then(|f| f.histogram("h2f"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        truncated.contains("cut.root") && truncated.contains("byte"),
        "{truncated}"
    );
    for at in (0..bytes.len()).step_by(7) {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0xA5;
        if let Ok(file) = RootFile::from_bytes("flip.root", damaged) {
            for name in names {
                let _ = file.histogram(name);
            }
        }
    }
}
