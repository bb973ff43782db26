//! The catalogue of named bad inputs: message bodies, dead letters as the enricher reads them,
//! operator input and configuration values, each with what the system does with it.
//! docs/contract.md ("Bad input") shows the same table; this test checks both the behaviour and
//! that the page lists every case as it stands here (`CATALOGUE=print` prints the table).

mod catalogue;

use catalogue::{catalogue, table};

#[test]
fn every_bad_input_in_the_catalogue_gets_its_documented_outcome() {
    let cases = catalogue();
    assert!(cases.len() >= 40, "the catalogue holds {} cases", cases.len());
    let names: std::collections::BTreeSet<(&str, &str)> = cases.iter().map(|c| (c.kind, c.name)).collect();
    assert_eq!(names.len(), cases.len(), "case names are unique within a kind");
    if std::env::var("CATALOGUE").as_deref() == Ok("print") {
        for c in &cases {
            println!("{:<12} {:<45} -> {}", c.kind, c.name, c.got);
        }
        println!("{}", table(&cases));
    }
    let wrong: Vec<String> = cases
        .iter()
        .filter(|c| !c.got.contains(c.expect))
        .map(|c| format!("{} / {}: expected {:?}, got {:?}", c.kind, c.name, c.expect, c.got))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/contract.md")).unwrap_or_default();
    assert!(
        doc.contains(&table(&cases)),
        "docs/contract.md's bad-input table differs from the catalogue; print it with CATALOGUE=print"
    );
}
