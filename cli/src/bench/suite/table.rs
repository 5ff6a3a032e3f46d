//! The table `nodeipc bench` prints.

use super::Row;

/// The rows as a table, with the machine it ran on: [`table_header`] then
/// each row's [`table_row`].
pub fn table(rows: &[Row]) -> String {
    let mut out = table_header();
    for row in rows {
        out.push_str(&table_row(row));
    }
    out
}

/// The machine it ran on and the column titles.
pub fn table_header() -> String {
    let mut out = format!("machine: {}\n", crate::bench::machine::describe());
    if crate::bench::machine::cores() >= 2 {
        out.push_str("two-process rows pinned: this process on core 0, its peer on core 1\n");
    }
    out.push_str(&format!(
        "\n{:<58} {:<36} {:>12} {:>12} {:>10}\n",
        "what", "implementation", "median", "p99", "ours/this"
    ));
    out
}

/// One row's lines: ours, each baseline, and the note.
pub fn table_row(row: &Row) -> String {
    let mut out = format!(
        "{:<58} {:<36} {:>12} {:>12} {:>10}\n",
        row.what,
        row.ours.name,
        human(row.ours.ns.median),
        human(row.ours.ns.p99),
        ""
    );
    for baseline in &row.baselines {
        out.push_str(&format!(
            "{:<58} {:<36} {:>12} {:>12} {:>10}\n",
            "",
            baseline.name,
            human(baseline.ns.median),
            human(baseline.ns.p99),
            format!("{:.3}", row.ratio(baseline))
        ));
    }
    if let Some(note) = &row.note {
        out.push_str(&format!("  {note}\n"));
    }
    out
}

/// Nanoseconds in the unit that reads best.
fn human(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}
