//! A careless user's cards: each gets an error naming the card, the line and what is wrong; a
//! card with Windows line endings reads as the same card.

use ns_datacard::{ShapeFiles, parse};

/// The model, templates read (as the CLI reads them) from a folder without ROOT files.
fn model(card: &ns_datacard::Datacard) -> ns_core::Result<ns_core::model::HistFactoryModel> {
    let folder = std::env::temp_dir();
    let files = ShapeFiles::new(
        ns_core::FileAccess::Local {
            base: Some(&folder),
        },
        None,
    );
    ns_datacard::model(card, &files)
}

const CARD: &str = "imax 1\njmax 1\nkmax 2\n---\nbin b1\nobservation 6\n---\nbin b1 b1\n\
process sig bkg\nprocess 0 1\nrate 1.0 5.5\n---\nlumi lnN 1.05 1.05\nnorm lnN - 0.9/1.3\n";

fn error(text: &str) -> String {
    match parse(text, "card.txt").and_then(|card| model(&card)) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_good_card_reads_with_any_line_endings() {
    let unix = parse(CARD, "card.txt").unwrap();
    let windows = parse(&CARD.replace('\n', "\r\n"), "card.txt").unwrap();
    assert_eq!(unix, windows);
    let model = model(&unix).unwrap();
    assert_eq!(model.par_names, ["r", "lumi", "norm"]);
}

#[test]
fn careless_cards_are_refused_by_line() {
    for (broken, expected) in [
        (
            CARD.replace("lnN 1.05 1.05", "lnN 1.05"),
            "line 13: 'lumi' has 1 entries for the card's 2 columns",
        ),
        (
            CARD.replace("rate 1.0 5.5", "rate 1.0 -5.5"),
            "line 11: the rate of 'bkg' in 'b1' is negative (-5.5)",
        ),
        (
            CARD.replace("rate 1.0 5.5", "rate 1.0 five"),
            "line 11: the rate of 'bkg' in 'b1' 'five' is not a number",
        ),
        (
            CARD.replace("norm lnN", "norm lnX"),
            "line 14: 'norm lnX': 'lnX' is not a systematic type",
        ),
        (
            CARD.replace("0.9/1.3", "0.9/-1.3"),
            "line 14: 'norm' on 'bkg' in 'b1': '0.9/-1.3' is not positive",
        ),
        (
            CARD.replace("observation 6", "observation 6 7"),
            "line 6: 2 observations, but imax declares 1 bins",
        ),
        (
            CARD.replace("jmax 1", "jmax 2"),
            "jmax declares 2 backgrounds; the card has 2 processes",
        ),
        (
            CARD.replace("kmax 2", "kmax 3"),
            "kmax declares 3 systematics; the card has 2",
        ),
        (
            CARD.replace("process 0 1", "process 1 1"),
            "no signal process",
        ),
        (
            CARD.replace("bin b1 b1", "bin 1b b1"),
            "bin '1b' starts with a digit",
        ),
        (CARD.replace("rate 1.0 5.5\n", ""), "no rate line"),
        (
            CARD.replace("process 0 1", "process"),
            "line 10: 0 process ids for 2 process names",
        ),
        (
            CARD.replace("process sig bkg", "process"),
            "line 9: a process line without processes",
        ),
        (
            format!("{CARD}x rateParam b1 bkgg 1\n"),
            "line 15: rateParam 'x' names bin 'b1' and process 'bkgg', which match no column",
        ),
        (
            format!("{CARD}lumi lnN 1.1 -\n"),
            "line 15: 'lumi' is declared twice (also on line 13)",
        ),
        (
            CARD.replace("kmax 2", "kmax 3") + "x shape 1 1\n",
            "line 15: 'x': process 'sig' in channel 'b1' has no templates",
        ),
        (
            format!("shapes * * missing.root $PROCESS\n{CARD}"),
            "shapes of process 'sig' in channel 'b1': the ROOT file",
        ),
        (
            CARD.replace("kmax 2", "kmax *") + "y rateParam b1 bkg (@0+@1) a,b\n",
            "formulas are read as products and quotients",
        ),
        (
            CARD.replace("kmax 2", "kmax *") + "b2 autoMCStats 10\n",
            "line 15: autoMCStats names channel 'b2', which the card does not have (b1)",
        ),
        (
            CARD.replace("kmax 2", "kmax *") + "b1 autoMCStats ten\n",
            "line 15: the autoMCStats threshold 'ten' is not a number",
        ),
        (
            CARD.replace("kmax 2", "kmax *") + "b1 autoMCStats 10 yes\n",
            "line 15: autoMCStats' include-signal 'yes' is not an integer",
        ),
        (
            CARD.replace("kmax 2", "kmax *") + "* autoMCStats 10 0 2\n",
            "autoMCStats hist-mode 2 on 'b1' (hist-mode 1 is read) (not built yet)",
        ),
        (
            CARD.replace("kmax 2", "kmax *") + "* autoMCStats 10\n",
            "autoMCStats on 'b1', where process 'sig' has no TH1 template",
        ),
    ] {
        let message = error(&broken);
        assert!(message.contains(expected), "{expected}\n  got: {message}");
        assert!(message.contains("card.txt"), "{message}");
    }
}

#[test]
fn no_text_panics() {
    // Every line of the card cut short, and every byte replaced, in turn.
    for cut in 0..CARD.len() {
        let _ = parse(&CARD[..cut], "card.txt").and_then(|c| model(&c));
    }
    let bytes = CARD.as_bytes();
    for i in 0..bytes.len() {
        for replacement in [b' ', b'-', b'/', b'*', b'9', b'\n', b'#', b'('] {
            let mut changed = bytes.to_vec();
            changed[i] = replacement;
            let text = String::from_utf8_lossy(&changed);
            let _ = parse(&text, "card.txt").and_then(|c| model(&c));
        }
    }
}
