//! `nuisance edit` lines as Combine's NuisanceModifier applies them (each command's effect on
//! the systematics, written out from its source), and the errors of careless edits.

use ns_datacard::{Effect, Kind, parse};

/// Two channels, three processes; `dB` on both backgrounds, `dS` on the signal.
const CARD: &str = "imax 2\njmax 2\nkmax *\n---\nbin a b\nobservation 6 4\n---\n\
bin a a a b b b\nprocess sig bkg qcd sig bkg qcd\nprocess 0 1 2 0 1 2\n\
rate 1 5 2 1 3 1\n---\n\
dB lnN - 1.3 1.2 - 1.1 1.05\n\
dS lnN 1.1 - - 1.1 - -\n";

fn edited(lines: &str) -> ns_datacard::Datacard {
    parse(&format!("{CARD}{lines}"), "card.txt").unwrap_or_else(|e| panic!("{lines}: {e}"))
}

fn effects(card: &ns_datacard::Datacard, name: &str) -> Vec<Option<Effect>> {
    card.systematics
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no '{name}' in {:?}", card.systematics))
        .effects
        .clone()
}

fn sym(v: f64) -> Option<Effect> {
    Some(Effect::Symmetric(v))
}

#[test]
fn add_creates_overwrites_and_adds_in_quadrature() {
    let card = edited("nuisance edit add sig * dS lnN 1.2 overwrite\n");
    assert_eq!(
        effects(&card, "dS"),
        [sym(1.2), None, None, sym(1.2), None, None]
    );
    let card = edited("nuisance edit add qcd b new lnN 0.9/1.2\n");
    assert_eq!(
        effects(&card, "new"),
        [
            None,
            None,
            None,
            None,
            None,
            Some(Effect::Asymmetric(0.9, 1.2))
        ]
    );
    let card = edited("nuisance edit add bkg a dB lnN 1.4 addq\n");
    let k = (1.3f64.ln().hypot(1.4f64.ln())).exp();
    assert_eq!(effects(&card, "dB")[1], sym(k));
    // A value of 1 adds nothing.
    let card = edited("nuisance edit add bkg a dB lnN 1\n");
    assert_eq!(effects(&card, "dB")[1], sym(1.3));
}

#[test]
fn drop_rename_and_changepdf_as_combines_test_edit_card() {
    // Combine's test-edit.txt: add to the signal, move it to a new name, make it a trG.
    let card = edited(
        "nuisance edit add sig a dB lnN 1.2 overwrite\n\
         nuisance edit rename sig a dB dN\n\
         nuisance edit changepdf dN trG\n\
         nuisance edit drop qcd .* dB\n",
    );
    assert_eq!(
        effects(&card, "dB"),
        [None, sym(1.3), None, None, sym(1.1), None]
    );
    let dn = card.systematics.iter().find(|s| s.name == "dN").unwrap();
    assert_eq!(dn.kind, Kind::TrG);
    assert_eq!(dn.effects[0], sym(1.2f64.ln()));
    let model = ns_datacard::model(
        &card,
        &ns_datacard::ShapeFiles::new(ns_core::FileAccess::Denied, None),
    )
    .unwrap();
    let i = model.par_names.iter().position(|n| n == "dN").unwrap();
    // Combine's range: −1/ln 1.2 printed %f.
    assert_eq!(model.parameter_sets[i].bounds[0], (-5.484815, 7.0));
}

#[test]
fn a_global_rename_joins_a_log_normal_of_that_name() {
    let card = edited("nuisance edit rename dS dB\n");
    assert!(card.systematics.iter().all(|s| s.name != "dS"));
    assert_eq!(
        effects(&card, "dB"),
        [sym(1.1), sym(1.3), sym(1.2), sym(1.1), sym(1.1), sym(1.05)]
    );
    let card = edited("nuisance edit rename dS dT\n");
    assert_eq!(effects(&card, "dT")[0], sym(1.1));
}

