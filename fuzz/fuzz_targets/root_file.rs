//! Fuzz the ROOT file reader: the header, the directory walk, every key's decompression and the
//! histogram streamers must answer any bytes with a histogram or an error, never a panic, and
//! never allocate beyond what the bytes can expand to. Seed it with the codec fixtures
//! (`cp ../shared/histfactory-xml/codec/hists_*.root fuzz/corpus/root_file/`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ns_root::RootFile;

fuzz_target!(|bytes: &[u8]| {
    let Ok(file) = RootFile::from_bytes("fuzz.root", bytes.to_vec()) else { return };
    // Walk two levels of directories and read every key as a histogram.
    let mut dirs = vec![String::new()];
    let mut depth = 0;
    while let Some(dir) = dirs.pop() {
        let Ok(keys) = file.keys(&dir) else { continue };
        for key in keys {
            let path = if dir.is_empty() { key.name.clone() } else { format!("{dir}/{}", key.name) };
            if key.is_directory() {
                if depth < 2 {
                    dirs.push(path);
                }
            } else if let Ok(h) = file.histogram(&format!("{path};{}", key.cycle)) {
                let _ = (h.values(), h.value_errors(), h.stats(), h.axes[0].edges());
            }
        }
        depth += 1;
    }
});
