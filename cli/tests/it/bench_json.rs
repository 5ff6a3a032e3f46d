//! `--json` rows are JSON whatever the names and numbers hold.

use nodeipc_cli::bench::stats::Summary;
use nodeipc_cli::bench::suite::{Measured, Row};

fn measured(name: &str, median: f64) -> Measured {
    Measured {
        name: name.to_owned(),
        ns: Summary {
            median,
            p99: median * 2.0,
            min: median,
            samples: 3,
        },
    }
}

#[test]
fn regression_a_row_with_quotes_controls_and_nan_is_still_json() {
    let row = Row {
        bench: "sem",
        what: "a \"quoted\"\nname\twith controls \u{1}".to_owned(),
        params: vec![("workers", 2)],
        ours: measured("ours\\", 10.0),
        baselines: vec![
            measured("nothing measured", f64::NAN),
            measured("base", 20.0),
        ],
        note: Some("line\u{7f}note".to_owned()),
    };
    let line = row.to_json();
    let value: serde_json::Value = serde_json::from_str(&line).expect(&line);
    assert_eq!(value["what"], row.what.as_str());
    assert_eq!(value["impl"], "ours\\");
    assert_eq!(value["workers"], 2);
    assert_eq!(value["ns_per_op"], 10.0);
    assert_eq!(value["ratio"]["base"], 0.5);
    assert!(value["ratio"]["nothing measured"].is_null(), "{line}");
    assert!(
        value["baselines"]["nothing measured"]["ns_per_op"].is_null(),
        "{line}"
    );
    assert_eq!(value["note"], "line\u{7f}note");
}