#[test]
fn merge_split_and_flip() {
    let card = edited("nuisance edit merge sig a dB dS\n");
    assert_eq!(effects(&card, "dS")[0], None);
    assert_eq!(effects(&card, "dB")[0], sym(1.1));
    let card = edited("nuisance edit split bkg .* dB d1 d2 1.02 1.03\n");
    assert_eq!(
        effects(&card, "dB"),
        [None, None, sym(1.2), None, None, sym(1.05)]
    );
    assert_eq!(
        effects(&card, "d1"),
        [None, sym(1.02), None, None, sym(1.02), None]
    );
    assert_eq!(effects(&card, "d2")[4], sym(1.03));
    let card =
        edited("nuisance edit add qcd a dB lnN 0.8 overwrite\nnuisance edit flip * * dB n2p\n");
    assert_eq!(effects(&card, "dB")[2], sym(1.0 / 0.8));
    assert_eq!(effects(&card, "dB")[1], sym(1.3));
}

#[test]
fn freeze_takes_a_pattern() {
    let files = ns_datacard::ShapeFiles::new(ns_core::FileAccess::Denied, None);
    let card = edited("nuisance edit freeze d.*\n");
    let model = ns_datacard::model(&card, &files).unwrap();
    for name in ["dB", "dS"] {
        let i = model.par_names.iter().position(|n| n == name).unwrap();
        assert!(model.parameter_sets[i].fixed[0], "{name}");
    }
    let card = edited("nuisance edit freeze nope ifexists\n");
    ns_datacard::model(&card, &files).unwrap();
    let card = edited("nuisance edit freeze nope\n");
    let e = ns_datacard::model(&card, &files).unwrap_err().to_string();
    assert!(e.contains("freeze 'nope' matches no parameter"), "{e}");
}

#[test]
fn careless_and_hostile_edits_are_refused_by_line() {
    for (line, expected) in [
        (
            "nuisance edit",
            "line 15: nuisance edit: a command is missing",
        ),
        (
            "nuisance edit mend sig a dB",
            "'mend' is not an edit Combine knows",
        ),
        (
            "nuisance edit add sig a",
            "the syntax is 'nuisance edit add PROCESS CHANNEL NAME PDF",
        ),
        (
            "nuisance edit add sig a dX lnX 1.1",
            "pdf 'lnX' is not one nextstat adds",
        ),
        (
            "nuisance edit add sig a dX lnN ten",
            "value 'ten' is not a number",
        ),
        (
            "nuisance edit add sig a dX lnN -1.1",
            "value '-1.1' is negative",
        ),
        ("nuisance edit add sig a dS lnN 1.2", "already has"),
        (
            "nuisance edit add sgi a dS lnN 1.2",
            "no column of the card matches",
        ),
        (
            "nuisance edit add sig a dS lnU 1.2",
            "exists as LnN; it cannot also be LnU",
        ),
        (
            "nuisance edit drop sig a dX",
            "'drop sig a dX' matches nothing",
        ),
        ("nuisance edit rename sig a dX dY", "matches nothing"),
        ("nuisance edit rename dX dY", "no systematic is named 'dX'"),
        (
            "nuisance edit changepdf dS gmN",
            "pdf 'gmN' is not one nextstat reads",
        ),
        (
            "nuisance edit changepdf dS shape",
            "cannot change from LnN to Shape",
        ),
        (
            "nuisance edit changepdf nope trG",
            "'changepdf nope trG' matches nothing",
        ),
        (
            "nuisance edit flip * * dB",
            "flip needs the option p2n or n2p",
        ),
        ("nuisance edit drop ( a dB", "'(' is not a pattern"),
        (
            "nuisance edit add sig a dB lnN 1.2 addq\nnuisance edit add sig a dB lnN 0.8 addq",
            "go in different directions",
        ),
    ] {
        let text = format!("{CARD}{line}\n");
        let e = match parse(&text, "card.txt") {
            Ok(_) => panic!("accepted: {line}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(expected), "{line}: {e}");
        assert!(e.contains("card.txt line 1"), "{line}: {e}");
    }
    // A pattern beyond the bound, and one whose automaton would be huge, are refused.
    let long = format!("{CARD}nuisance edit drop sig a {}\n", "a".repeat(2000));
    assert!(
        parse(&long, "card.txt")
            .unwrap_err()
            .to_string()
            .contains("at most 1000")
    );
    let huge = format!("{CARD}nuisance edit drop sig a (a{{1000}}){{1000}}\n");
    assert!(parse(&huge, "card.txt").is_err());
}

#[test]
fn trg_values_that_differ_per_process_are_refused_by_name() {
    let card = edited("nuisance edit changepdf dB trG\n");
    let e = ns_datacard::model(
        &card,
        &ns_datacard::ShapeFiles::new(ns_core::FileAccess::Denied, None),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("'dB': trG values"), "{e}");
}
