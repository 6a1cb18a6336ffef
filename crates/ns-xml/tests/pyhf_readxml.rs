//! Every XML set of `../shared/histfactory-xml` that pyhf 0.7.6 reads gives pyhf's workspace,
//! value for value (and so pyhf's digest); the ones pyhf cannot read, and a careless user's
//! mistakes, are errors that name the file and the element.

use std::path::{Path, PathBuf};

use ns_core::FileAccess;
use ns_xml::{ReadOptions, read};
use serde_json::Value;

/// `../shared/histfactory-xml` beside the repository (override with `NEXTSTAT_HISTFACTORY_XML`).
fn shared() -> PathBuf {
    std::env::var_os("NEXTSTAT_HISTFACTORY_XML").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/histfactory-xml"),
        PathBuf::from,
    )
}

fn sets() -> Vec<PathBuf> {
    let mut sets: Vec<PathBuf> = ["pyhf-validation", "pyhf-docs"]
        .iter()
        .flat_map(|group| std::fs::read_dir(shared().join(group)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("reference.json").is_file())
        .collect();
    sets.push(shared().join("allmodifiers"));
    sets.sort();
    sets
}

fn read_in(set: &Path, top: &str) -> ns_core::Result<Value> {
    read(
        &set.join(top),
        &ReadOptions {
            semantics: ns_xml::Semantics::Pyhf,
            base_dir: Some(set),
            access: FileAccess::Local { base: Some(set) },
            sent: None,
        },
    )
}

#[test]
fn every_set_gives_pyhfs_workspace() {
    let mut compared = 0;
    let mut refused = 0;
    for set in sets() {
        let reference: Value =
            serde_json::from_str(&std::fs::read_to_string(set.join("reference.json")).unwrap())
                .unwrap();
        for top in reference["tops"].as_array().unwrap() {
            let name = top["top"].as_str().unwrap();
            let ours = read_in(&set, name);
            let json_name = name.replace('/', "__").replace(".xml", ".json");
            let stored = set.join("pyhf_json").join(&json_name);
            if top.get("pyhf_readxml_error").is_some() || !stored.is_file() {
                // pyhf cannot read it (a TH2, a POI by <Function>, a channel's HistoPath left to
                // inherit): pyhf's semantics refuse it with a message, or read what pyhf would.
                let message = ours.err().map(|e| e.to_string()).unwrap_or_default();
                let expected = if name.contains("ShapeSys2D") {
                    "(2-D)"
                } else {
                    "no object"
                };
                assert!(message.contains(expected), "{name}: {message}");
                refused += 1;
                continue;
            }
            let expected: Value =
                serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
            let ours = ours.unwrap_or_else(|e| panic!("{}: {name}: {e}", set.display()));
            assert_eq!(ours, expected, "{}: {name}", set.display());
            assert_eq!(
                ns_translate::pyjson::digest(&ours),
                ns_translate::pyjson::digest(&expected)
            );
            ns_translate::Workspace::from_value(ours).unwrap();
            compared += 1;
        }
    }
    assert!(compared >= 14, "only {compared} workspaces compared");
    assert_eq!(refused, 2);
}

/// A set copied into a scratch folder, to be damaged.
fn scratch_copy(name: &str) -> PathBuf {
    let from = shared().join("pyhf-validation/xmlimport_input");
    let to = std::env::temp_dir().join(format!("ns-xml-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    for dir in ["config", "data"] {
        std::fs::create_dir_all(to.join(dir)).unwrap();
        for entry in std::fs::read_dir(from.join(dir)).unwrap() {
            let entry = entry.unwrap();
            if entry.path().is_file() {
                std::fs::copy(entry.path(), to.join(dir).join(entry.file_name())).unwrap();
            }
        }
    }
    to
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{}: no '{from}'", path.display());
    std::fs::write(path, text.replace(from, to)).unwrap();
}

#[test]
fn a_careless_users_mistakes_are_named() {
    let message = |set: &Path| read_in(set, "config/example.xml").unwrap_err().to_string();
    let set = scratch_copy("missing-root");
    std::fs::remove_file(set.join("data/example.root")).unwrap();
    let m = message(&set);
    assert!(
        m.contains("channel 'channel1'")
            && m.contains("example.root")
            && m.contains("No such file"),
        "{m}"
    );

    let set = scratch_copy("typo");
    edit(
        &set.join("config/example_channel.xml"),
        "HistoName=\"background1\"",
        "HistoName=\"backgruond1\"",
    );
    let m = message(&set);
    assert!(
        m.contains("sample 'background1'") && m.contains("no object 'backgruond1'"),
        "{m}"
    );

    let set = scratch_copy("empty-root");
    std::fs::write(set.join("data/example.root"), b"").unwrap();
    let m = message(&set);
    assert!(m.contains("example.root") && m.contains("byte"), "{m}");

    let set = scratch_copy("truncated-root");
    let bytes = std::fs::read(set.join("data/example.root")).unwrap();
    std::fs::write(set.join("data/example.root"), &bytes[..bytes.len() / 3]).unwrap();
    let m = message(&set);
    assert!(m.contains("example.root") && m.contains("truncated"), "{m}");

    let set = scratch_copy("escape");
    edit(
        &set.join("config/example_channel.xml"),
        "./data/example.root",
        "../../etc/passwd",
    );
    let m = message(&set);
    assert!(m.contains("leaves the base folder"), "{m}");
    let set = scratch_copy("absolute");
    edit(
        &set.join("config/example_channel.xml"),
        "./data/example.root",
        "/etc/passwd",
    );
    assert!(message(&set).contains("is an absolute path"));

    let set = scratch_copy("entity");
    edit(
        &set.join("config/example.xml"),
        "<!DOCTYPE Combination  SYSTEM 'HistFactorySchema.dtd'>",
        "<!DOCTYPE Combination [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>",
    );
    assert!(message(&set).contains("declares entities"));

    let set = scratch_copy("deep");
    let deep = format!(
        "<Combination>{}{}</Combination>",
        "<a>".repeat(100_000),
        "</a>".repeat(100_000)
    );
    std::fs::write(set.join("config/example.xml"), deep).unwrap();
    assert!(message(&set).contains("nest deeper than 64 levels"));

    let set = scratch_copy("no-data");
    edit(
        &set.join("config/example_channel.xml"),
        "<Data HistoName=\"data\" HistoPath=\"\" />",
        "",
    );
    assert!(message(&set).contains("no <Data>"));

    let set = scratch_copy("bad-number");
    edit(
        &set.join("config/example_channel.xml"),
        "High=\"1.05\" Low=\"0.95\"",
        "High=\"1,05\" Low=\"0.95\"",
    );
    let m = message(&set);
    assert!(
        m.contains("<OverallSys High=\"1,05\"> is not a number") && m.contains("sample 'signal'"),
        "{m}"
    );

    // The server's policy opens nothing, whatever the XML names.
    let set = shared().join("pyhf-validation/xmlimport_input");
    let denied = read(
        &set.join("config/example.xml"),
        &ReadOptions {
            semantics: ns_xml::Semantics::Pyhf,
            base_dir: Some(&set),
            access: FileAccess::Denied,
            sent: None,
        },
    );
    assert!(
        denied
            .unwrap_err()
            .to_string()
            .contains(ns_core::files::NO_FILES)
    );
}

#[test]
fn files_sent_with_the_xml_are_read_without_the_disk() {
    // The set's files, as a client sends them: path → bytes.
    let set = shared().join("pyhf-validation/xmlimport_input");
    let mut sent = ns_xml::SentFiles::new();
    for name in [
        "config/example.xml",
        "config/example_channel.xml",
        "data/example.root",
    ] {
        sent.insert(format!("./{name}"), std::fs::read(set.join(name)).unwrap());
    }
    fn read_sent(sent: &ns_xml::SentFiles) -> ns_core::Result<Value> {
        let options = ReadOptions {
            semantics: ns_xml::Semantics::Pyhf,
            base_dir: None,
            access: FileAccess::Denied,
            sent: Some(sent),
        };
        read(Path::new("config/example.xml"), &options)
    }
    let ours = read_sent(&sent).unwrap();
    assert_eq!(ours, read_in(&set, "config/example.xml").unwrap());
    // A file the XML names but the client did not send is named, with what was sent.
    sent.remove("./data/example.root");
    let missing = read_sent(&sent).unwrap_err().to_string();
    assert!(
        missing.contains("'data/example.root' is not among the files sent with the XML"),
        "{missing}"
    );
    // Sent paths may not leave the base folder either.
    let mut escaping = ns_xml::SentFiles::new();
    escaping.insert(
        "config/example.xml".into(),
        b"<Combination><Input>../x.xml</Input></Combination>".to_vec(),
    );
    let escape = read_sent(&escaping).unwrap_err().to_string();
    assert!(escape.contains("leaves the base folder"), "{escape}");
}
