//! launch/README.md's table of nvidia-resiliency-ext's settings is the
//! launcher's own: every `--ft-*` option and configuration field, with what
//! nodeipc does with it, row for row.

use nodeipc_launch::{FT_SETTINGS, FtSupport};

const BEGIN: &str = "<!-- ft-table: begin -->";
const END: &str = "<!-- ft-table: end -->";

fn expected() -> String {
    let mut rows = vec![
        "| option | `fault_tolerance:` field | nodeipc |".to_owned(),
        "|---|---|---|".to_owned(),
    ];
    for setting in FT_SETTINGS {
        let option = setting
            .option
            .map_or("—".to_owned(), |o| format!("`--ft-{o}`"));
        let field = setting.field.map_or("—".to_owned(), |f| format!("`{f}`"));
        let support = match setting.support {
            FtSupport::Implemented => "implemented".to_owned(),
            FtSupport::Warned(why) => format!("accepted, warned: {why}"),
            FtSupport::Refused(why) => format!("refused: {why}"),
        };
        rows.push(format!("| {option} | {field} | {support} |"));
    }
    rows.join("\n")
}

#[test]
fn the_readme_table_is_the_launchers_table() {
    let readme = include_str!("../../README.md");
    let start = readme.find(BEGIN).expect("README has the ft-table markers") + BEGIN.len();
    let end = readme
        .find(END)
        .expect("README has the ft-table end marker");
    let table = readme[start..end].trim();
    let expected = expected();
    assert!(
        table == expected,
        "launch/README.md's table differs from nodeipc_launch::FT_SETTINGS; it should read:\n{expected}"
    );
}
